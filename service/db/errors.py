"""Translate PostgreSQL errors to domain errors by SQLSTATE, never by message text."""

from __future__ import annotations

import asyncpg

from service.errors import AppError, BadRequest, Conflict, NotFound, ServiceUnavailable, Unprocessable

_BY_SQLSTATE: dict[str, tuple[type[AppError], str, str]] = {
    "23505": (Conflict, "conflict", "a row with the same unique key already exists"),
    "23503": (NotFound, "not_found", "a referenced row does not exist"),
    "23514": (Unprocessable, "constraint_violation", "a value is outside its allowed range"),
    "23502": (Unprocessable, "constraint_violation", "a required value is missing"),
    "22P02": (BadRequest, "bad_request", "a value has the wrong format"),
    "22001": (Unprocessable, "value_too_long", "a value is too long"),
    "22023": (BadRequest, "bad_request", "an invalid parameter value"),
    "22000": (BadRequest, "bad_request", "invalid data"),
    "22021": (BadRequest, "bad_request", "text contains a character the database cannot store"),
    "22P05": (BadRequest, "bad_request", "text contains a character the database cannot store"),
    "22007": (BadRequest, "bad_request", "an invalid date/time value"),
    "22008": (BadRequest, "bad_request", "a date/time value is out of range"),
    "22003": (BadRequest, "bad_request", "a number is out of range"),
    "57014": (ServiceUnavailable, "query_timeout", "the database query took too long"),
    "40001": (ServiceUnavailable, "serialization_failure", "a concurrent change conflicted; retry"),
    "40P01": (ServiceUnavailable, "deadlock", "a concurrent change conflicted; retry"),
}

_UNAVAILABLE: tuple[tuple[str, str, str, int], ...] = (
    # (SQLSTATE or class prefix, code, message, Retry-After seconds); the first match wins.
    ("08", "database_unavailable", "the database is unavailable", 1),
    ("57P", "database_unavailable", "the database is unavailable", 1),
    # Storage and permission failures say nothing about the caller's request: a full disk (53100), a
    # read-only volume (EROFS reaches us as 42501 insufficient_privilege, as does a RLS WITH CHECK
    # failure, which no org can cause with its own key), a read-only transaction (25006, a standby),
    # an I/O error (58xxx) or a corrupted page (XX). Never 404: a client must not take a write that
    # failed for the server's reasons as an answer about its data, and it retries a 503.
    ("42501", "database_storage_unavailable", "the database cannot write right now", 5),
    ("25006", "database_storage_unavailable", "the database cannot write right now", 5),
    ("53", "database_storage_unavailable", "the database is out of resources (disk, memory or connections)", 5),
    ("58", "database_storage_unavailable", "the database cannot reach its storage right now", 5),
    ("XX", "database_storage_unavailable", "the database reported an internal error", 5),
)


def translate(exc: BaseException) -> AppError | None:
    """Map a database exception to an AppError, or None if it is not a database error we know."""
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        if state in _BY_SQLSTATE:
            cls, code, message = _BY_SQLSTATE[state]
            constraint = getattr(exc, "constraint_name", None)
            details = {"sqlstate": state, **({"constraint": constraint} if constraint else {})}
            return cls(message, code=code, details=details)
        for prefix, code, message, retry_after_s in _UNAVAILABLE:
            if state.startswith(prefix):
                return ServiceUnavailable(message, code=code, details={"sqlstate": state},
                                          retry_after_s=retry_after_s)
        return None
    if isinstance(exc, TimeoutError):
        # A client-side bound (acquire, BEGIN, a statement's statement_timeout plus grace): the server
        # did not answer at all, or every pooled connection stayed busy.
        return ServiceUnavailable("the database did not answer in time", code="database_unavailable",
                                  details={"timed_out": True}, retry_after_s=1)
    if isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError, ConnectionError, OSError)):
        # InternalClientError: asyncpg's protocol state machine after the server died mid-statement
        # ("cannot switch to state 15; another operation (2) is in progress" at COMMIT).
        return ServiceUnavailable("the database is unavailable", code="database_unavailable", retry_after_s=1)
    return None

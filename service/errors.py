"""Domain errors, raised anywhere below the HTTP layer and mapped to the one error shape in ``app``.

Every 4xx/5xx response body is ``{"error": {"code", "message", "details", "request_id"}}``.
"""

from __future__ import annotations

import asyncio
from typing import Any


class AppError(Exception):
    status: int = 500
    code: str = "internal_error"

    def __init__(self, message: str, *, details: dict[str, Any] | None = None, code: str | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        self.retry_after_s = retry_after_s
        """Sent as the ``Retry-After`` header (e.g. a 503 for an overloaded service)."""
        if code is not None:
            self.code = code

    def headers(self) -> dict[str, str]:
        """Response headers this error adds to the one error body."""
        return {"Retry-After": str(self.retry_after_s)} if self.retry_after_s is not None else {}


class BadRequest(AppError):
    status = 400
    code = "bad_request"


EMPTY_BODY = "the body is empty or ends early, or a string holds an unpaired \\uD800-\\uDFFF escape"
"""What an empty (or blank, or truncated) body is told, by whichever decoder met it: the JSON decoder
says the same ("Input data was truncated") of a lone surrogate escape."""


def malformed_json(cause: Exception | str) -> BadRequest:
    """The one 400 for a body that is not JSON, whoever decoded it (``cause``: the decoder's words)."""
    said = str(cause).removeprefix("JSON is malformed: ")
    return BadRequest(f"malformed JSON: {EMPTY_BODY if said == 'Input data was truncated' else said}",
                      code="malformed_json")


def check_page_limit(limit: int, most: int) -> None:
    """400 for a page larger than this deployment serves (the schema states the same maximum)."""
    if limit > most:
        raise BadRequest(f"limit must be at most {most}", code="validation_error",
                         details={"field": "limit", "limit": most})


class Unauthorized(AppError):
    status = 401
    code = "unauthorized"

    challenge = 'Bearer realm="pgcontext"'
    """RFC 6750 section 3: a 401 names the scheme the client must use."""

    def headers(self) -> dict[str, str]:
        return {**super().headers(), "WWW-Authenticate": self.challenge}


class InvalidToken(Unauthorized):
    """A key was sent but is unknown or revoked (a missing key gets the bare challenge)."""

    challenge = 'Bearer realm="pgcontext", error="invalid_token"'


class NotFound(AppError):
    status = 404
    code = "not_found"


class Conflict(AppError):
    status = 409
    code = "conflict"


class PayloadTooLarge(AppError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(AppError):
    status = 415
    code = "unsupported_media_type"


class Unprocessable(AppError):
    status = 422
    code = "unprocessable"


class ServiceUnavailable(AppError):
    status = 503
    code = "service_unavailable"


class DeadlineExceeded(AppError):
    status = 504
    code = "deadline_exceeded"


class TooManyRequests(AppError):
    status = 429
    code = "rate_limited"


def forget_tracebacks(exc: BaseException | None) -> None:
    """Drop the tracebacks of ``exc`` and the exceptions chained to it (``__cause__``, ``__context__``).

    For a failure that becomes data (a fallback, a branch's outcome) rather than a log line: its
    traceback holds the frames it went through, and an ``asyncio.timeout``'s frame holds the task,
    which holds the exception, a reference cycle that only a full garbage collection frees, with
    every row and vector those frames held (measured: full collections stopping the event loop
    8-21 ms every few seconds at concurrency 8). Messages and types are kept."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        if exc.__cause__ is not None:
            forget_tracebacks(exc.__cause__)
        exc = exc.__context__


def forget_outcome(task: asyncio.Future[Any]) -> None:
    """A done-callback for a task nobody awaits any more: retrieves its exception, so that a late
    failure that is expected (an abandoned branch, an overdue probe, a dropped walk) is not logged
    as "exception was never retrieved"."""
    if not task.cancelled():
        task.exception()

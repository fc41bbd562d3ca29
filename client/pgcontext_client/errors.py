"""Typed errors: every error answer of the service becomes a ``PgcontextError`` subclass.

The service answers every error as ``{"error": {"code", "message", "details", "request_id"}}``; the
exception carries those four plus the HTTP status and, for 429/503, ``Retry-After``. Pick the class
by status (``except NotFound``) or look at ``code`` for the finer reason (``"unknown_model"``,
``"export_in_progress"``, ``"search_unavailable"``, ...).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import httpx
import msgspec


class PgcontextError(Exception):
    """An error answer from the service (or, as ``TransportError``, no answer at all; ``code``
    ``invalid_response``: a success answer that is not what the service sends, e.g. a proxy's page)."""

    status: int | None = None
    """The HTTP status of the answer (None: no answer, see ``TransportError``)."""

    def __init__(self, message: str, *, status: int | None = None, code: str = "error",
                 details: dict[str, Any] | None = None, request_id: str | None = None,
                 retry_after_s: float | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details or {}
        self.request_id = request_id
        self.retry_after_s = retry_after_s

    def __str__(self) -> str:
        rid = f", request_id={self.request_id}" if self.request_id else ""
        status = "" if self.status is None else f"{self.status} "
        return f"{status}{self.code}: {self.message}{rid}"


class BadRequest(PgcontextError):
    status = 400


class ValidationError(BadRequest):
    """400 ``validation_error``: the request body or a parameter is not valid (``details`` says where)."""


class Unauthorized(PgcontextError):
    """401: no API key, or a key that is unknown or revoked."""

    status = 401


class Forbidden(PgcontextError):
    status = 403


class NotFound(PgcontextError):
    """404: no such object in your org (another org's objects answer 404 too)."""

    status = 404


class Conflict(PgcontextError):
    """409: e.g. an ``Idempotency-Key`` reused with another body."""

    status = 409


class PayloadTooLarge(PgcontextError):
    status = 413


class Unprocessable(PgcontextError):
    status = 422


class RateLimited(PgcontextError):
    """429: too many requests of this kind right now (e.g. ``export_in_progress``); see ``retry_after_s``."""

    status = 429


class ServerError(PgcontextError):
    """500 and other unexpected 5xx answers."""

    status = 500


class ServiceUnavailable(PgcontextError):
    """503: a dependency is down (``redis_unavailable``, ``search_unavailable``, ...)."""

    status = 503


class Overloaded(ServiceUnavailable):
    """503 ``overloaded``: the service is shedding load; retry after ``retry_after_s``."""


class DeadlineExceeded(PgcontextError):
    """504: the caller's deadline passed (assembly never returns partial context)."""

    status = 504


class TransportError(PgcontextError):
    """No answer: the service could not be reached or the connection broke. ``status`` is None, the
    message names the URL tried, and the httpx error is the ``__cause__``."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message, code="transport_error")
        self.url = url
        """The request's full URL."""


class IncompleteExport(PgcontextError):
    """An export stream that stopped before its ``end`` line, so the lines read are not the whole
    export: the service's ``error`` line (``code`` ``export_failed``, reading failed part-way) or a
    stream that ended without one (``export_incomplete``, e.g. a proxy cut it). Run the export again."""

    def __init__(self, message: str, *, code: str, url: str | None = None) -> None:
        super().__init__(message, code=code)
        self.url = url
        """The export's full URL."""


_BY_STATUS: dict[int, type[PgcontextError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: PayloadTooLarge,
    422: Unprocessable, 429: RateLimited, 503: ServiceUnavailable, 504: DeadlineExceeded,
}
_BY_CODE: dict[tuple[int, str], type[PgcontextError]] = {
    (400, "validation_error"): ValidationError,
    (503, "overloaded"): Overloaded,
}


class _ErrorBody(msgspec.Struct):
    code: str = "error"
    message: str = ""
    details: dict[str, Any] | None = None
    request_id: str | None = None


class Envelope(msgspec.Struct):
    error: _ErrorBody


_MONTHS = {name: number for number, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}


def _seconds_until(http_date: str) -> float | None:
    """Seconds from now to an HTTP date (``Wed, 21 Oct 2015 07:28:00 GMT``), None when it is not one."""
    parts = http_date.replace(",", " ").split()
    if len(parts) != 6 or parts[5] not in ("GMT", "UTC") or parts[2] not in _MONTHS:
        return None
    try:
        hour, minute, second = (int(part) for part in parts[4].split(":"))
        when = datetime(int(parts[3]), _MONTHS[parts[2]], int(parts[1]), hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    return when.timestamp() - time.time()


def retry_after(response: httpx.Response) -> float | None:
    """``Retry-After`` in seconds: its delta-seconds form (what the service sends) or an HTTP date (what
    a proxy or load balancer may send), a date in the past being 0."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds: float | None = float(value)
    except ValueError:
        seconds = _seconds_until(value)
    if seconds is None or seconds != seconds:  # neither form, or NaN
        return None
    return max(0.0, seconds)


def invalid_response(response: httpx.Response, expected: str, exc: Exception) -> PgcontextError:
    """A success answer whose body is not the expected object: something other than the service answered
    (a proxy's page, a URL missing its path prefix), or a service too different from this client."""
    kind = response.headers.get("content-type", "no content type")
    return PgcontextError(f"{response.request.method} {response.url} answered {response.status_code} ({kind}), "
                          f"not a {expected}: {exc} (is PGCONTEXT_URL the service's address?)",
                          status=response.status_code, code="invalid_response",
                          request_id=response.headers.get("x-request-id"))


def from_response(response: httpx.Response) -> PgcontextError:
    """The exception for an error answer, whatever its body (a proxy's HTML page still gives a typed error)."""
    status = response.status_code
    try:
        body = msgspec.json.decode(response.content, type=Envelope).error
    except (msgspec.DecodeError, msgspec.ValidationError):
        text = response.text[:200] or response.reason_phrase
        body = _ErrorBody(code=f"http_{status}", message=text)
    cls = _BY_CODE.get((status, body.code)) or _BY_STATUS.get(status) or (ServerError if status >= 500 else
                                                                          PgcontextError)
    return cls(body.message, status=status, code=body.code, details=body.details,
               request_id=body.request_id or response.headers.get("x-request-id"),
               retry_after_s=retry_after(response))

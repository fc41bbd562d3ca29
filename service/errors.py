"""Domain errors, raised anywhere below the HTTP layer and mapped to the one error shape in ``app``.

Every 4xx/5xx response body is ``{"error": {"code", "message", "details", "request_id"}}``.
"""

from __future__ import annotations

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


class BadRequest(AppError):
    status = 400
    code = "bad_request"


class Unauthorized(AppError):
    status = 401
    code = "unauthorized"


class NotFound(AppError):
    status = 404
    code = "not_found"


class Conflict(AppError):
    status = 409
    code = "conflict"


class PayloadTooLarge(AppError):
    status = 413
    code = "payload_too_large"


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

"""The service's one error shape as the OpenAPI schema states it, and ``responses=`` for handlers.

A feature's handlers declare the error statuses particular to an operation with
``responses=errors(404, 409)`` on their decorator; :func:`service.http.openapi.finish_schema` adds
the ones every authenticated, parameterised or body-carrying operation shares.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
from litestar.openapi import ResponseSpec


class ErrorInfo(msgspec.Struct):
    code: str
    """Stable, machine-readable (``validation_error``, ``not_found``, ``rate_limited``, ...)."""
    message: str
    """For a human: what was wrong and, where it helps, the limit or the expected form."""
    details: dict[str, Any]
    """More about this error (e.g. ``field``, ``limit``, validation ``errors``); may be empty."""
    request_id: str
    """The request's id, as in the ``X-Request-ID`` response header and the service's logs."""


class ErrorBody(msgspec.Struct):
    """Every 4xx and 5xx answer of the service has this body."""

    error: ErrorInfo


ERROR_DESCRIPTIONS: Final[dict[int, str]] = {
    400: "Bad input: malformed JSON, nested more than 32 levels, a field of the wrong type, form or range, "
         "a bad id or cursor (`validation_error`, `malformed_json`, `bad_id`, ...).",
    401: "Missing, invalid or revoked API key (`unauthorized`). Send `Authorization: Bearer <key>`.",
    404: "Not found in the caller's org (another org's ids look exactly the same).",
    409: "Conflicts with the stored state (e.g. `idempotency_key_reused`, `managed_by_documents`).",
    413: "Too large: the body, a text, metadata or a batch is over its limit (`payload_too_large`, "
         "`text_too_long`, `metadata_too_large`, `batch_too_large`, ...); `details.limit` says the limit.",
    415: "The body was not sent as JSON (`unsupported_media_type`): send `Content-Type: application/json` "
         "(a `charset`, if given, `utf-8`); `details.accepted` lists the accepted type.",
    422: "Well-formed but cannot be done (e.g. `context_budget_too_small`).",
    429: "Too many requests: the org's rate limit (`rate_limited`) or a per-org concurrency limit; "
         "retry after `Retry-After` seconds.",
    503: "A dependency is unavailable or the service is overloaded (`database_unavailable`, "
         "`database_storage_unavailable`, `redis_unavailable`, `embedding_unavailable`, `overloaded`, ...); "
         "retry, after `Retry-After` seconds when given.",
    504: "The deadline passed before the answer was ready (`deadline_exceeded`, `client_disconnected`).",
}

ERROR_HEADERS: Final[dict[int, dict[str, str]]] = {
    401: {"WWW-Authenticate": "The scheme to authenticate with: `Bearer`."},
    429: {"Retry-After": "Seconds to wait before retrying."},
    503: {"Retry-After": "Seconds to wait before retrying (when the service is overloaded)."},
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` for a handler's decorator: the error statuses particular to the operation."""
    return {status: ResponseSpec(data_container=ErrorBody, description=ERROR_DESCRIPTIONS[status],
                                 generate_examples=False) for status in statuses}

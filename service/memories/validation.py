"""Checks msgspec's schema cannot express: limits from settings, NULs, vector shape."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Final

import msgspec
import numpy as np

from service.errors import BadRequest, PayloadTooLarge, Unprocessable
from service.memories.types import DOCUMENT_CHUNK_KIND, MESSAGE_KIND
from service.settings import LimitSettings


def check_text(text: str, limits: LimitSettings, *, field: str = "text") -> None:
    if not text.strip():
        raise BadRequest(f"{field} must not be empty", code="validation_error", details={"field": field})
    check_text_limits(text, limits, field=field)


def check_text_limits(text: str | None, limits: LimitSettings, *, field: str = "search_context") -> None:
    """Length and NUL checks of a text field, which may be empty or null here (``search_context``;
    :func:`check_text` adds "not empty" for ``text``)."""
    if text is None:
        return
    if len(text) > limits.max_text_chars:
        raise PayloadTooLarge(
            f"{field} is {len(text)} characters; the limit is {limits.max_text_chars}",
            code="text_too_long", details={"field": field, "limit": limits.max_text_chars},
        )
    if "\x00" in text:
        raise BadRequest(f"{field} must not contain NUL characters", code="validation_error",
                         details={"field": field})


def check_kind(kind: str) -> None:
    if kind == MESSAGE_KIND:
        raise BadRequest(f"kind {MESSAGE_KIND!r} is reserved: append messages with POST "
                         "/v1/conversations/{conversation_id}/messages", code="reserved_kind",
                         details={"field": "kind"})
    if kind == DOCUMENT_CHUNK_KIND:
        raise BadRequest(f"kind {DOCUMENT_CHUNK_KIND!r} is reserved: ingest documents with POST /v1/documents",
                         code="reserved_kind", details={"field": "kind"})


def check_metadata(metadata: dict[str, Any], limits: LimitSettings) -> None:
    encoded = msgspec.json.encode(metadata)
    if len(encoded) > limits.max_metadata_bytes:
        raise PayloadTooLarge(f"metadata is {len(encoded)} bytes; the limit is {limits.max_metadata_bytes}",
                              code="metadata_too_large", details={"limit": limits.max_metadata_bytes})
    if b"\\u0000" in encoded:
        raise BadRequest("metadata must not contain NUL characters", code="validation_error")


MAX_EMBEDDING_VALUE: Final = 1e15
"""Per-component bound: float32 squares of larger values overflow, and the stored vector comes out zero."""
MIN_EMBEDDING_COMPONENT: Final = 1e-6
"""At least one component must be this large in magnitude: a zero or denormal-tiny vector has no direction
(normalising it loses it, and cosine scores come out NaN). Stated per component, not as a norm, so the
OpenAPI schema can say it exactly (``contains``)."""


def check_embedding(vector: list[float], dim: int) -> None:
    if len(vector) != dim:
        raise BadRequest(f"embedding has {len(vector)} dimensions; this service uses {dim}",
                         code="validation_error", details={"field": "embedding"})
    if not all(math.isfinite(x) for x in vector):
        raise BadRequest("embedding values must be finite numbers", code="validation_error",
                         details={"field": "embedding"})
    vec = np.asarray(vector, dtype=np.float64)
    if float(np.abs(vec).max(initial=0.0)) > MAX_EMBEDDING_VALUE:
        raise BadRequest(f"embedding values must be at most {MAX_EMBEDDING_VALUE:g} in magnitude (stored as "
                         "float32, larger values overflow to the zero vector)", code="validation_error",
                         details={"field": "embedding"})
    if float(np.abs(vec).max(initial=0.0)) < MIN_EMBEDDING_COMPONENT:
        raise BadRequest(f"embedding must have a component of magnitude at least {MIN_EMBEDDING_COMPONENT:g} (a zero "
                         "or denormal-tiny vector has no direction to compare)", code="validation_error",
                         details={"field": "embedding"})


OCCURRED_MIN: Final = datetime(1900, 1, 1, tzinfo=UTC)
OCCURRED_MAX: Final = datetime(2200, 1, 1, tzinfo=UTC)
"""``occurred_at`` and ``expires_at`` bounds: the years 1900-2199, in UTC and as written (its own
offset), so ``1900-01-01T00:00:00+01:00`` (1899 in UTC) is out, and so is ``1899-12-31T23:00:00-01:00``,
which the schema's pattern refuses. Wide enough for any real event time, narrow enough to catch a unit
slip (milliseconds read as seconds, a zero date) that would otherwise sink or float a memory's recency,
or answer an expiry in year 0 that no RFC 3339 date-time can carry."""
OCCURRED_PATTERN: Final = r"^(?:19|20|21)[0-9]{2}-"
"""The schema's part of the bounds: the year as written."""


def check_occurred_at(value: datetime, *, field: str = "occurred_at") -> None:
    if value.tzinfo is None:  # the request types already require it; callers in Python may not
        raise BadRequest(f"{field} must carry a timezone (RFC 3339, e.g. 2024-05-01T14:30:00Z)",
                         code="validation_error", details={"field": field})
    # as written first: then converting to UTC cannot leave the years datetime can hold
    written = value.replace(tzinfo=UTC)
    if not (OCCURRED_MIN <= written < OCCURRED_MAX and OCCURRED_MIN <= value < OCCURRED_MAX):
        raise BadRequest(f"{field} must be from {OCCURRED_MIN:%Y-%m-%d} up to (not including) "
                         f"{OCCURRED_MAX:%Y-%m-%d} UTC, got {value.isoformat()}",
                         code="validation_error", details={"field": field})


def check_time_range(after: datetime | None, before: datetime | None, name: str, *, field: str) -> None:
    """422 for an empty time range (``{name}_after`` not before ``{name}_before``): well-formed fields that
    no JSON schema can relate to each other, so not a 400 (which means "does not match the schema")."""
    if after is not None and before is not None and after >= before:
        raise Unprocessable(f"{name}_after must be before {name}_before", code="validation_error",
                            details={"field": field})

"""A search request's checks beyond its schema: what msgspec cannot express (limits from settings,
NUL characters, fields that exclude each other), each a 400 in the one error shape."""

from __future__ import annotations

import msgspec

from service.errors import BadRequest
from service.retrieval.filters import check_time_ranges
from service.retrieval.types import SearchRequest


def check_query(query: str, *, max_query_chars: int) -> None:
    """400 ``validation_error`` for a query that is empty, longer than ``max_query_chars`` or holds NUL
    (an assembly checks its query so before it reads it)."""
    if not query.strip():
        raise BadRequest("query must not be empty", code="validation_error", details={"field": "query"})
    if len(query) > max_query_chars:
        raise BadRequest(f"query is {len(query)} characters; the limit is {max_query_chars}",
                         code="validation_error", details={"field": "query"})
    if "\x00" in query:
        raise BadRequest("query must not contain NUL characters", code="validation_error",
                         details={"field": "query"})


def check_search(request: SearchRequest, *, max_query_chars: int, max_limit: int) -> None:
    """400 ``validation_error`` for a query that is empty, longer than ``max_query_chars`` or holds NUL,
    a ``limit`` above ``max_limit``, empty ``modes``/``kinds``/``levels`` lists, ``modes`` with a
    strategy other than ``auto`` and NUL in ``filters.metadata``; 422 for an empty time range."""
    check_query(request.query, max_query_chars=max_query_chars)
    if request.limit > max_limit:
        raise BadRequest(f"limit must be at most {max_limit}", code="validation_error",
                         details={"field": "limit"})
    f = request.filters
    check_time_ranges(f)
    if f.metadata is not None and b"\\u0000" in msgspec.json.encode(f.metadata):
        raise BadRequest("filters.metadata must not contain NUL characters", code="validation_error")
    if request.modes == []:
        raise BadRequest("modes must not be an empty list (omit it for the strategy search, or use \"all\")",
                         code="validation_error", details={"field": "modes"})
    if request.modes is not None and request.strategy != "auto":
        raise BadRequest("modes and strategy are exclusive: a modes search fuses the named modes itself",
                         code="validation_error", details={"field": "strategy"})
    if f.kinds == [] or f.levels == []:
        raise BadRequest("filters.kinds and filters.levels must not be empty lists (omit them instead)",
                         code="validation_error", details={"field": "filters"})

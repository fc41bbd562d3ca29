"""Search filters as the positional SQL arguments every branch query takes (in this order)."""

from __future__ import annotations

from typing import Any

from service.memories.validation import check_time_range
from service.retrieval.types import SearchFilters


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching ``prefix`` literally: its own % and _ must not act as wildcards."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def check_time_ranges(filters: SearchFilters) -> None:
    """422 for an empty time range (:func:`check_time_range`)."""
    for name in ("created", "occurred"):
        check_time_range(getattr(filters, f"{name}_after"), getattr(filters, f"{name}_before"),
                         f"filters.{name}", field="filters")


def filter_args(filters: SearchFilters) -> tuple[Any, ...]:
    """agent_id, kinds, metadata, created_after, created_before, source LIKE pattern, levels,
    occurred_after, occurred_before."""
    return (
        filters.agent_id,
        filters.kinds,
        filters.metadata,
        filters.created_after,
        filters.created_before,
        None if filters.source_prefix is None else like_prefix(filters.source_prefix),
        filters.levels,
        filters.occurred_after,
        filters.occurred_before,
    )


def source_args(filters: SearchFilters) -> tuple[Any, ...]:
    """sources, collections: the filter arguments each branch query takes after its others
    (``retrieval.lexical_bm25``, ``semantic_hnsw``, ``mode_filter``)."""
    return (filters.sources, filters.collections)


def currency_args(filters: SearchFilters) -> tuple[Any, ...]:
    """Which memories count, after the source arguments of a branch query: valid at ``as_of`` when
    set; else all when ``include_superseded``; else the current ones only."""
    return filters.as_of, filters.include_superseded


def conversation_args(filters: SearchFilters) -> tuple[Any, ...]:
    """The conversations whose messages may be found, the last argument of the lexical and semantic
    queries (lookups find document chunks only)."""
    return (filters.conversations,)

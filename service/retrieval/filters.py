"""Search filters as the positional SQL arguments every branch query takes (in this order)."""

from __future__ import annotations

from typing import Any

from service.retrieval.types import SearchFilters


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching ``prefix`` literally: its own % and _ must not act as wildcards."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def filter_args(filters: SearchFilters) -> tuple[Any, ...]:
    """agent_id, kinds, metadata, created_after, created_before, source LIKE pattern, levels."""
    return (
        filters.agent_id,
        filters.kinds,
        filters.metadata,
        filters.created_after,
        filters.created_before,
        None if filters.source_prefix is None else like_prefix(filters.source_prefix),
        filters.levels,
    )

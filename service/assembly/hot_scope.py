"""Which of a hot set's items an assembly may use, and when it leaves the hot set out altogether.

A hot set holds an agent's own and the org-wide current memories (never document chunks nor
conversations' messages) and is cached as such for every request: a request's scope and
``retrieval.filters`` are applied to what is read, never to what is cached. What an item cannot be
checked against (its metadata is not in the set) leaves the hot set out, as ``as_of`` does, and the
cold search alone answers.
"""

from __future__ import annotations

import dataclasses

from service.assembly.hot import HotItem, HotRead
from service.assembly.types import AssembleRequest
from service.retrieval.types import SearchFilters, source_of

DISABLED = "disabled by the request"


def left_out(req: AssembleRequest) -> str | None:
    """Why the request leaves the hot set out (None: it does not), as the branch reports it."""
    filters = req.retrieval.filters
    if not req.retrieval.use_hot:
        return DISABLED
    if filters.as_of is not None or filters.include_superseded:
        return "the hot set holds current memories; the request asked for as_of or include_superseded"
    if filters.metadata is not None:
        return "the hot set does not hold metadata; the request filters by it"
    return None


def _matches(item: HotItem, filters: SearchFilters, org_wide: bool) -> bool:
    """Whether ``item`` passes the filters as the search applies them (a missing value passes no range)."""
    if item.agent_id is None and not org_wide:
        return False
    if filters.source_prefix is not None or filters.levels is not None:
        return False  # they keep document chunks only
    if filters.sources is not None and source_of(item.kind) not in filters.sources:
        return False
    if filters.kinds is not None and item.kind not in filters.kinds:
        return False
    created, occurred = item.created_at, item.occurred_at
    return ((filters.created_after is None or created >= filters.created_after)
            and (filters.created_before is None or created < filters.created_before)
            and (filters.occurred_after is None or (occurred is not None and occurred >= filters.occurred_after))
            and (filters.occurred_before is None or (occurred is not None and occurred < filters.occurred_before)))


def in_scope(read: HotRead, filters: SearchFilters, *, org_wide: bool = True) -> HotRead:
    """The items an assembly may use: those passing its ``retrieval.filters`` (sources, kinds, created
    and occurred ranges; the agent is the request's; collections and conversations concern chunks and
    messages, which a set never holds), and the org-wide ones (``agent_id`` null) only with
    ``org_wide`` (its ``retrieval.include_org_wide``)."""
    return dataclasses.replace(read, items=[item for item in read.items if _matches(item, filters, org_wide)])

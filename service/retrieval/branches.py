"""The branch queries, each on an org-scoped TenantTx: BM25 lexical, HNSW semantic, exact by ids.

Callers open one transaction per branch (so hybrid branches run on separate pooled connections);
the transaction's ``statement_timeout`` is the branch deadline, so Postgres stops too.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import numpy as np
import numpy.typing as npt
from pgvector import Vector

from service.db import TenantTx
from service.retrieval.filters import conversation_args, currency_args, filter_args, source_args
from service.retrieval.hits import Hit, hits_from_rows
from service.retrieval.types import SearchFilters

RowsScope = tuple[str, bool, bool]
"""(agent_id, include org-wide rows, include org-wide document chunks): the only rows a branch returns
(after ranking the whole org as usual), with their scoring fields (context assembly's cold search)."""


def scope_args(scope: RowsScope | None) -> tuple[bool, str | None, bool]:
    return (False, None, False) if scope is None else (True, scope[0], scope[1])


def scope_documents(scope: RowsScope | None) -> bool:
    """Whether org-wide document chunks are in ``scope`` (always, unscoped)."""
    return True if scope is None else scope[2]


def lexical_args(filters: SearchFilters, rows_scope: RowsScope | None, context_weight: float) -> tuple[Any, ...]:
    """The arguments of ``retrieval.lexical_bm25`` from ``$8`` on (after the org, the query, the postings
    per term, the prefetch, the limit, k1 and b)."""
    return (*filter_args(filters), *scope_args(rows_scope), context_weight, *source_args(filters),
            scope_documents(rows_scope), *currency_args(filters), *conversation_args(filters))


def semantic_args(filters: SearchFilters, rows_scope: RowsScope | None) -> tuple[Any, ...]:
    """The arguments of ``retrieval.semantic_hnsw`` from ``$4`` on (after the org, the vector and the limit)."""
    return (*filter_args(filters), *scope_args(rows_scope), *source_args(filters), scope_documents(rows_scope),
            *currency_args(filters), *conversation_args(filters))


UNBOUNDED_PREFETCH = 1_000_000
PREFETCH_MARGIN = 32
"""Extra scored ids fetched beyond ``limit`` when unfiltered, for rows that turn out to be expired."""


async def branch_delay(tx: TenantTx, delay_ms: int) -> None:
    if delay_ms > 0:
        await tx.fetchval("retrieval.branch_delay", delay_ms)


async def lexical_bm25(tx: TenantTx, query: str, filters: SearchFilters, *, limit: int, postings_per_term: int,
                       k1: float, b: float, context_weight: float,
                       rows_scope: RowsScope | None = None) -> list[Hit]:
    """BM25 hits (a memory's ``search_context`` terms weighted ``context_weight`` against its text's);
    with ``rows_scope`` the best ``limit`` that are that agent's (or org-wide), carrying their embedding
    and last access too."""
    # Unfiltered, the best limit+margin scores are enough; with filters or a scope we cannot know how
    # many scored ids will pass, so every read posting is joined.
    prefetch = limit + PREFETCH_MARGIN if filters.is_empty() and rows_scope is None else UNBOUNDED_PREFETCH
    rows = await tx.fetch("retrieval.lexical_bm25", tx.org_id, query, postings_per_term, prefetch, limit, k1, b,
                          *lexical_args(filters, rows_scope, context_weight))
    return hits_from_rows(rows)


def lexical_settings(filters: SearchFilters) -> dict[str, str]:
    """GUCs for the BM25 query's transaction (pass to ``Database.tenant(settings=...)``).

    Unfiltered, its plan does not depend on the org or the query (index scans of the postings by
    (org, term), the rows by primary key), so a generic plan is reused instead of planning every
    call: 2.4 vs 2.9 ms per query at 100K memories, planning having been ~1.6 ms of it. Filtered
    queries keep custom plans (the joined row count then depends on the parameters)."""
    return {"plan_cache_mode": "force_generic_plan"} if filters.is_empty() else {}


def hnsw_settings(*, limit: int, ef_search: int) -> dict[str, str]:
    # relaxed_order lets pgvector keep walking the graph until `limit` rows pass the org/filters
    # (without it a filtered query returned a median 4 of 50 rows); results are re-sorted below.
    return {"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": str(max(ef_search, limit))}


async def semantic_hnsw(tx: TenantTx, embedding: npt.NDArray[np.float32], filters: SearchFilters, *, limit: int,
                        ef_search: int, rows_scope: RowsScope | None = None) -> list[Hit]:
    """HNSW search; costs no extra round trip when the transaction began with :func:`hnsw_settings`.
    With ``rows_scope`` the nearest ``limit`` that are that agent's (or org-wide), the walk passing
    over the others, carrying their embedding and last access too."""
    await tx.set_local(hnsw_settings(limit=limit, ef_search=ef_search))
    rows = await tx.fetch("retrieval.semantic_hnsw", tx.org_id, Vector(embedding), limit,
                          *semantic_args(filters, rows_scope))
    return sorted(hits_from_rows(rows), key=lambda h: -h.score)


async def search_l1_by_ids(tx: TenantTx, embedding: npt.NDArray[np.float32], ids: list[UUID], *,
                           limit: int) -> list[Hit]:
    """Exact vector ranking of exactly ``ids`` (the cascade's second step)."""
    rows = await tx.fetch("retrieval.search_l1_by_ids", tx.org_id, Vector(embedding), ids, limit)
    return hits_from_rows(rows)

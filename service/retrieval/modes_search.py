"""The ``modes`` search path: every named mode concurrently on its own connection, RRF across modes.

:meth:`~service.retrieval.engine.RetrievalEngine.search` takes this path for a request with ``modes``;
the per-mode database work and the fusion are in :mod:`service.retrieval.modes`. Lookup modes run
under the lexical deadline; a failed mode is reported and the others are fused; only when every mode
fails is it a 503.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol, TypeVar
from uuid import UUID

import numpy as np
import numpy.typing as npt

from service.db import Database, TenantTx
from service.documents.lookup import LookupMode
from service.errors import ServiceUnavailable
from service.retrieval import branches, modes
from service.retrieval.guard import BranchFailed, guard
from service.retrieval.modes import ModeHit
from service.retrieval.run import SearchRun
from service.retrieval.types import Mode, ModeMetrics, SearchRequest, SearchResult
from service.settings import RetrievalSettings
from service.timing import elapsed_ms

T = TypeVar("T")


class Engine(Protocol):
    """What this path needs of the engine (:class:`~service.retrieval.engine.RetrievalEngine` has it)."""

    @property
    def settings(self) -> RetrievalSettings: ...

    @property
    def db(self) -> Database: ...

    async def embed_query(self, org_id: UUID, query: str, run: SearchRun | None = None) -> npt.NDArray[np.float32]: ...

    async def branch(self, name: Literal["lexical", "semantic"], timeout_ms: int, org_id: UUID, run: SearchRun,
                     query: Callable[[TenantTx], Awaitable[list[T]]],
                     settings: dict[str, str] | None = None) -> list[T]: ...


async def search_modes(engine: Engine, org_id: UUID, request: SearchRequest, names: list[Mode],
                       run: SearchRun) -> tuple[list[SearchResult], float]:
    """Run ``names`` concurrently and fuse their hits by memory id (results, fusion ms)."""
    s, tuning = engine.settings, request.tuning
    pushed, _ = modes.lookup_filters(request.filters)

    async def lookup_mode(mode: LookupMode) -> list[ModeHit]:
        if pushed is None:
            return []  # the kinds filter excludes document chunks: nothing to look up

        async def on(tx: TenantTx) -> list[ModeHit]:
            await branches.branch_delay(tx, s.branch_delay_ms)
            return await modes.run_lookup(tx, mode, request, limit=max(tuning.lookup_candidates, request.limit))

        async def work() -> list[ModeHit]:
            return await engine.db.read(org_id, on, timeout_ms=s.lexical_timeout_ms)

        return await guard(mode, s.lexical_timeout_ms, work)

    async def lexical_mode() -> list[ModeHit]:
        return await engine.branch("lexical", s.lexical_timeout_ms, org_id, run, lambda tx: modes.run_lexical(
            tx, request, limit=max(tuning.lexical_candidates, request.limit),
            postings_per_term=s.postings_per_term, k1=s.bm25_k1, b=s.bm25_b,
            context_weight=s.search_context_weight))

    async def semantic_mode() -> list[ModeHit]:
        vector = await engine.embed_query(org_id, request.query, run)
        limit, ef_search = max(tuning.semantic_candidates, request.limit), tuning.ef_search or s.ef_search
        return await engine.branch("semantic", s.semantic_timeout_ms, org_id, run, lambda tx: modes.run_semantic(
            tx, request, vector, limit=limit, ef_search=ef_search),
            branches.hnsw_settings(limit=limit, ef_search=ef_search))

    async def timed(mode: Mode) -> list[ModeHit]:
        started = time.perf_counter()
        try:
            if mode == "lexical":
                hits = await lexical_mode()
            elif mode == "semantic":
                hits = await semantic_mode()
            else:
                hits = await lookup_mode(mode)
        except BranchFailed as exc:
            run.modes[mode] = ModeMetrics(ms=elapsed_ms(started), candidates=None, error=str(exc))
            raise
        run.modes[mode] = ModeMetrics(ms=elapsed_ms(started), candidates=len(hits))
        return hits

    outcomes = await asyncio.gather(*(timed(m) for m in names), return_exceptions=True)
    lists: dict[Mode, list[ModeHit]] = {}
    failures: dict[str, str] = {}
    for mode, outcome in zip(names, outcomes, strict=True):
        if isinstance(outcome, BranchFailed):
            failures[mode] = str(outcome)
            if run.reduction is None:
                run.reduction = outcome.reason
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            lists[mode] = outcome
    if not lists:
        raise ServiceUnavailable("search is unavailable: every requested mode failed",
                                 code="search_unavailable", details=failures)
    run.fallbacks.extend(f"{reason}; fused the other modes" for reason in failures.values())
    started = time.perf_counter()
    results = modes.fuse(lists, k=tuning.rrf_k, limit=request.limit)
    return results, elapsed_ms(started)

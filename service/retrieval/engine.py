"""The retrieval engine: validates a search, plans it, runs the branches with deadlines, fuses, reports.

Everything that searches memories (the HTTP endpoint, context assembly) goes through
:meth:`RetrievalEngine.search`. Each branch runs in its own org-scoped transaction on its own pooled
connection with ``statement_timeout`` set to the branch deadline, inside an asyncio timeout with the
same deadline, so a slow branch is abandoned by both the client and Postgres.

A request with ``modes`` takes a separate path (:mod:`service.retrieval.modes_search`): every named mode
runs concurrently the same way (lookup modes under the lexical deadline), a failed mode is reported
and the others are fused (RRF by memory id, :func:`service.retrieval.modes.fuse`); only when every
mode fails is it a 503. Without ``modes`` nothing of that path runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar
from uuid import UUID

import asyncpg
import msgspec
import numpy as np
import numpy.typing as npt
import structlog

from service.db import Database, TenantTx
from service.embeddings import Embedder
from service.embeddings.lanes import EmbeddingLanes
from service.errors import ServiceUnavailable
from service.retrieval import branches, fusion, modes, rerank, speakers
from service.retrieval.guard import BranchFailed, guard, unavailable
from service.retrieval.hits import Hit
from service.retrieval.modes_search import search_modes
from service.retrieval.planner import EMBEDDER_BUSY, EMBEDDER_DOWN, Plan, choose, planned_strategy
from service.retrieval.query_cache import QueryEmbeddingCache
from service.retrieval.query_embedding import QueryEmbedder
from service.retrieval.run import SearchRun, StepTimeouts, fusion_depth, semantic_depth
from service.retrieval.speakers import SpeakerBoost
from service.retrieval.types import (
    Mode,
    RetrievalReport,
    SearchMetrics,
    SearchRequest,
    SearchResponse,
    SearchResult,
    SearchTuning,
    UsedStrategy,
)
from service.retrieval.validation import check_search
from service.settings import EmbeddingSettings, RetrievalSettings
from service.timing import elapsed_ms

log = structlog.get_logger(__name__)
T = TypeVar("T")


DB_TIMEOUT_GRACE_MS = 3
"""A branch's asyncio deadline trails its statement_timeout by this much (see ``RetrievalEngine.branch``)."""

class RetrievalEngine:
    """Hybrid retrieval over an org's memories. One instance per app (``services.extras["retrieval"]``)."""

    def __init__(self, db: Database, embedder: Embedder, settings: RetrievalSettings, *, max_limit: int,
                 lanes: EmbeddingLanes | None = None) -> None:
        self.db = db
        self.embedder = embedder
        self._background: set[asyncio.Future[list[Hit]]] = set()
        self.queries = QueryEmbedder(lanes or EmbeddingLanes(embedder, EmbeddingSettings()), settings)
        """The query embeddings: the org's cache, the shared query lane, the circuit per org."""
        self.settings = settings
        self.max_limit = max_limit
        self.reranker = rerank.build_reranker(settings.rerank)

    async def aclose(self) -> None:
        if self.reranker is not None:
            await self.reranker.aclose()

    # -- public API --------------------------------------------------------------------------------

    async def search(self, org_id: UUID, request: SearchRequest, *, budget_ms: float | None = None) -> SearchResponse:
        """Run ``request`` for ``org_id``. Raises BadRequest on invalid input, ServiceUnavailable (503)
        when no branch could answer. After ``budget_ms`` no fallback branch is started any more."""
        return await self._search(org_id, request, SearchRun(), budget_ms)

    async def search_rows(self, org_id: UUID, request: SearchRequest, scope: branches.RowsScope, *,
                          budget_ms: float | None = None, postings_per_term: int | None = None,
                          timeouts: StepTimeouts | None = None,
                          ) -> tuple[SearchResponse, dict[UUID, asyncpg.Record]]:
        """:meth:`search` narrowed to ``scope``, plus the branch rows of the hits by id with their
        scoring fields (agent_id, importance, usefulness, pinned, created_at, embedding,
        last_accessed_at): context assembly ranks the results without reading them again.

        Each branch ranks the org as for :meth:`search` (its best ``limit`` rows) and returns only
        those in ``scope`` — the agent's own and, if asked, org-wide ones — so out-of-scope rows
        never cross the wire; fusion then ranks the in-scope hits among themselves. Rows the
        branches did not return (e.g. ``modes`` hits) are simply absent. ``postings_per_term``
        overrides the BM25 depth for this search, ``timeouts`` the engine's step deadlines."""
        run = SearchRun(rows_scope=scope, postings_per_term=postings_per_term, timeouts=timeouts)
        response = await self._search(org_id, request, run, budget_ms)
        return response, run.rows

    async def _search(self, org_id: UUID, request: SearchRequest, run: SearchRun,
                      budget_ms: float | None) -> SearchResponse:
        self.validate(request)
        if budget_ms is not None:
            run.deadline = run.started + budget_ms / 1000
        asked = request
        if self.reranker is not None:
            # The strategies below fuse the reranker's top-N; it keeps the best ``limit`` (``asked``).
            request = msgspec.structs.replace(request, limit=rerank.candidates(self.reranker, request.limit))
        ran: list[Mode] | None = None
        planned = planned_strategy(request)
        if request.modes is not None:
            available = self.embedder_available(org_id)
            ran, reason = modes.resolve_modes(request, embedder_available=available)
            if not available and request.modes == "all":
                run.reduction = "embedder_circuit_open"
            used: UsedStrategy = "modes"
            results, fusion_ms = await search_modes(self, org_id, request, ran, run)
        else:
            if request.strategy == "auto":
                busy = (self.embedder_busy(org_id, run.timeout_ms("embedding", self.settings))
                        and self.cached_embedding(org_id, request.query) is None)
                plan = choose(request.query, request.filters, embedder_available=self.embedder_available(org_id),
                              embedder_busy=busy)
                if plan.reason in (EMBEDDER_DOWN, EMBEDDER_BUSY):
                    run.reduction = "embedder_circuit_open" if plan.reason == EMBEDDER_DOWN else "embedder_busy"
            else:
                plan = Plan(request.strategy, "requested")
            runner = {"hybrid": self._hybrid, "lexical_first": self._cascade,
                      "semantic": self._semantic_only, "lexical": self._lexical_only}[plan.strategy]
            used, results, fusion_ms = await runner(org_id, request, run)
            reason = plan.reason if run.fusion_reason is None else f"{plan.reason}; {run.fusion_reason}"
        report, rerank_ms = None, None
        if self.reranker is not None:
            remaining = None if run.deadline is None else (run.deadline - time.perf_counter()) * 1000
            results, report, rerank_ms = await rerank.apply(self.reranker, request.query, results,
                                                            limit=asked.limit, remaining_ms=remaining)
        request = asked  # the response reports what the caller asked for
        metrics = SearchMetrics(
            total_ms=elapsed_ms(run.started), embedding_ms=run.embedding_ms, embedding_cached=run.embedding_cached,
            lexical_ms=run.lexical_ms,
            semantic_ms=run.semantic_ms, fusion_ms=fusion_ms, lexical_candidates=run.lexical_candidates,
            semantic_candidates=run.semantic_candidates, final_count=len(results),
            modes=run.modes if ran is not None else None, rerank_ms=rerank_ms,
        )
        return SearchResponse(
            query=request.query, requested_strategy=request.strategy, strategy=used, reason=reason,
            fallback_reason="; ".join(run.fallbacks) or None, results=results, metrics=metrics, modes=ran,
            rerank=report,
            retrieval=RetrievalReport(planned=planned, ran=used, reduced=run.reduction is not None,
                                      reason=run.reduction or "planned"),
        )

    def validate(self, request: SearchRequest) -> None:
        """400 for what the request's schema cannot say (:func:`~service.retrieval.validation.check_search`)."""
        check_search(request, max_query_chars=self.settings.max_query_chars, max_limit=self.max_limit)

    @property
    def cache(self) -> QueryEmbeddingCache:
        return self.queries.cache

    def embedder_available(self, org_id: UUID) -> bool:
        """This org's query-embedding circuit is closed (:meth:`QueryEmbedder.available`)."""
        return self.queries.available(org_id)

    def cached_embedding(self, org_id: UUID, query: str) -> npt.NDArray[np.float32] | None:
        """The org's cached embedding of ``query``, if any (no LRU touch, not counted as a hit or miss)."""
        return self.queries.cached(org_id, query)

    def embedder_busy(self, org_id: UUID, timeout_ms: int | None = None) -> bool:
        """One more query embedding would likely miss its deadline (:meth:`QueryEmbedder.busy`)."""
        return self.queries.busy(org_id, timeout_ms)

    # -- steps -------------------------------------------------------------------------------------

    async def embed_query(self, org_id: UUID, query: str, run: SearchRun | None = None) -> npt.NDArray[np.float32]:
        """The query's embedding, from the org's LRU entries or the embedder (under the embedding deadline)."""
        started = time.perf_counter()
        cached = False
        try:
            vector, cached = await self.queries.embed(
                org_id, query, None if run is None else run.timeout_ms("embedding", self.settings))
        finally:
            if run is not None:
                run.embedding_ms, run.embedding_cached = elapsed_ms(started), cached
        return vector

    async def _lexical(self, org_id: UUID, request: SearchRequest, limit: int, run: SearchRun) -> list[Hit]:
        s = self.settings
        postings = run.postings_per_term or s.postings_per_term
        return await self.branch("lexical", run.timeout_ms("lexical", s), org_id, run, lambda tx: branches.lexical_bm25(
            tx, request.query, request.filters, limit=limit, postings_per_term=postings,
            k1=s.bm25_k1, b=s.bm25_b, context_weight=s.search_context_weight, rows_scope=run.rows_scope),
            settings=branches.lexical_settings(request.filters))

    async def branch(self, name: Literal["lexical", "semantic"], timeout_ms: int, org_id: UUID, run: SearchRun,
                     query: Callable[[TenantTx], Awaitable[list[T]]],
                     settings: dict[str, str] | None = None) -> list[T]:
        """Run one branch's query in its own org-scoped transaction (begun with ``settings``) under its
        deadline; record time and count."""
        started = time.perf_counter()

        async def work() -> list[T]:
            async def on(tx: TenantTx) -> list[T]:
                await branches.branch_delay(tx, self.settings.branch_delay_ms)
                return await query(tx)

            try:
                return await self.db.read(org_id, on, timeout_ms=timeout_ms, settings=settings)
            except ServiceUnavailable as exc:
                if exc.code == "query_timeout":  # Postgres's statement_timeout: the branch's own deadline
                    raise BranchFailed(f"{name} timed out after {timeout_ms} ms", timed_out=True) from exc
                raise

        try:
            # Postgres's statement_timeout (timeout_ms) ends a slow query by itself; the asyncio guard
            # only backs it up a little later. Were the guard first, asyncpg would cancel the query
            # over a new connection (a backend fork per cancel), which under overload is most of them.
            hits = await guard(name, timeout_ms, work, grace_ms=DB_TIMEOUT_GRACE_MS)
        finally:
            setattr(run, f"{name}_ms", elapsed_ms(started))
        setattr(run, f"{name}_candidates", len(hits))
        if run.rows_scope is not None:
            for hit in hits:
                if isinstance(hit, Hit) and hit.row is not None and "embedding" in hit.row.keys():  # noqa: SIM118
                    run.rows.setdefault(hit.id, hit.row)
        return hits

    async def _vector(self, org_id: UUID, request: SearchRequest, embedding: npt.NDArray[np.float32], limit: int,
                      run: SearchRun, ids: list[UUID] | None = None) -> list[Hit]:
        """HNSW search, or with ``ids`` the cascade's exact ranking of exactly those ids."""
        ef_search = request.tuning.ef_search or self.settings.ef_search

        async def query(tx: TenantTx) -> list[Hit]:
            if ids is not None:
                return await branches.search_l1_by_ids(tx, embedding, ids, limit=limit)
            return await branches.semantic_hnsw(tx, embedding, request.filters, limit=limit, ef_search=ef_search,
                                                rows_scope=run.rows_scope)

        settings = None if ids is not None else branches.hnsw_settings(limit=limit, ef_search=ef_search)
        return await self.branch("semantic", run.left_ms("semantic", self.settings), org_id, run, query, settings)

    async def _semantic(self, org_id: UUID, request: SearchRequest, limit: int, run: SearchRun,
                        embedding: Awaitable[npt.NDArray[np.float32]] | None = None) -> list[Hit]:
        vector = await (embedding if embedding is not None else self.embed_query(org_id, request.query, run))
        return await self._vector(org_id, request, vector, limit, run)

    # -- strategies: each returns (strategy used, results, fusion_ms) -------------------------------

    async def _lexical_only(self, org_id: UUID, request: SearchRequest,
                            run: SearchRun) -> tuple[UsedStrategy, list[SearchResult], float]:
        return await self._single_branch(org_id, request, run, first="lexical")

    async def _semantic_only(self, org_id: UUID, request: SearchRequest,
                             run: SearchRun) -> tuple[UsedStrategy, list[SearchResult], float]:
        return await self._single_branch(org_id, request, run, first="semantic")

    async def _single_branch(self, org_id: UUID, request: SearchRequest, run: SearchRun, *,
                             first: Literal["lexical", "semantic"]) -> tuple[UsedStrategy, list[SearchResult], float]:
        """One branch; if it fails, the other one; if both fail, 503."""
        second: Literal["lexical", "semantic"] = "semantic" if first == "lexical" else "lexical"
        branch = {"lexical": self._lexical, "semantic": self._semantic}
        try:
            return self._single(await branch[first](org_id, request, request.limit, run), first, request.limit)
        except BranchFailed as first_error:
            if run.out_of_time():
                skipped = {first: first_error, second: BranchFailed(f"{second} not tried: the search is out of time",
                                                                    timed_out=True)}
                raise unavailable(skipped["lexical"], skipped["semantic"]) from first_error
            run.fell_back(f"{first_error}; fell back to {second}", first_error.reason)
            try:
                hits = await branch[second](org_id, request, request.limit, run)
            except BranchFailed as second_error:
                errors = {first: first_error, second: second_error}
                raise unavailable(errors["lexical"], errors["semantic"]) from second_error
            return self._single(hits, second, request.limit)

    async def _hybrid(self, org_id: UUID, request: SearchRequest,
                      run: SearchRun) -> tuple[UsedStrategy, list[SearchResult], float]:
        tuning = request.tuning
        speaker = self._speaker_boost(tuning)
        # Both branches start now: the embedding overlaps the lexical query, and the vector query
        # starts the moment the embedding is ready, on a second connection.
        lexical_task = asyncio.ensure_future(
            self._lexical(org_id, request, fusion_depth(tuning.lexical_candidates, request.limit, run), run))
        depth = semantic_depth(tuning.semantic_candidates, request.limit, run)
        lexical, semantic = await asyncio.gather(
            lexical_task,
            self._semantic(org_id, request, depth, run) if speaker is None else
            self._speaker_semantic(org_id, request, depth, run, lexical_task, speaker),
            return_exceptions=True,
        )
        for outcome in (lexical, semantic):
            if isinstance(outcome, BaseException) and not isinstance(outcome, BranchFailed):
                raise outcome
        if isinstance(lexical, BranchFailed) and isinstance(semantic, BranchFailed):
            raise unavailable(lexical, semantic)
        if isinstance(semantic, BranchFailed):
            run.fell_back(f"{semantic}; lexical only", semantic.reason)
            assert isinstance(lexical, list)
            return self._single(lexical, "lexical", request.limit)
        if isinstance(lexical, BranchFailed):
            run.fell_back(f"{lexical}; semantic only", lexical.reason)
            assert isinstance(semantic, list)
            return self._single(semantic, "semantic", request.limit)
        assert isinstance(lexical, list) and isinstance(semantic, list)
        started = time.perf_counter()
        if tuning.fusion == "convex":
            results = fusion.convex(lexical, semantic, alpha=tuning.convex_alpha, limit=request.limit)
        elif tuning.fusion == "rrf":
            results = fusion.rrf(lexical, semantic, k=tuning.rrf_k, limit=request.limit)
        else:
            results, run.fusion_reason = fusion.auto(lexical, semantic, rrf_k=tuning.rrf_k, limit=request.limit,
                                                     query=request.query, speaker=speaker)
            if run.semantic_query is not None:
                run.fusion_reason += f"; the semantic branch searched {run.semantic_query!r} (the names left out)"
        return "hybrid", results, elapsed_ms(started)

    def _speaker_boost(self, tuning: SearchTuning) -> SpeakerBoost | None:
        """``auto`` fusion's speaker boost for this search (docs/retrieval.md "Speakers"), None when off."""
        boost = self.settings.speaker_boost if tuning.speaker_boost is None else tuning.speaker_boost
        speaker = SpeakerBoost(self.settings.speaker_key, boost, tuning.first_person)
        return speaker if tuning.fusion == "auto" and speaker.active else None

    async def _speaker_semantic(self, org_id: UUID, request: SearchRequest, limit: int, run: SearchRun,
                                lexical: asyncio.Future[list[Hit]], speaker: SpeakerBoost) -> list[Hit]:
        """The semantic branch of a hybrid search with speakers (:func:`speakers.semantic_hits`)."""
        async def walk(vector: npt.NDArray[np.float32]) -> list[Hit]:
            return await self._vector(org_id, request, vector, limit, run)

        async def embed(text: str) -> npt.NDArray[np.float32]:
            return await self.embed_query(org_id, text, run)

        hits, run.semantic_query = await speakers.semantic_hits(request.query, lexical, speaker, embed, walk,
                                                                self._background)
        return hits

    async def _cascade(self, org_id: UUID, request: SearchRequest,
                       run: SearchRun) -> tuple[UsedStrategy, list[SearchResult], float]:
        width = max(request.tuning.cascade_width, request.limit)
        embedding = asyncio.ensure_future(self.embed_query(org_id, request.query, run))  # overlaps the lexical step
        try:
            try:
                lexical = await self._lexical(org_id, request, width, run)
            except BranchFailed as lexical_error:
                if run.out_of_time():
                    raise unavailable(lexical_error, BranchFailed("semantic not tried: the search is out of time",
                                                                             timed_out=True)
                                       ) from lexical_error
                run.fell_back(f"{lexical_error}; fell back to semantic", lexical_error.reason)
                try:
                    hits = await self._semantic(org_id, request, request.limit, run, embedding)
                except BranchFailed as semantic_error:
                    raise unavailable(lexical_error, semantic_error) from semantic_error
                return self._single(hits, "semantic", request.limit)
            if not lexical:
                run.fell_back("lexical found no candidates; fell back to semantic", "no_lexical_candidates")
                try:
                    hits = await self._semantic(org_id, request, request.limit, run, embedding)
                except BranchFailed as semantic_error:
                    run.fell_back(str(semantic_error), semantic_error.reason)
                    hits = []
                return self._single(hits, "semantic", request.limit)
            try:
                vector = await embedding
                ranked = await self._vector(org_id, request, vector, request.limit, run,
                                            ids=[h.id for h in lexical])
            except BranchFailed as semantic_error:
                run.fell_back(f"{semantic_error}; lexical only", semantic_error.reason)
                return self._single(lexical, "lexical", request.limit)
            started = time.perf_counter()
            results = fusion.cascade(lexical, ranked, limit=request.limit)
            return "lexical_first", results, elapsed_ms(started)
        finally:
            if not embedding.done():
                embedding.cancel()
            elif not embedding.cancelled():
                embedding.exception()  # mark a failure we already reported as retrieved

    @staticmethod
    def _single(hits: list[Hit], branch: UsedStrategy, limit: int) -> tuple[UsedStrategy, list[SearchResult], float]:
        started = time.perf_counter()
        results = fusion.single(hits, branch=branch, method="none", limit=limit)
        return branch, results, elapsed_ms(started)

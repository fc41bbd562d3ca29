"""The start's warm-up: what the first assembly needs is made ready before the service says it is.

Right after a start everything on an assembly's path is cold: the Redis connections are not open,
each pooled Postgres connection has prepared none of the assembly's statements (and its backend has
loaded none of the tables' and indexes' catalog entries), the embedder's query threads have not run,
and no code path of the pipeline has run once. Measured on a 2-core host, the first assembly after
a restart then took 130-200 ms of branch time against a 40 ms wall: directive, hot set and cold
search all timed out (L2, no directive). So before ``/readyz`` answers ok (and, under ``pgcontext
serve``, before the port accepts requests at all) the start runs, each step bounded and timed:

0. ``buffers``: waits until the server has read its saved buffers back (``pg_prewarm``'s autoprewarm,
   which the embedded server runs; seen with the owner's DSN, so not under ``serve --no-migrate``);
1. ``redis``: opens as many connections as the pool keeps to Postgres (concurrent PINGs), and loads
   the per-org rate limiter's script;
2. ``embedder`` (local model): one query embedding on each query thread at once, one bulk embedding;
3. ``assembly``: complete assemblies, through the same pipeline as a request's, that leave no trace
   in metrics, logs, access statistics or the latencies shedding learns from;
4. ``postgres``: on every connection the pool then holds (at least ``pool_min``), at once, the read
   statements of an assembly (API key lookup, cache epoch, directive, hot set, BM25 and HNSW
   search), so each is prepared and planned once on every connection a first request can get.

Every read is made as the nil org (:data:`WARMUP_ORG`), which no org can be (org ids are UUIDv7),
so row-level security shows it nothing and no tenant's data is read. What it writes is that org's
own: an empty hot set and a rate-limit bucket in Redis, both expiring.

A step that fails (a server not up yet) is retried in the background every ``RETRY_S`` until the
warm-up completes; ``/readyz`` answers 503 with ``checks.warm`` saying why until then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from uuid import UUID

import asyncpg
import numpy as np
import structlog

from service.assembly.deadline import CallerDeadline
from service.assembly.orchestrator import Orchestrator
from service.assembly.types import AssembleRequest, Message
from service.db import TenantTx
from service.db.queries import query
from service.embeddings.lanes import BulkCapable
from service.errors import forget_outcome
from service.retrieval import branches
from service.retrieval.types import SearchFilters
from service.runtime import Services, WarmupState
from service.timing import elapsed_ms

log = structlog.get_logger(__name__)

WARMUP_ORG = UUID(int=0)
"""The org the warm-up reads as: the nil UUID, which no org has."""
WARMUP_AGENT = "pgcontext-warm-up"
WARMUP_QUERY = "what should the first assembly after a start find about the espresso machine?"
RETRY_S = 2.0
"""A warm-up that could not complete is tried again this often, until it does."""
STEP_TIMEOUT_MS = 5000
"""Statement timeout of the warm-up's Postgres reads, and deadline of its assemblies."""
PREWARM_POLL_S = 0.1


class Warmup:
    """Runs the steps (see the module docstring) and keeps :class:`WarmupState` current."""

    def __init__(self, services: Services, orchestrator: Orchestrator, owner_dsn: str | None = None) -> None:
        self.services = services
        self.orchestrator = orchestrator
        self.owner_dsn = owner_dsn
        """To see whether the server is still reading its saved buffers back (None: not checked)."""
        self.state = WarmupState()
        self._retry: asyncio.Future[None] | None = None
        self._steps: dict[str, Callable[[], Awaitable[object]]] = {
            "buffers": self._buffers, "redis": self._redis, "embedder": self._embedder,
            "assembly": self._assemblies, "postgres": self._postgres}
        """In this order; a retry runs only the steps that failed."""

    async def run(self, timeout_s: float) -> bool:
        """One warm-up within ``timeout_s`` (after a failed one: its failed steps); true when every
        step has succeeded."""
        started = time.perf_counter()
        names = [name for name in self._steps if not self.state.failures or name in self.state.failures]
        failures: dict[str, str] = {}
        timings: dict[str, float] = {}
        deadline = time.monotonic() + timeout_s
        for name in names:
            step = self._steps[name]
            begun = time.perf_counter()
            try:
                async with asyncio.timeout(max(0.001, deadline - time.monotonic())):
                    await step()
            except Exception as exc:  # a step that fails is reported and retried, never fatal
                failures[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            timings[name] = elapsed_ms(begun)
        self.state.failures = failures
        self.state.done = not failures
        if failures:
            log.warning("warm_up_incomplete", ms=elapsed_ms(started), steps=timings, failures=failures)
        else:
            log.debug("warmed_up", ms=elapsed_ms(started), steps=timings)
        return not failures

    def retry_in_background(self, timeout_s: float) -> None:
        """Try again every ``RETRY_S`` until a warm-up completes (``aclose`` stops it)."""
        async def again() -> None:
            while not self.state.done:
                await asyncio.sleep(RETRY_S)
                await self.run(timeout_s)

        self._retry = asyncio.ensure_future(again())
        self._retry.add_done_callback(forget_outcome)

    async def aclose(self) -> None:
        if self._retry is not None and not self._retry.done():
            self._retry.cancel()
            await asyncio.gather(self._retry, return_exceptions=True)

    # -- steps -------------------------------------------------------------------------------------

    def _width(self) -> int:
        """Connections to warm at once: every one the Postgres pool holds (its floor, and those the
        warm-up's assemblies added), so none a first request is given is cold."""
        return max(1, self.services.settings.database.pool_min, self.services.db.pool_size())

    async def _buffers(self) -> None:
        """Wait until the server has read its saved buffers back (``pg_prewarm``'s autoprewarm, which
        the embedded server runs): the first assembly's rows and index pages are then in memory."""
        if self.owner_dsn is None:
            return  # the service role cannot see the server's background workers
        conn = await asyncpg.connect(self.owner_dsn, timeout=STEP_TIMEOUT_MS / 1000)
        try:
            while True:  # polled: the workers announce nothing when they finish
                if not await conn.fetchval(query("maintenance.prewarm_loading")):
                    return
                await asyncio.sleep(PREWARM_POLL_S)
        finally:
            await conn.close()

    async def _redis(self) -> None:
        redis = self.services.redis
        await asyncio.gather(*(redis.ping() for _ in range(self._width())))
        limiter = self.services.rate_limiter
        if limiter is not None and limiter.enabled:
            await limiter.charge(WARMUP_ORG, 0)

    async def _postgres(self) -> None:
        """The assembly's reads on every pooled connection at once: each transaction holds its
        connection until all have begun, so every one of them is warmed."""
        s = self.services.settings
        await self.services.db.released()  # the assemblies' connections are idle again: warm those too
        together = asyncio.Barrier(self._width())
        vector = np.zeros(self.services.embedder.dim, dtype=np.float32)
        vector[0] = 1.0
        scope: branches.RowsScope = (WARMUP_AGENT, True, False)
        r = s.retrieval

        async def reads(tx: TenantTx) -> None:
            await together.wait()
            await tx.fetchrow("auth.resolve_key", bytes(32))
            await tx.fetchval("cache.epoch", WARMUP_ORG)
            await tx.fetchrow("directives.get", WARMUP_ORG, WARMUP_AGENT)
            await tx.fetchval("hot.agent_exists", WARMUP_ORG, WARMUP_AGENT)
            await tx.fetch("hot.fill", WARMUP_ORG, WARMUP_AGENT, s.assembly.hot_set_size,
                           s.assembly.hot_access_half_life_hours)
            await branches.semantic_hnsw(tx, vector, SearchFilters(), limit=s.assembly.cold_limit,
                                         ef_search=r.ef_search, rows_scope=scope)
            await tx.set_local(branches.lexical_settings(SearchFilters()))  # its generic plan, as a search has
            await branches.lexical_bm25(tx, WARMUP_QUERY, SearchFilters(), limit=s.assembly.cold_limit,
                                        postings_per_term=r.postings_per_term, k1=r.bm25_k1, b=r.bm25_b,
                                        context_weight=r.search_context_weight, rows_scope=scope)

        async def on_one() -> None:
            # Not read-only: the API key lookup records a key's use (none here: the hash matches no key).
            async with self.services.db.tenant(WARMUP_ORG, timeout_ms=STEP_TIMEOUT_MS) as tx:
                await reads(tx)

        await asyncio.gather(*(on_one() for _ in range(self._width())))

    async def _embedder(self) -> None:
        embedder = self.services.embedder
        if not embedder.name.startswith("local:"):
            return  # a hosted model: no call (and no bill) just to start
        # onnxruntime's first runs are several times slower: one on each query thread at once.
        threads = int(getattr(embedder, "query_threads", 1))
        await asyncio.gather(*(embedder.embed([f"{WARMUP_QUERY} {i}"]) for i in range(threads)))
        if isinstance(embedder, BulkCapable):
            await embedder.embed_bulk([WARMUP_QUERY])

    async def _assemblies(self) -> None:
        """Complete assemblies, two at a time (so both cold-search branches run beside another
        request's), twice: the second round runs what the first cached (directive, hot set)."""
        req = AssembleRequest(agent_id=WARMUP_AGENT, query=WARMUP_QUERY, model="gpt-4o", max_context_tokens=2000,
                              recent_messages=[Message(role="user", content="Warming up.")])
        for _ in range(2):
            await asyncio.gather(*(self.orchestrator.assemble_quietly(
                WARMUP_ORG, req, CallerDeadline().within(STEP_TIMEOUT_MS)) for _ in range(2)))

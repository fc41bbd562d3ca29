"""Query embeddings for search: the org's cache, the shared query lane, and a circuit per org.

The circuit opens on embedder failure, not on load: an error, or a timeout while the embedder is
stalled (no query embedding completed for ``embedder_stall_ms`` while one was in flight). A timeout
while embeddings keep completing is a queue: that request falls back, the next ones still try.
"""

from __future__ import annotations

import asyncio
import time
from uuid import UUID

import numpy as np
import numpy.typing as npt

from service.embeddings.lanes import EmbeddingLanes
from service.retrieval.guard import BranchFailed, guard
from service.retrieval.query_cache import QueryEmbeddingCache
from service.retrieval.shedding import LatencyEwma
from service.settings import RetrievalSettings
from service.timing import elapsed_ms

EMBED_QUERY_CHARS = 1000
"""Queries are cut to this many characters before embedding. all-MiniLM-L6-v2 reads at most 256 word
pieces (the tokenizer drops the rest), which English prose reaches at ~1,000-1,300 characters: the cut
loses little, and a 4,000-character query costs the embedder (and the shared query lane) no more than a
1,000-character one (measured here: ~30 vs ~48 ms; a short query ~2 ms). Lexical search still uses the
whole query."""

MAX_TRACKED_ORGS = 10_000
"""Orgs with recent embedding failures kept; past it, entries older than the cooldown are dropped."""

BUSY_SHARE = 0.8
"""``auto`` sheds the embedding (lexical only) only while ``embedder_max_in_flight`` embeddings are
running *and* recent embeddings took more than this share of the embedding deadline
(:mod:`service.retrieval.shedding`)."""


class QueryEmbedder:
    """One per :class:`~service.retrieval.engine.RetrievalEngine`: its query embeddings and their state."""

    def __init__(self, lanes: EmbeddingLanes, settings: RetrievalSettings) -> None:
        self.lanes = lanes
        """Query embeddings go through the app's query lane (three at a time for the local model,
        at most two of one org, orgs in turn), shared with the other engine and the write path's
        bulk lane."""
        self.settings = settings
        self.cache = QueryEmbeddingCache(settings.query_cache_size)
        self._failures: dict[UUID, tuple[int, float]] = {}
        """Per org: consecutive query-embedding failures and the time of the last one. The circuit is
        per org, so one org's failing (e.g. slow) queries never switch other orgs to lexical-only;
        when the embedder itself is down each org pays ``embedder_failures_to_open`` failures."""
        self._in_flight = 0
        self._progress_at = time.monotonic()
        """When the embedder last made progress: a query embedding completed, or one started while
        none was in flight. A timeout is an embedder failure only when this is older than
        ``embedder_stall_ms`` (stuck, not busy)."""
        self.latency = LatencyEwma()
        """Recent query-embedding wall times (queueing included), for :meth:`busy`."""

    def available(self, org_id: UUID) -> bool:
        """False for ``embedder_cooldown_s`` after ``embedder_failures_to_open`` consecutive failures of
        this org's query embeddings."""
        failures, failed_at = self._failures.get(org_id, (0, 0.0))
        if failures < self.settings.embedder_failures_to_open:
            return True
        return time.monotonic() - failed_at > self.settings.embedder_cooldown_s

    def _failed(self, org_id: UUID) -> None:
        now = time.monotonic()
        if len(self._failures) >= MAX_TRACKED_ORGS and org_id not in self._failures:
            cooldown = self.settings.embedder_cooldown_s
            self._failures = {org: entry for org, entry in self._failures.items() if now - entry[1] <= cooldown}
        failures = self._failures.get(org_id, (0, 0.0))[0]
        self._failures[org_id] = (failures + 1, now)

    def cached(self, org_id: UUID, query: str) -> npt.NDArray[np.float32] | None:
        """The org's cached embedding of ``query``, if any (no LRU touch, not counted as a hit or miss)."""
        return self.cache.peek(org_id, query[:EMBED_QUERY_CHARS])

    def busy(self, org_id: UUID, timeout_ms: int | None = None) -> bool:
        """``embedder_max_in_flight`` query embeddings are already running or queued and this org has
        its share (that many itself, or at least one while the lane is full: an org with none in
        flight always gets one, so one org's burst never makes every other org's searches
        lexical-only), and recent ones took more than :data:`BUSY_SHARE` of the embedding deadline:
        one more would likely miss it (``timeout_ms``: the search's own embedding deadline)."""
        limit = self.settings.embedder_max_in_flight
        if limit <= 0:
            return False
        mine = self.lanes.query.load(org_id)
        full = mine >= limit or (mine > 0 and self.lanes.query.load() >= limit)
        return full and self.latency.would_miss(timeout_ms or self.settings.embedding_timeout_ms, BUSY_SHARE)

    async def embed(self, org_id: UUID, query: str, timeout_ms: int | None = None
                    ) -> tuple[npt.NDArray[np.float32], bool]:
        """The query's embedding and whether it came from the org's cache (else from the embedder,
        under ``timeout_ms``, default the embedding deadline; a failure raises :class:`BranchFailed`)."""
        started = time.perf_counter()
        query = query[:EMBED_QUERY_CHARS]
        cached = self.cache.get(org_id, query)
        if cached is not None:
            return cached, True

        def finished(task: asyncio.Future[npt.NDArray[np.float32]]) -> None:
            self._in_flight -= 1
            if not task.cancelled() and task.exception() is None:
                self._progress_at = time.monotonic()  # progress, even when the caller stopped waiting

        async def work() -> npt.NDArray[np.float32]:
            # Shielded: the model's thread finishes the work anyway, and when it does, that counts as
            # the embedder making progress (see the circuit below).
            if self._in_flight == 0:
                self._progress_at = time.monotonic()  # an idle embedder is not a stalled one
            self._in_flight += 1
            task = asyncio.ensure_future(self.lanes.embed_query(org_id, [query]))
            task.add_done_callback(finished)
            rows = await asyncio.shield(task)
            return np.ascontiguousarray(rows[0], dtype=np.float32)

        try:
            vector = await guard("embedding", timeout_ms or self.settings.embedding_timeout_ms, work)
        except BranchFailed as exc:
            self.latency.observe(elapsed_ms(started))
            # The circuit opens on embedder failure: an error, or a timeout while the embedder is
            # stalled (no query embedding completed for ``embedder_stall_ms``). A timeout while
            # embeddings keep completing is a queue (load), however short this request's deadline:
            # it falls back for this request only.
            stalled = time.monotonic() - self._progress_at >= self.settings.embedder_stall_ms / 1000
            if not exc.timed_out or stalled:
                self._failed(org_id)
            raise
        self.latency.observe(elapsed_ms(started))
        self._failures.pop(org_id, None)
        self.cache.put(org_id, query, vector)
        return vector, False

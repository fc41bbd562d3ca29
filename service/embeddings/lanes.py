"""Who embeds when: query embeddings before write-path (bulk) ones, and every org its turn in each.

Two lanes share the embedder:

* **query** (search and assembly: one short text, a deadline of a few ms) — at most
  ``query_concurrency`` calls at once (the local model's query lane is that many threads, three by
  default), the next call taken from the orgs in turn, so one org's burst of long queries queues
  behind itself, not in front of every other org; and no org holds every slot (at most
  ``query_concurrency - 1``): a query at the model's cut (256 word pieces) embeds for ~37 ms, and
  with one slot another org's short query arriving meanwhile waited all of it (its assembly's cold
  branch missed the 40 ms wall: L1). With a slot kept for the others it embeds beside it;
* **bulk** (memory batches, document ingest) — cut into sub-batches of ``bulk_batch`` texts, at
  most ``bulk_concurrency`` at once, orgs in turn, and before each sub-batch it yields to query
  embeddings (waits, up to ``bulk_yield_ms``, until none is running or queued). The local
  provider runs bulk sub-batches on a lower-priority thread of their own
  (:meth:`service.embeddings.local.LocalEmbedder.embed_bulk`), so the kernel gives the cores to
  queries, the event loop and Postgres first. Small sub-batches also bound the model's working
  memory (attention grows with batch × tokens²).

  **A floor, not starvation.** A foreground that keeps the cores busy (closed-loop clients) leaves a
  lower-priority thread almost nothing: a 171-section ingest beside four assembling clients took
  longer than its caller's two minutes. So a sub-batch goes to the bulk thread a few texts at a
  time, and while one of those pieces has been running for ``bulk_starved_ms``, the lane also
  embeds the sub-batch's texts one at a time on the query lane (normal priority, taking its turn
  there like an org: a query waits behind at most one text) — first those no piece has taken, then
  the starved piece's own — using at most ``bulk_min_share`` of that lane's time. Writes then
  finish at a guaranteed rate however busy the foreground is, and the foreground gives up at most
  that share of one thread to them.

Fairness is in time slices (one sub-batch per turn), not in texts: an org writing 256 memories and
an org writing one share the bulk lane turn by turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import Protocol, cast, runtime_checkable
from uuid import UUID

import numpy as np
import numpy.typing as npt
import prometheus_client

from service.embeddings.base import Embedder
from service.embeddings.local import QUERY_THREADS
from service.settings import EmbeddingSettings, Settings

BULK_YIELDS = prometheus_client.Counter(
    "pgcontext_embedding_bulk_yields_total", "Bulk embedding sub-batches that waited for query embeddings first")
BULK_FLOOR = prometheus_client.Counter(
    "pgcontext_embedding_bulk_floor_texts_total",
    "Write-path texts embedded on the query lane because the low-priority bulk thread was starved")

NICED_PIECE = 4
"""Texts per call on the low-priority bulk thread (the floor takes over the rest of a sub-batch
while one such piece is starved)."""


@runtime_checkable
class BulkCapable(Protocol):
    """A provider with a separate, lower-priority path for write-path batches."""

    async def embed_bulk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


class FairGate:
    """At most ``capacity`` holders at once, at most ``per_key`` of them for one key (org); waiters
    are served one key at a time in turn, first come first served within a key."""

    def __init__(self, capacity: int, per_key: int | None = None) -> None:
        self.capacity = max(1, capacity)
        self.per_key = max(1, min(per_key or self.capacity, self.capacity))
        self.active = 0
        self._held: Counter[Hashable] = Counter()
        self._waiting: dict[Hashable, deque[asyncio.Future[None]]] = {}
        """Insertion order is the turn order: a served key moves to the end."""
        self._load: Counter[Hashable] = Counter()
        self._idle = asyncio.Event()
        self._idle.set()

    def load(self, key: Hashable | None = None) -> int:
        """Calls holding or waiting for the gate (of ``key``, or of every key)."""
        return self._load[key] if key is not None else sum(self._load.values())

    async def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing holds or waits for the gate, at most ``timeout_s``; True if it is idle."""
        if self._idle.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        return self._idle.is_set()

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        self._load[key] += 1
        self._idle.clear()
        try:
            # A free slot while others wait means every waiter's key is at ``per_key``: not this one's
            # unless it holds as many itself (then its turn comes when one of its own is released).
            if self.active < self.capacity and self._held[key] < self.per_key:
                self.active += 1
                self._held[key] += 1
            else:
                await self._wait(key)
            try:
                yield
            finally:
                self._release(key)
        finally:
            self._load[key] -= 1
            if self._load[key] <= 0:
                del self._load[key]
            if not self._load:
                self._idle.set()

    async def _wait(self, key: Hashable) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, deque()).append(future)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self._release(key)  # handed a turn just as it was cancelled: pass it on
            else:
                line = self._waiting.get(key)
                if line is not None:
                    with contextlib.suppress(ValueError):
                        line.remove(future)
                    if not line:
                        del self._waiting[key]
            raise

    def _release(self, releasing: Hashable) -> None:
        """Hand the slot to the next key in turn that may take one: the first waiting one other than
        the key that just had it (unless it alone may), below ``per_key``."""
        self._held[releasing] -= 1
        if self._held[releasing] <= 0:
            del self._held[releasing]
        while True:
            turns = [k for k in self._waiting if k != releasing] + ([releasing] if releasing in self._waiting else [])
            key = next((k for k in turns if self._held[k] < self.per_key), None)
            if key is None:
                self.active -= 1
                return
            line = self._waiting.pop(key)
            future = line.popleft()
            if line:
                self._waiting[key] = line  # back of the turn order
            if not future.done():
                self._held[key] += 1
                future.set_result(None)  # the slot passes on: ``active`` is unchanged
                return


class EmbeddingLanes:
    """The query and bulk lanes over one embedder (one per app: ``lanes_of(services)``)."""

    def __init__(self, embedder: Embedder, settings: EmbeddingSettings) -> None:
        self.embedder = embedder
        local = isinstance(embedder, BulkCapable)
        # An embedder with its own query threads (``LocalEmbedder.query_threads``, which ``build_embedder``
        # sets from ``query_concurrency``) gets a lane exactly as wide: a granted slot never waits for a
        # thread, whatever the settings passed here say.
        threads = int(getattr(embedder, "query_threads", 0))
        query_slots = threads or settings.query_concurrency or (QUERY_THREADS if local else 8)
        self.query = FairGate(query_slots, per_key=max(1, query_slots - 1))
        self.bulk = FairGate(settings.bulk_concurrency or (1 if local else 2))
        self.bulk_batch = max(1, settings.bulk_batch)
        self.bulk_yield_s = settings.bulk_yield_ms / 1000
        self.bulk_min_share = min(max(settings.bulk_min_share, 0.0), 1.0)
        self.bulk_starved_s = settings.bulk_starved_ms / 1000

    async def embed_query(self, org_id: UUID, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        async with self.query.hold(org_id):
            return await self.embedder.embed(texts)

    async def embed_bulk(self, org_id: UUID, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed a write's texts in sub-batches, orgs in turn, each sub-batch after the queries."""
        out = np.empty((len(texts), self.embedder.dim), dtype=np.float32)
        for start in range(0, len(texts), self.bulk_batch):
            part = list(texts[start : start + self.bulk_batch])
            async with self.bulk.hold(org_id):
                if self.query.load() and self.bulk_yield_s > 0:
                    BULK_YIELDS.inc()
                    await self.query.wait_idle(self.bulk_yield_s)
                if isinstance(self.embedder, BulkCapable):
                    out[start : start + len(part)] = await self._bulk_turn(self.embedder, org_id, part)
                else:
                    out[start : start + len(part)] = await self.embedder.embed(part)
        return out

    async def _bulk_turn(self, embedder: BulkCapable, org_id: UUID, part: list[str]) -> npt.NDArray[np.float32]:
        """One sub-batch on the low-priority thread, a few texts at a time; while a piece there is
        starved, the floor embeds texts on the query lane: the ones no piece has taken yet (from
        the end), then the starved piece's own (whichever lane finishes a text first wins)."""
        if self.bulk_min_share <= 0:
            return await embedder.embed_bulk(part)
        out = np.empty((len(part), self.embedder.dim), dtype=np.float32)
        untaken = deque(range(len(part)))
        left = set(untaken)
        running: list[int] = []
        """Rows of the low-priority piece running now (empty: none)."""
        since = [0.0]
        complete = asyncio.Event()

        def embedded(rows: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
            for row, vector in zip(rows, vectors, strict=True):
                if row in left:
                    out[row] = vector
                    left.discard(row)
            if not left:
                complete.set()

        async def niced() -> None:
            while untaken:
                rows = [untaken.popleft() for _ in range(min(NICED_PIECE, len(untaken)))]
                running[:] = rows
                since[0] = time.monotonic()
                vectors = await embedder.embed_bulk([part[i] for i in rows])
                running.clear()
                embedded(rows, vectors)

        async def floor() -> None:
            pause = self.bulk_starved_s
            while not complete.is_set():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(pause):
                        await complete.wait()
                if complete.is_set():
                    return
                starved = bool(running) and time.monotonic() - since[0] >= self.bulk_starved_s
                row = (untaken.pop() if untaken else next((r for r in running if r in left), None)) if starved \
                    else None
                if row is None:
                    pause = self.bulk_starved_s / 4
                    continue
                async with self.query.hold(("bulk", org_id)):
                    started = time.monotonic()
                    vectors = await self.embedder.embed([part[row]])
                    took = time.monotonic() - started
                BULK_FLOOR.inc()
                embedded([row], vectors)
                # At most ``bulk_min_share`` of the query lane's time.
                pause = max(took * (1 - self.bulk_min_share) / self.bulk_min_share, 0.001)

        workers = [asyncio.ensure_future(niced()), asyncio.ensure_future(floor())]
        finished = asyncio.ensure_future(complete.wait())
        try:
            while not complete.is_set():
                done, _ = await asyncio.wait([finished, *(w for w in workers if not w.done())],
                                             return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not finished and task.exception() is not None:
                        raise cast(BaseException, task.exception())
        finally:
            # A piece still running on the low-priority thread finishes there, unread.
            for task in (*workers, finished):
                task.cancel()
            await asyncio.gather(*workers, finished, return_exceptions=True)
        return out


class HasLanes(Protocol):
    """What :func:`lanes_of` needs of the app's services (:class:`service.runtime.Services` has it)."""

    @property
    def embedder(self) -> Embedder: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def extras(self) -> dict[str, object]: ...


def lanes_of(services: HasLanes) -> EmbeddingLanes:
    """The app's lanes (``services.extras["embedding_lanes"]``), made on first use."""
    lanes = services.extras.get("embedding_lanes")
    if not isinstance(lanes, EmbeddingLanes):
        lanes = EmbeddingLanes(services.embedder, services.settings.embedding)
        services.extras["embedding_lanes"] = lanes
    return lanes

"""Who embeds when: query embeddings before write-path (bulk) ones, and every org its turn in each.

Two lanes share the embedder:

* **query** (search and assembly: one short text, a deadline of a few ms) — at most
  ``query_concurrency`` calls at once (the local model's query lane is two threads), the next call
  taken from the orgs in turn, so one org's burst of long queries queues behind itself, not in front
  of every other org; and no org holds every slot (at most ``query_concurrency - 1``): a query at
  the model's cut (256 word pieces) embeds for ~37 ms, and with one slot another org's short query
  arriving meanwhile waited all of it (its assembly's cold branch missed the 40 ms wall: L1). With
  a slot kept for the others it embeds beside it;
* **bulk** (memory batches, document ingest) — cut into sub-batches of ``bulk_batch`` texts, at
  most ``bulk_concurrency`` at once, orgs in turn, and before each sub-batch it yields to query
  embeddings (waits, up to ``bulk_yield_ms``, until none is running or queued). The local
  provider runs bulk sub-batches on a lower-priority thread of their own
  (:meth:`service.embeddings.local.LocalEmbedder.embed_bulk`), so the kernel gives the cores to
  queries, the event loop and Postgres first. Small sub-batches also bound the model's working
  memory (attention grows with batch × tokens²).

Fairness is in time slices (one sub-batch per turn), not in texts: an org writing 256 memories and
an org writing one share the bulk lane turn by turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, deque
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import Protocol, runtime_checkable
from uuid import UUID

import numpy as np
import numpy.typing as npt
import prometheus_client

from service.embeddings.base import Embedder
from service.runtime import Services
from service.settings import EmbeddingSettings

BULK_YIELDS = prometheus_client.Counter(
    "pgcontext_embedding_bulk_yields_total", "Bulk embedding sub-batches that waited for query embeddings first")


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
        query_slots = settings.query_concurrency or (2 if local else 8)
        self.query = FairGate(query_slots, per_key=max(1, query_slots - 1))
        self.bulk = FairGate(settings.bulk_concurrency or (1 if local else 2))
        self.bulk_batch = max(1, settings.bulk_batch)
        self.bulk_yield_s = settings.bulk_yield_ms / 1000

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
                    out[start : start + len(part)] = await self.embedder.embed_bulk(part)
                else:
                    out[start : start + len(part)] = await self.embedder.embed(part)
        return out


def lanes_of(services: Services) -> EmbeddingLanes:
    """The app's lanes (``services.extras["embedding_lanes"]``), made on first use."""
    lanes = services.extras.get("embedding_lanes")
    if not isinstance(lanes, EmbeddingLanes):
        lanes = EmbeddingLanes(services.embedder, services.settings.embedding)
        services.extras["embedding_lanes"] = lanes
    return lanes

"""The directive branch of an assembly: Redis first, Postgres on a miss, an error or a slow Redis.

The directive is the agent's standing instructions, a few hundred bytes that change what the model
does: every context holds it or says it is missing (``degradation_reasons``: ``directive_missing``).
So its branch has the whole retrieval wall by default, not a timer of its own that a busy host's
scheduling can beat, and it does not wait on Redis alone:

* a cached envelope (of the org's current cache epoch; it may say the agent has none) answers at once;
* a miss, or a Redis error, reads Postgres (one read per org and agent at a time, shared);
* a Redis read that has not answered when a read usually has (:class:`HedgeAfter`: the 95th
  percentile of the recent ones, at least ``directive_fallback_ms`` and at most four times that) is
  raced by that Postgres read, and the first answer wins;
* after a recent Redis failure (the assembly's Redis circuit is open) Postgres is read directly.

A read from Postgres refreshes the envelope behind the answer, never before it: a slow Redis must
not hold up the directive a second time.

A read that has not answered by the wall (on a busy host the answer can wait for a core although
Redis and Postgres are fine) is stood in for by the copy this process last read or wrote
(:mod:`service.directives.last_known`), if it is recent enough: the context keeps the agent's
instructions and says they are unconfirmed (``directive_unconfirmed``; ``source`` ``memory``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Final, Literal
from uuid import UUID

import msgspec
from redis.exceptions import RedisError

from service.assembly.hot import RedisCircuit, SingleFlight
from service.directives.store import MISS, DirectiveStore, Miss
from service.directives.types import DirectiveOut
from service.errors import forget_outcome

DirectiveSource = Literal["cache", "postgres", "memory"]

HEDGE_WINDOW: Final = 64
"""Redis reads whose latency sets when Postgres is asked too."""
HEDGE_PERCENTILE: Final = 0.95
HEDGE_CAP: Final = 4
"""The hedge waits at most this many times ``directive_fallback_ms``: a Postgres read then still
has most of a default wall."""


class HedgeAfter:
    """When a Redis read of a directive is late enough to ask Postgres too: the 95th percentile of
    the last ``HEDGE_WINDOW`` reads that answered (as the caller saw them, the event loop's delay
    included), within [``floor_ms``, ``HEDGE_CAP * floor_ms``]. A fixed 5 ms went off in most
    assemblies of a busy service whose Redis was fine, because the event loop answered late, and
    each paid a Postgres transaction for nothing (concurrency 4 at 100K: ~0.7 ms of CPU, Python and
    Postgres). A read slower than the recent ones is still raced, as in "The Tail at Scale". A read
    that Postgres beat counts as the time it took until then (a lower bound): a Redis that stops
    answering raises the wait towards the cap until the Redis circuit opens (Postgres directly)."""

    __slots__ = ("cap_s", "floor_s", "samples", "threshold_s")

    def __init__(self, floor_ms: float) -> None:
        self.floor_s = max(0.0, floor_ms) / 1000
        self.cap_s = HEDGE_CAP * self.floor_s
        self.samples: deque[float] = deque(maxlen=HEDGE_WINDOW)
        self.threshold_s = self.floor_s

    def observe(self, seconds: float) -> None:
        self.samples.append(seconds)
        if len(self.samples) % 8 == 0:  # re-sorted every 8 reads: 64 floats, a few µs
            ranked = sorted(self.samples)
            p95 = ranked[min(len(ranked) - 1, int(HEDGE_PERCENTILE * len(ranked)))]
            self.threshold_s = min(self.cap_s, max(self.floor_s, p95))


class DirectiveRead:
    """One per orchestrator: the directive reads of its assemblies."""

    def __init__(self, store: DirectiveStore, circuit: RedisCircuit, fallback_ms: float) -> None:
        self.store = store
        self.circuit = circuit
        self.hedge = HedgeAfter(fallback_ms)
        self._loads: SingleFlight[tuple[UUID, str], DirectiveOut | None] = SingleFlight()

    def read(self, org_id: UUID, agent_id: str) -> asyncio.Task[tuple[DirectiveOut | None, DirectiveSource]]:
        """The agent's directive (None: it has none) and where it came from.

        One task, which is the Redis read itself: it answers in the event-loop turn that reads the
        reply. A task that waited for a separate Redis read woke a turn later, and on a busy loop a
        turn can hold several assemblies' ranking: the branch then missed its wall with the answer in
        hand (concurrency 4 beside another service: ~100 of 400 directives late against ~40 hot
        sets, which are read this way). Postgres answering first ends the Redis read (cancelled)."""
        if not self.circuit.available():
            return asyncio.ensure_future(self._postgres_only(org_id, agent_id))
        return asyncio.ensure_future(self._read(org_id, agent_id))

    async def _postgres_only(self, org_id: UUID, agent_id: str) -> tuple[DirectiveOut | None, DirectiveSource]:
        return await self._postgres(org_id, agent_id), "postgres"

    async def _read(self, org_id: UUID, agent_id: str) -> tuple[DirectiveOut | None, DirectiveSource]:
        me = asyncio.current_task()
        assert me is not None
        loading: asyncio.Future[DirectiveOut | None] | None = None
        """The Postgres read the hedge started, if it did."""
        beaten = False
        """Postgres answered while the cache had not: its answer is ``loading``'s."""
        waiting = True
        """Still waiting for Redis (the only wait that Postgres's answer may end)."""

        def answered(read: asyncio.Future[DirectiveOut | None]) -> None:
            nonlocal beaten
            if waiting and not read.cancelled() and read.exception() is None:
                beaten = True
                me.cancel()
            # else the cache answered first, or Postgres failed: the cache may still answer

        def hedge() -> None:  # Redis is slow: ask Postgres too, and take whichever good answer comes first
            nonlocal loading
            loading = self._postgres(org_id, agent_id)
            loading.add_done_callback(answered)

        timer = asyncio.get_running_loop().call_later(self.hedge.threshold_s, hedge)
        started = time.perf_counter()
        hit: DirectiveOut | Miss | None
        try:
            hit = await self.store.read_cached(org_id, agent_id)
        except asyncio.CancelledError:
            if not beaten or loading is None:
                raise
            me.uncancel()
            self.hedge.observe(time.perf_counter() - started)  # at least this long
            return loading.result(), "postgres"
        except RedisError:
            self.circuit.failed()
            hit = MISS
        except msgspec.DecodeError:
            hit = MISS  # an unreadable envelope is a miss: Postgres has the directive
        else:
            self.circuit.succeeded()
            self.hedge.observe(time.perf_counter() - started)
        finally:
            waiting = False
            timer.cancel()
        if not isinstance(hit, Miss):  # the directive, or that the agent has none
            if loading is not None:
                loading.add_done_callback(forget_outcome)  # the shared load still refreshes the envelope
            return hit, "cache"
        return await (loading if loading is not None else self._postgres(org_id, agent_id)), "postgres"

    def _postgres(self, org_id: UUID, agent_id: str) -> asyncio.Future[DirectiveOut | None]:
        """The shared read from Postgres: shielded, so a request that stops waiting leaves it to fill
        the cache; the envelope is refreshed behind it unless Redis failed recently."""
        async def load() -> DirectiveOut | None:
            if self.circuit.available():
                return await self.store.load(org_id, agent_id, cache_behind=True)
            return await self.store.read_postgres(org_id, agent_id)

        return asyncio.ensure_future(self._loads.run((org_id, agent_id), load))

    async def aclose(self) -> None:
        await self._loads.drain()

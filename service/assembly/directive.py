"""The directive branch of an assembly: Redis first, Postgres on a miss, an error or a slow Redis.

The directive is the agent's standing instructions, a few hundred bytes that change what the model
does: every context holds it or says it is missing (``degradation_reasons``: ``directive_missing``).
So its branch has the whole retrieval wall by default, not a timer of its own that a busy host's
scheduling can beat, and it does not wait on Redis alone:

* a cached envelope (of the org's current cache epoch) answers at once;
* a miss, or a Redis error, reads Postgres (one read per org and agent at a time, shared);
* a Redis read that has not answered within ``directive_fallback_ms`` is raced by that Postgres
  read, and the first answer wins;
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
from typing import Literal
from uuid import UUID

import msgspec
from redis.exceptions import RedisError

from service.assembly.hot import RedisCircuit, SingleFlight
from service.directives.store import DirectiveStore
from service.directives.types import DirectiveOut
from service.errors import forget_outcome

DirectiveSource = Literal["cache", "postgres", "memory"]


class DirectiveRead:
    """One per orchestrator: the directive reads of its assemblies."""

    def __init__(self, store: DirectiveStore, circuit: RedisCircuit, fallback_ms: float) -> None:
        self.store = store
        self.circuit = circuit
        self.fallback_s = max(0.0, fallback_ms) / 1000
        self._loads: SingleFlight[tuple[UUID, str], DirectiveOut | None] = SingleFlight()

    async def read(self, org_id: UUID, agent_id: str) -> tuple[DirectiveOut | None, DirectiveSource]:
        """The agent's directive (None: it has none) and where it came from."""
        if not self.circuit.available():
            return await self._postgres(org_id, agent_id), "postgres"
        cached = asyncio.ensure_future(self.store.read_cached(org_id, agent_id))
        done, _ = await asyncio.wait({cached}, timeout=self.fallback_s)
        if not done:
            # Redis is slow: ask Postgres too, and take the cache's answer only if it comes first
            # and is a hit.
            loading = self._postgres(org_id, agent_id)
            await asyncio.wait({cached, loading}, return_when=asyncio.FIRST_COMPLETED)
            if not cached.done():
                cached.add_done_callback(forget_outcome)  # ends by the Redis socket timeout
                return await loading, "postgres"
            loading.add_done_callback(forget_outcome)  # the shared load still refreshes the envelope
        hit = self._hit(cached)
        if hit is not None:
            return hit, "cache"
        return await self._postgres(org_id, agent_id), "postgres"

    def _hit(self, cached: asyncio.Future[DirectiveOut | None]) -> DirectiveOut | None:
        """The envelope a finished Redis read found (None: a miss, or Redis failed)."""
        if not cached.done() or cached.cancelled():
            return None
        exc = cached.exception()
        if isinstance(exc, RedisError):
            self.circuit.failed()
            return None
        if isinstance(exc, msgspec.DecodeError):
            return None  # an unreadable envelope is a miss: Postgres has the directive
        if exc is not None:
            raise exc
        self.circuit.succeeded()
        return cached.result()

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

"""Per-agent hot sets in Redis: pinned, most important and most recently used memories, bounded in size.

Keys (the braces are a Redis Cluster hash tag, so one org's keys share a slot and ``MGET`` works):

* ``{org_id}:hot_memories:{agent_id}`` — the hot set: msgpack of the items (with their embeddings,
  so ranking needs no further read) and the two version stamps it was built under;
* ``{org_id}:hot_gen`` — the org's generation, bumped when an org-wide memory (``agent_id`` null)
  changes: such a memory belongs to every agent's hot set, so all of them go stale at once;
* ``{org_id}:hot_ver:{agent_id}`` — the agent's version, bumped when one of its memories changes.

A read is one ``MGET`` of the three keys; the set is used only if its stamps equal the current
generation and version, and its epoch the org's cache epoch (:mod:`service.db.epochs`: bumped in
Postgres when an invalidation could not reach Redis, so a set that missed a write while Redis was
unreachable is not served once Redis is back, whatever its counters say). A miss reads Postgres
and stores the set stamped with the counters (and epoch) read *before* the Postgres query, so a
fill racing a write can at worst store a set that the next read already sees as stale:
invalidation never depends on winning a race. Invalidation (the
``memories_changed`` hook, run after every committed create/patch/delete and after feedback)
bumps the counters and deletes the agent's key to free memory at once.

Only agents with live memories of their own get a key: requests naming ever new agents cannot fill
Redis and evict other orgs' keys. The set of an agent that has none (an unknown ``agent_id``, or
one holding only org-wide memories) is the org-wide set, the same for every such agent: it is
stored once per org under ``{org_id}:hot_memories:#org-wide`` (``#`` is never in an agent id),
stamped with the generation and epoch only, and served to an agent without a key of its own after
one indexed ``EXISTS`` query says the agent still has no memories of its own (before, an agent
holding only org-wide memories made every one of its assemblies rank all of the org's org-wide
memories in Postgres, 15-30 ms at 10,000 of them, so its hot branch timed out: L1). Every set
is written with a TTL (``hot_ttl_s``), and an org's sets together stay under
``RedisSettings.org_hot_set_bytes``: storing one deletes the org's least recently filled sets past
it (:mod:`service.tenancy.cachebound`; ``{org_id}:hot_lru`` and ``{org_id}:hot_bytes`` keep the account).

Fills are single-flight per (org, agent, stamps) and shielded: when a request stops waiting at its
hot-branch deadline, the fill still finishes and caches the set, so the next request hits. A set
older than ``hot_refresh_s`` (less up to a quarter, a fixed point per agent, so that sets filled
together are not all refilled together; :func:`refresh_age_s`) but with current stamps is served
while a background fill replaces it, so age alone never makes a request wait; the key expires
after ``hot_ttl_s`` without use. If
Redis fails, :class:`RedisCircuit` opens for a short while: the hot branch is skipped instead of
every request waiting on a dead server (Postgres is not asked instead: filling a hot set scans an
agent's memories, too costly per request, and cold search already covers relevance).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, Literal, TypeVar
from uuid import UUID

import asyncpg
import msgspec
import numpy as np
import numpy.typing as npt
import structlog
from redis.exceptions import RedisError

from service.assembly.types import HotMemoryOut, HotSetOut
from service.db import Database
from service.db.epochs import CacheEpochs
from service.db.redisconn import RedisClient, org_prefix
from service.settings import AssemblySettings
from service.tenancy.cachebound import BOUND_LUA, lru_key, sizes_key

log = structlog.get_logger(__name__)
K = TypeVar("K")
V = TypeVar("V")


def hot_key(org_id: UUID, agent_id: str) -> str:
    return f"{org_prefix(org_id)}hot_memories:{agent_id}"


ORG_WIDE = "#org-wide"
"""The hot-set name of agents without memories of their own (``#`` is not allowed in agent ids)."""


def generation_key(org_id: UUID) -> str:
    return f"{org_prefix(org_id)}hot_gen"


def version_key(org_id: UUID, agent_id: str) -> str:
    return f"{org_prefix(org_id)}hot_ver:{agent_id}"


HOT_CACHE = "hot"
"""Name of the org's bounded hot-set cache (:mod:`service.tenancy.cachebound`): ``{org_id}:hot_lru``,
``{org_id}:hot_bytes``."""

# KEYS[1] hot set, KEYS[2] the org's lru, KEYS[3] its sizes; ARGV[1] agent, ARGV[2] blob, ARGV[3] ttl ms,
# ARGV[4] the org's byte bound, ARGV[5] hot-set key prefix. The bookkeeping lives as long as the sets.
_STORE = BOUND_LUA + """
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local total = bound(KEYS[2], KEYS[3], ARGV[1], string.len(ARGV[2]), tonumber(ARGV[4]), ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
return total
"""

COUNTER_TTL_S = 7 * 24 * 3600
"""Counters outlive any hot set (an expired counter reads 0, which no newer set carries: still a miss)."""


class HotItem(msgspec.Struct, array_like=True):
    id: str
    agent_id: str | None
    kind: str
    text: str
    embedding: bytes | None
    """float32 little-endian, as stored; None for rows without a vector."""
    importance: float
    usefulness: float
    pinned: bool
    created_at: datetime
    last_accessed_at: datetime | None
    access_count: int
    occurred_at: datetime | None = None
    """When the memory's event happened (None only in sets cached before event times existed)."""
    ends_at: datetime | None = None
    """When it stops being served: its ``expires_at`` or the end of its valid time (``valid_until``),
    the earlier; None: never. A set is cached for up to ``hot_ttl_s``, so every read leaves out what
    has ended since the set was built (:func:`live`)."""

    def vector(self) -> npt.NDArray[np.float32] | None:
        return None if self.embedding is None else np.frombuffer(self.embedding, dtype="<f4")

    def out(self) -> HotMemoryOut:
        return HotMemoryOut(id=UUID(self.id), agent_id=self.agent_id, kind=self.kind, text=self.text,
                            importance=self.importance, usefulness=self.usefulness, pinned=self.pinned,
                            created_at=self.created_at, occurred_at=self.occurred_at or self.created_at,
                            last_accessed_at=self.last_accessed_at, access_count=self.access_count)


class HotBlob(msgspec.Struct, array_like=True):
    generation: int
    version: int
    built_at: datetime
    items: list[HotItem]
    epoch: int = -1
    """The org's cache epoch when the fill began (-1: a set cached before epochs existed, never current)."""


def _decode(raw: bytes | str | None) -> HotBlob | None:
    if raw is None:
        return None
    try:
        return msgspec.msgpack.decode(raw if isinstance(raw, bytes) else raw.encode(), type=HotBlob)
    except msgspec.DecodeError:
        return None  # written by another version of the service: rebuild it


@dataclass(frozen=True, slots=True)
class HotRead:
    items: list[HotItem]
    source: Literal["cache", "postgres"]
    built_at: datetime


def as_array(vector: object) -> npt.NDArray[np.float32] | None:
    """A pgvector column value (``pgvector.Vector`` from the asyncpg codec) as a float32 array."""
    if vector is None:
        return None
    to_numpy = getattr(vector, "to_numpy", None)
    return np.asarray(to_numpy() if to_numpy is not None else vector, dtype=np.float32)


def _item(row: asyncpg.Record) -> HotItem:
    vector = as_array(row["embedding"])
    return HotItem(
        id=str(row["id"]), agent_id=row["agent_id"], kind=row["kind"], text=row["text"],
        embedding=None if vector is None else vector.astype("<f4").tobytes(),
        importance=float(row["importance"]), usefulness=float(row["usefulness"]), pinned=bool(row["pinned"]),
        created_at=row["created_at"], last_accessed_at=row["last_accessed_at"], access_count=row["access_count"],
        occurred_at=row["occurred_at"], ends_at=row["ends_at"],
    )


def live(items: list[HotItem], now: datetime | None = None) -> list[HotItem]:
    """The items that have not ended (expired, or past their valid time) since their set was built."""
    at = now or datetime.now(UTC)
    if all(item.ends_at is None or item.ends_at > at for item in items):
        return items
    return [item for item in items if item.ends_at is None or item.ends_at > at]


REFRESH_SPREAD = 0.25
"""Agents' sets are rebuilt at between 75% and 100% of ``hot_refresh_s`` (a fixed point per agent)."""


def refresh_age_s(refresh_s: float, org_id: UUID, agent_id: str) -> float:
    """The age past which this agent's set is rebuilt behind the request that reads it.

    Sets filled together (every agent's first assembly after a start, or after an org-wide write)
    would otherwise all age past ``refresh_s`` together and be refilled in one burst of Postgres
    reads; each agent's own point in the last quarter spreads the refills out."""
    point = zlib.crc32(f"{org_id}:{agent_id}".encode()) / 2**32
    return refresh_s * (1.0 - REFRESH_SPREAD * point)


class RedisCircuit:
    """Remembers a recent Redis failure so the hot path skips Redis for ``retry_s`` seconds."""

    def __init__(self, retry_s: float) -> None:
        self.retry_s = retry_s
        self._open_until = 0.0

    def available(self) -> bool:
        return time.monotonic() >= self._open_until

    def failed(self) -> None:
        self._open_until = time.monotonic() + self.retry_s

    def succeeded(self) -> None:
        self._open_until = 0.0


class SingleFlight(Generic[K, V]):
    """At most one running task per key; callers share it, and it survives their cancellation."""

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Task[V]] = {}

    def run(self, key: K, work: Callable[[], Awaitable[V]]) -> Awaitable[V]:
        # shield: a caller's timeout cancels its wait, not the shared work.
        return asyncio.shield(self.start(key, work))

    def start(self, key: K, work: Callable[[], Awaitable[V]]) -> asyncio.Task[V]:
        """The running task for ``key``, started if there is none (nobody has to wait for it)."""
        task = self._running.get(key)
        if task is None:
            task = asyncio.ensure_future(work())
            self._running[key] = task
            task.add_done_callback(lambda t: self._finished(key, t))
        return task

    def _finished(self, key: K, task: asyncio.Task[V]) -> None:
        if self._running.get(key) is task:
            del self._running[key]
        if not task.cancelled():
            task.exception()  # retrieved: a fill nobody waits for any more must not warn at exit

    async def drain(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class HotSetStore:
    def __init__(self, db: Database, redis: RedisClient, settings: AssemblySettings, circuit: RedisCircuit,
                 epochs: CacheEpochs | None = None, org_bytes: int = 16 * 1024 * 1024) -> None:
        self.db = db
        self.redis = redis
        self.settings = settings
        self.circuit = circuit
        self.org_bytes = org_bytes
        """Most bytes of hot sets one org keeps in Redis (``RedisSettings.org_hot_set_bytes``)."""
        self._store = redis.register_script(_STORE)
        self.epochs = epochs if epochs is not None else CacheEpochs(db)
        self._fills: SingleFlight[tuple[UUID, str, int, int, int | None], HotBlob] = SingleFlight()

    async def get(self, org_id: UUID, agent_id: str, on_miss: Callable[[], None] | None = None) -> HotRead:
        """The agent's hot set from Redis, or from Postgres on a miss (then cached; ``on_miss`` is called
        first, so an assembly can wait for the Postgres read). Raises RedisError."""
        # Epoch None: the org's cached sets are not trusted now.
        if on_miss is not None and not self.epochs.fresh(org_id):
            on_miss()
        epoch, (raw, generation, version) = await self.epochs.along(org_id, self.redis.mget(
            [hot_key(org_id, agent_id), generation_key(org_id), version_key(org_id, agent_id)]))
        gen, ver = int(generation or 0), int(version or 0)
        if epoch is not None:
            blob = _decode(raw)
            if blob is not None and blob.generation == gen and blob.version == ver and blob.epoch == epoch:
                return self._cached(org_id, agent_id, blob, gen, ver, epoch)
        if on_miss is not None:
            on_miss()
        if epoch is not None:
            # A miss: the shared org-wide set is read only now, not carried along every hit.
            shared = _decode(await self.redis.get(hot_key(org_id, ORG_WIDE)))
            if (shared is not None and shared.generation == gen and shared.epoch == epoch
                    and not await self._has_own(org_id, agent_id)):
                return self._cached(org_id, agent_id, shared, gen, ver, epoch)
        blob = await self._fills.run((org_id, agent_id, gen, ver, epoch),
                                     lambda: self._fill(org_id, agent_id, gen, ver, epoch))
        return HotRead(live(blob.items), "postgres", blob.built_at)

    def _cached(self, org_id: UUID, agent_id: str, blob: HotBlob, gen: int, ver: int, epoch: int) -> HotRead:
        if (datetime.now(UTC) - blob.built_at).total_seconds() > refresh_age_s(self.settings.hot_refresh_s,
                                                                              org_id, agent_id):
            # Aged, not changed: serve it and rebuild it behind this request (nobody waits).
            self._fills.start((org_id, agent_id, gen, ver, epoch),
                              lambda: self._fill(org_id, agent_id, gen, ver, epoch))
        return HotRead(live(blob.items), "cache", blob.built_at)

    async def _has_own(self, org_id: UUID, agent_id: str) -> bool:
        """Whether the agent has live memories of its own (one index probe, not a ranking)."""
        return bool(await self.db.read(org_id, lambda tx: tx.fetchval("hot.agent_exists", org_id, agent_id),
                                       timeout_ms=self.settings.hot_fill_timeout_ms))

    async def load(self, org_id: UUID, agent_id: str) -> list[HotItem]:
        """The hot set straight from Postgres (no cache involved)."""
        return (await self._load(org_id, agent_id))[0]

    async def _load(self, org_id: UUID, agent_id: str) -> tuple[list[HotItem], bool]:
        """The hot set, and whether the agent has live memories of its own."""
        s = self.settings
        rows = await self.db.read(org_id, lambda tx: tx.fetch(
            "hot.fill", org_id, agent_id, s.hot_set_size, s.hot_access_half_life_hours),
            timeout_ms=s.hot_fill_timeout_ms)
        return [_item(r) for r in rows], bool(rows) and bool(rows[0]["agent_exists"])

    async def _fill(self, org_id: UUID, agent_id: str, gen: int, ver: int, epoch: int | None) -> HotBlob:
        items, agent_exists = await self._load(org_id, agent_id)
        blob = HotBlob(gen, ver, datetime.now(UTC), items, -1 if epoch is None else epoch)
        if epoch is None:
            return blob  # nothing is cached while the org's cache is untrusted
        # No key per agent without memories of its own (see the module docstring): its set is the
        # org-wide one, stored once for all of them (its version stamp unused).
        name = agent_id if agent_exists else ORG_WIDE
        if not agent_exists and agent_id != ORG_WIDE:
            # Its own memories have all ended (or it never had any): a set cached under its own key
            # while it had some would otherwise be read, and kept alive, instead of the shared one.
            with contextlib.suppress(RedisError):
                await self.redis.delete(hot_key(org_id, agent_id))
        encoded = msgspec.msgpack.encode(blob if agent_exists else HotBlob(gen, 0, blob.built_at, items, epoch))
        if len(encoded) > self.org_bytes:
            return blob  # larger than the org's whole share: served from Postgres, never cached
        try:
            keys = [hot_key(org_id, name), lru_key(org_id, HOT_CACHE), sizes_key(org_id, HOT_CACHE)]
            await self._store(keys=keys, args=[name, encoded, self.settings.hot_ttl_s * 1000, self.org_bytes,
                                    hot_key(org_id, "")])
        except RedisError as exc:
            self.circuit.failed()
            log.warning("hot_set_cache_write_failed", error=str(exc))
        return blob

    async def read_for_api(self, org_id: UUID, agent_id: str) -> HotSetOut:
        """GET /v1/memories/hot: the cached set, else Postgres (also when Redis is down: correctness first)."""
        try:
            read = await self.get(org_id, agent_id)
        except RedisError as exc:
            log.warning("hot_set_read_failed", error=str(exc))
            read = HotRead(await self.load(org_id, agent_id), "postgres", datetime.now(UTC))
        return HotSetOut(agent_id=agent_id, source=read.source, built_at=read.built_at,
                         items=[item.out() for item in read.items])

    async def invalidate(self, org_id: UUID, agent_ids: Iterable[str | None]) -> None:
        """Memory hook: the hot sets holding memories of these agents (None: org-wide) are stale."""
        agents = set(agent_ids)
        pipe = self.redis.pipeline(transaction=False)
        if None in agents:
            pipe.incr(generation_key(org_id))
            pipe.expire(generation_key(org_id), COUNTER_TTL_S)
        for agent in agents:
            if agent is not None:
                pipe.incr(version_key(org_id, agent))
                pipe.expire(version_key(org_id, agent), COUNTER_TTL_S)
                pipe.delete(hot_key(org_id, agent))
        try:
            await pipe.execute()
        except RedisError as exc:
            # The write is committed and a cached set may lag it: when Redis comes back with that set
            # and its old counters, the new epoch is what keeps it from being served.
            self.circuit.failed()
            log.warning("hot_set_invalidation_failed", org_id=str(org_id), error=str(exc))
            await self.epochs.bump(org_id)

    async def aclose(self) -> None:
        await self._fills.drain()

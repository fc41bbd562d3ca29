"""Read replicas (PostgreSQL streaming replication) with read-your-writes.

``PGCONTEXT_READ_DATABASE_URLS`` names one or more standbys of the primary, reached as the service
role. ``Database.read`` runs a read-only tenant transaction on one of them when it may:

- every write transaction (``Database.tenant`` without ``readonly``) ends by reading the primary's
  WAL position after its commit (``pg_current_wal_lsn()``); that LSN is remembered per org in this
  process and in Redis (``{<org_id>}:pg:write_lsn``, the larger value wins, expires after
  ``read_lsn_ttl_s``) so every service instance knows it;
- a poller reads each replica's ``pg_last_wal_replay_lsn()`` every ``read_poll_ms`` and the
  primary's ``pg_current_wal_lsn()`` beside it. A replica's lag is how long ago the primary had WAL
  the replica has not replayed yet (0 when it has replayed everything the primary had at the last
  sample), so an idle primary does not make a replica look behind;
- a read for an org uses a replica that is up, lags at most ``read_max_lag_ms`` and has replayed
  that org's last write; otherwise the primary. A replica that fails (refused connection, shut down,
  recovery conflict) is marked down until the poller reaches it again, and the read runs again on
  the primary.

With no replica configured none of this exists: ``Database.read`` is ``Database.tenant(readonly=True)``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final
from uuid import UUID

import asyncpg
import structlog
from prometheus_client import Counter, Gauge
from redis.exceptions import RedisError

from service.db.redisconn import org_prefix

if TYPE_CHECKING:
    from service.db.redisconn import RedisClient
    from service.settings import DatabaseSettings

log = structlog.get_logger(__name__)

READS: Final = Counter("pgcontext_db_reads", "Read transactions routed by Database.read, by target", ["target"])
SKIPS: Final = Counter("pgcontext_read_replica_skips",
                       "Reads that could not use a replica and went to the primary, by reason", ["reason"])
LAG: Final = Gauge("pgcontext_read_replica_lag_seconds", "Replica lag behind the primary (see service.db.replicas)",
                   ["replica"])
UP: Final = Gauge("pgcontext_read_replica_up", "1 when the replica answered its last poll as a standby", ["replica"])

_LSN_TTL_CAP = 100_000
"""In-process write LSNs kept before the map is cleared (Redis still holds them)."""
_MAX_LSN: Final = """
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur < ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
"""
_POLL = "SELECT pg_is_in_recovery(), (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint"
WRITE_LSN = "SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint"


def lsn_key(org_id: UUID) -> str:
    return f"{org_prefix(org_id)}pg:write_lsn"


def _hex(lsn: int) -> str:
    """Fixed width, so Redis compares two LSNs as strings (Lua numbers lose bits past 2^53)."""
    return f"{lsn:016x}"


def is_lost(exc: BaseException) -> bool:
    """A replica error after which the same read should run on the primary: the connection is gone or
    refused or broken mid-statement, the server is shutting down or starting (57P*), or a recovery
    conflict cancelled it (40001)."""
    if isinstance(exc, asyncpg.PostgresError):
        state = getattr(exc, "sqlstate", None) or ""
        return state.startswith(("08", "57P", "53")) or state == "40001"
    # InternalClientError: asyncpg's protocol state when the server died mid-statement ("cannot switch
    # to state ..."), as `pg_ctl stop -m fast` can leave it.
    return isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError, ConnectionError, OSError,
                            asyncio.TimeoutError))


@dataclass
class Replica:
    index: int
    dsn: str
    pool: asyncpg.Pool | None = None
    up: bool = False
    replay_lsn: int = 0
    lag_ms: float = math.inf

    @property
    def label(self) -> str:
        return str(self.index)

    def mark_down(self) -> None:
        self.up = False
        UP.labels(self.label).set(0)


@dataclass
class ReplicaSet:
    primary: asyncpg.Pool
    redis: RedisClient
    replicas: list[Replica]
    pool_max: int
    max_lag_ms: float
    poll_ms: float
    lsn_ttl_s: float
    _writes: dict[UUID, int] = field(default_factory=dict)
    _primary_samples: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)
    _next: itertools.count[int] = field(default_factory=itertools.count)
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.poll()
        self._task = asyncio.create_task(self._poll_forever(), name="replica-poller")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for replica in self.replicas:
            if replica.pool is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(replica.pool.close(), 5)

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_ms / 1000)
            try:
                await self.poll()
            except Exception as exc:  # the poller must outlive any one bad poll
                log.warning("replica_poll_failed", error=repr(exc)[:300])

    async def poll(self) -> None:
        """Sample the primary's WAL position, then every replica's replay position and lag."""
        now = time.monotonic()
        try:
            async with self.primary.acquire() as conn:
                primary_lsn = int(await conn.fetchval(WRITE_LSN))
            self._primary_samples.append((now, primary_lsn))
        except Exception as exc:
            log.warning("primary_lsn_poll_failed", error=repr(exc)[:300])
        horizon = now - (2 * self.max_lag_ms + 1000) / 1000
        while len(self._primary_samples) > 1 and self._primary_samples[0][0] < horizon:
            self._primary_samples.popleft()
        await asyncio.gather(*(self._poll_replica(replica, now) for replica in self.replicas))

    async def _poll_replica(self, replica: Replica, now: float) -> None:
        from service.db.pool import create_pool

        timeout = max(0.5, self.poll_ms / 1000 * 5)
        try:
            pool = replica.pool
            if pool is None:
                pool = await asyncio.wait_for(create_pool(replica.dsn, min_size=1, max_size=self.pool_max), timeout)
                replica.pool = pool
            assert pool is not None
            async with pool.acquire(timeout=timeout) as conn:
                row = await conn.fetchrow(_POLL, timeout=timeout)
        except Exception as exc:
            if replica.up:
                log.warning("read_replica_down", replica=replica.index, error=repr(exc)[:300])
            replica.mark_down()
            return
        assert row is not None
        if not row[0] or row[1] is None:  # promoted, or not a standby: not a replica of this primary
            replica.mark_down()
            return
        replica.replay_lsn = int(row[1])
        behind = next((t for t, lsn in self._primary_samples if lsn > replica.replay_lsn), None)
        replica.lag_ms = 0.0 if behind is None else (now - behind) * 1000
        if not replica.up:
            log.info("read_replica_up", replica=replica.index)
        replica.up = True
        UP.labels(replica.label).set(1)
        LAG.labels(replica.label).set(replica.lag_ms / 1000)

    async def note_write(self, org_id: UUID, lsn: int) -> None:
        """Remember an org's write at ``lsn`` (here and in Redis) so reads wait for a replica to replay it."""
        if len(self._writes) >= _LSN_TTL_CAP:
            self._writes.clear()
        if lsn > self._writes.get(org_id, 0):
            self._writes[org_id] = lsn
        try:
            await self.redis.eval(_MAX_LSN, 1, lsn_key(org_id), _hex(lsn), int(self.lsn_ttl_s * 1000))
        except RedisError as exc:
            SKIPS.labels("redis_write_failed").inc()
            log.warning("write_lsn_not_shared", error=str(exc))

    async def route(self, org_id: UUID) -> Replica | None:
        """A replica that may serve ``org_id``'s read now, or None (the primary)."""
        live = [r for r in self.replicas if r.up and r.pool is not None]
        if not live:
            SKIPS.labels("down").inc()
            return None
        fresh = [r for r in live if r.lag_ms <= self.max_lag_ms]
        if not fresh:
            SKIPS.labels("lagging").inc()
            return None
        try:
            shared = await self.redis.get(lsn_key(org_id))
        except RedisError:
            SKIPS.labels("redis_unavailable").inc()
            return None
        needed = max(self._writes.get(org_id, 0), int(shared, 16) if shared else 0)
        ready = [r for r in fresh if r.replay_lsn >= needed]
        if not ready:
            SKIPS.labels("behind_write").inc()
            return None
        return ready[next(self._next) % len(ready)]


async def start_replicas(settings: DatabaseSettings, primary: asyncpg.Pool, redis: RedisClient) -> ReplicaSet | None:
    """The replica set of ``settings.read_urls`` with its poller running, or None when there is none.
    A replica that is down at start is polled (and used) once it answers."""
    if not settings.read_urls:
        return None
    replicas = ReplicaSet(primary, redis, [Replica(i, dsn) for i, dsn in enumerate(settings.read_urls)],
                          pool_max=settings.pool_max, max_lag_ms=settings.read_max_lag_ms,
                          poll_ms=settings.read_poll_ms, lsn_ttl_s=settings.read_lsn_ttl_s)
    await replicas.start()
    return replicas

"""Directives: Postgres is the truth; Redis holds an envelope (content, version, updated_at) per agent.

Key ``{org_id}:directive:{agent_id}`` (the braces are a Redis Cluster hash tag: one org, one slot).
Reads go Redis first, Postgres on a miss (then fill the cache); writes commit to Postgres and then
refresh the envelope, so the next read sees the write. Envelopes are only ever replaced by a newer
version (a Lua compare-and-set), so two racing writers cannot leave an older directive cached.
Redis being down only costs latency: every path falls back to Postgres.

Each envelope also carries the org's cache epoch (:mod:`service.db.epochs`) read before the Postgres
read or write it caches, and is used only while that is still the org's epoch. A write whose Redis
step fails bumps the epoch, so when Redis comes back with the old envelope no instance serves it
(an instance learns the new epoch within ``PGCONTEXT_REDIS_EPOCH_CHECK_S``; the writer's own at once).

An agent without a directive has an envelope too (``absent``, version 0: any directive written later
is newer), so that assembling for it reads Redis, not Postgres, every time. A delete keeps the
agent's row and version (without its text) and leaves an ``absent`` envelope at that version, which
wins over the deleted text's; the next directive takes the next version. So versions never start
again, and a read of a deleted text that is cached late loses to the deletion and to what follows.

Envelopes are stored without a TTL, so a Redis run with ``maxmemory-policy volatile-lru`` (the
embedded one; docs/operations.md for others) never evicts them under memory pressure; instead each
org's envelopes are bounded (``RedisSettings.org_directive_bytes``, :mod:`service.tenancy.cachebound`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final
from uuid import UUID

import msgspec
import structlog
from asyncpg import Record
from redis.exceptions import RedisError

from service.db import Database, TenantTx
from service.db.epochs import CacheEpochs
from service.db.redisconn import RedisClient, org_prefix
from service.directives.last_known import LastKnown
from service.directives.types import DirectiveOut
from service.tenancy.cachebound import BOUND_LUA, UNTRACK, lru_key, sizes_key

log = structlog.get_logger(__name__)

VERSION_MAX: Final = 2**31 - 1
"""The last version a directive can take (an integer column): a directive at it can no longer change."""

DIRECTIVE_CACHE = "directive"
"""Name of the org's bounded envelope cache (:mod:`service.tenancy.cachebound`): ``{org_id}:directive_lru``,
``..._bytes``."""

# KEYS[1] envelope key, KEYS[2] the org's lru, KEYS[3] its sizes; ARGV[1] envelope JSON; ARGV[2] its
# version; ARGV[3] its epoch; ARGV[4] agent id; ARGV[5] the org's byte bound; ARGV[6] envelope key
# prefix. Newer is (epoch, version) compared in that order; an envelope without an epoch is the
# oldest; at one version, a deletion's (absent) envelope is newer than the text it deleted. No TTL,
# on the envelope or its bookkeeping: Redis's volatile-lru eviction never takes them (only the org's
# own bound does, least recently stored first).
_SET_IF_NEWER = BOUND_LUA + """
local current = redis.call('GET', KEYS[1])
if current then
  local ok, decoded = pcall(cjson.decode, current)
  if ok and decoded['version'] then
    local epoch = tonumber(decoded['epoch'] or -1)
    local new_epoch = tonumber(ARGV[3])
    local version = tonumber(decoded['version'])
    local new_version = tonumber(ARGV[2])
    if epoch > new_epoch or (epoch == new_epoch and (version > new_version
                                                     or (version == new_version and decoded['absent'] == true))) then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1])
bound(KEYS[2], KEYS[3], ARGV[4], string.len(ARGV[1]), tonumber(ARGV[5]), ARGV[6])
return 1
"""


def cache_key(org_id: UUID, agent_id: str) -> str:
    return f"{org_prefix(org_id)}directive:{agent_id}"


class Envelope(DirectiveOut, kw_only=True):
    """What Redis holds: the directive and the org's cache epoch it was read or written under."""

    epoch: int = -1
    """-1: an envelope from before epochs existed (never current)."""
    absent: bool = False
    """The agent had no directive (content empty, version 0)."""

    def directive(self) -> DirectiveOut | None:
        if self.absent:
            return None
        return DirectiveOut(agent_id=self.agent_id, content=self.content, version=self.version,
                            updated_at=self.updated_at)


class Miss:
    """:meth:`DirectiveStore.read_cached` found nothing current in Redis (not: "no directive")."""


MISS: Final = Miss()
_NEVER: Final = datetime(1970, 1, 1, tzinfo=UTC)


class DirectiveStore:
    def __init__(self, db: Database, redis: RedisClient, epochs: CacheEpochs | None = None,
                 org_bytes: int = 16 * 1024 * 1024) -> None:
        self.db = db
        self.redis = redis
        self.epochs = epochs if epochs is not None else CacheEpochs(db)
        self.org_bytes = org_bytes
        """Most bytes of envelopes one org keeps in Redis (``RedisSettings.org_directive_bytes``)."""
        self._set_if_newer = redis.register_script(_SET_IF_NEWER)
        self._untrack = redis.register_script(UNTRACK)
        self._caching: set[asyncio.Future[bool]] = set()
        """Envelope writes behind a read (``load(cache_behind=True)``)."""
        self.last_known = LastKnown()
        """Every directive this process reads or writes, for an assembly whose read does not answer."""

    def _keys(self, org_id: UUID, agent_id: str) -> list[str]:
        return [cache_key(org_id, agent_id), lru_key(org_id, DIRECTIVE_CACHE), sizes_key(org_id, DIRECTIVE_CACHE)]

    async def _cache(self, org_id: UUID, directive: DirectiveOut, epoch: int | None) -> bool:
        """Store the envelope (unless ``epoch`` is None: the org's cache is not trusted now); False if
        Redis failed."""
        if epoch is None:
            return True
        return await self._store(org_id, Envelope(agent_id=directive.agent_id, content=directive.content,
                                                  version=directive.version, updated_at=directive.updated_at,
                                                  epoch=epoch))

    async def _cache_absent(self, org_id: UUID, agent_id: str, epoch: int | None, version: int = 0) -> bool:
        """Store that the agent has no directive: never had one (version 0: whatever is written later
        replaces it) or had it deleted (the deleted one's version: a read of the deleted text that is
        cached late loses to it)."""
        if epoch is None:
            return True
        return await self._store(org_id, Envelope(agent_id=agent_id, content="", version=version, updated_at=_NEVER,
                                                  epoch=epoch, absent=True))

    async def _store(self, org_id: UUID, entry: Envelope) -> bool:
        envelope = msgspec.json.encode(entry)
        if len(envelope) > self.org_bytes:
            # Larger than the org's whole share: read from Postgres every time. An older envelope may
            # be cached: drop it (a failure to is a failed cache write like any other).
            try:
                await self._untrack(keys=self._keys(org_id, entry.agent_id), args=[entry.agent_id])
            except RedisError:
                return False
            return True
        try:
            await self._set_if_newer(keys=self._keys(org_id, entry.agent_id),
                                     args=[envelope, entry.version, entry.epoch, entry.agent_id, self.org_bytes,
                                           cache_key(org_id, "")])
        except RedisError as exc:
            log.warning("directive_cache_write_failed", error=str(exc))
            return False
        return True

    async def read_cached(self, org_id: UUID, agent_id: str) -> DirectiveOut | Miss | None:
        """The cached envelope's directive (None: the agent has none) if it is of the org's current
        cache epoch, else :data:`MISS` (raises RedisError when Redis is unreachable)."""
        started = time.monotonic()
        # (An epoch read after the GET, a newer one only turns the envelope into a miss.)
        epoch, raw = await self.epochs.along(org_id, self.redis.get(cache_key(org_id, agent_id)))
        if epoch is None or raw is None:
            return MISS
        envelope = msgspec.json.decode(raw, type=Envelope)
        if envelope.epoch != epoch:
            return MISS
        directive = envelope.directive()
        self.last_known.remember(org_id, agent_id, directive, started)
        return directive

    async def load(self, org_id: UUID, agent_id: str, *, cache_behind: bool = False) -> DirectiveOut | None:
        """The directive from Postgres, then cached. ``cache_behind``: the envelope is written after
        this returns (context assembly: a slow Redis must not hold up the directive read from
        Postgres because it was slow)."""
        epoch = await self.epochs.current(org_id)  # before the read: a bump after it makes the stamp old
        directive, deleted_version = await self.read_postgres_state(org_id, agent_id)
        caching = (self._cache(org_id, directive, epoch) if directive is not None
                   else self._cache_absent(org_id, agent_id, epoch, deleted_version))
        if cache_behind:
            task = asyncio.ensure_future(caching)
            self._caching.add(task)
            task.add_done_callback(self._caching.discard)
        else:
            await caching
        return directive

    async def read_postgres(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        """The directive as Postgres has it (no cache involved)."""
        return (await self.read_postgres_state(org_id, agent_id))[0]

    async def read_postgres_state(self, org_id: UUID, agent_id: str) -> tuple[DirectiveOut | None, int]:
        """The directive as Postgres has it, and when it has none the version of the one deleted last (0:
        never had one)."""
        started = time.monotonic()
        async with self.db.tenant(org_id, readonly=True) as tx:
            row = await tx.fetchrow("directives.get", org_id, agent_id)
        directive = None if row is None or row["content"] is None else DirectiveOut(
            agent_id=row["agent_id"], content=row["content"], version=row["version"], updated_at=row["updated_at"])
        self.last_known.remember(org_id, agent_id, directive, started)
        return directive, 0 if row is None or directive is not None else int(row["version"])

    async def aclose(self) -> None:
        """Finish the envelope writes still under way (each bounded by the Redis socket timeout)."""
        if self._caching:
            await asyncio.gather(*self._caching, return_exceptions=True)
        await self.epochs.aclose()

    async def get(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        try:
            cached = await self.read_cached(org_id, agent_id)
        except (RedisError, msgspec.DecodeError) as exc:
            log.warning("directive_cache_read_failed", error=str(exc))
            cached = MISS
        return await self.load(org_id, agent_id) if isinstance(cached, Miss) else cached

    async def put(self, org_id: UUID, agent_id: str, content: str) -> DirectiveOut:
        epoch = await self.epochs.current(org_id)
        async with self.db.tenant(org_id) as tx:
            directive = _written(await tx.fetchrow("directives.upsert", org_id, agent_id, content))
        await self.publish(org_id, [directive], epoch)
        return directive

    @staticmethod
    async def restore(tx: TenantTx, agent_id: str, content: str, version: int | None, created_at: datetime,
                      updated_at: datetime) -> DirectiveOut:
        """A directive from an export, written in the caller's transaction (an import's: :meth:`publish` it
        once that committed): its version and times kept for an agent without one; other text replaces the
        agent's at its next version, at least the exported one (``version`` None: the next, as a PUT)."""
        if version is None:
            return _written(await tx.fetchrow("directives.upsert", tx.org_id, agent_id, content))
        return _written(await tx.fetchrow("directives.restore", tx.org_id, agent_id, content, version, created_at,
                                          updated_at))

    async def publish(self, org_id: UUID, directives: Iterable[DirectiveOut], epoch: int | None) -> None:
        """Directives a committed transaction wrote, remembered and cached (``epoch``: the org's cache epoch
        read before that transaction began)."""
        for directive in directives:
            self.last_known.remember(org_id, directive.agent_id, directive, time.monotonic())
            if not await self._cache(org_id, directive, epoch):
                await self.epochs.bump(org_id)  # the old envelope may still be in Redis: stop trusting it

    async def delete(self, org_id: UUID, agent_id: str) -> bool:
        """Delete the agent's directive (False: it had none); its envelope then says "none" at the
        deleted directive's version."""
        epoch = await self.epochs.current(org_id)
        async with self.db.tenant(org_id) as tx:
            version = await tx.fetchval("directives.delete", org_id, agent_id)
        self.last_known.remember(org_id, agent_id, None, time.monotonic())
        if version is not None and epoch is not None:
            cached = await self._cache_absent(org_id, agent_id, epoch, version)
        else:
            cached = await self._uncache(org_id, agent_id)
        if not cached:
            await self.epochs.bump(org_id)  # the deleted directive's envelope may still be in Redis: stop trusting it
        return version is not None

    async def _uncache(self, org_id: UUID, agent_id: str) -> bool:
        """Drop the agent's envelope; False if Redis failed."""
        try:
            await self._untrack(keys=self._keys(org_id, agent_id), args=[agent_id])
        except RedisError as exc:
            log.warning("directive_cache_delete_failed", error=str(exc))
            return False
        return True


def _written(row: Record | None) -> DirectiveOut:
    """The directive a write returned (its row)."""
    assert row is not None
    return DirectiveOut(agent_id=row["agent_id"], content=row["content"], version=row["version"],
                        updated_at=row["updated_at"])

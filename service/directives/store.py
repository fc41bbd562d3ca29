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
"""

from __future__ import annotations

from uuid import UUID

import msgspec
import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from service.db import Database
from service.db.epochs import CacheEpochs
from service.directives.types import DirectiveOut

log = structlog.get_logger(__name__)

CACHE_TTL_S = 3600

# KEYS[1] envelope key; ARGV[1] envelope JSON; ARGV[2] its version; ARGV[3] ttl seconds; ARGV[4] its
# epoch. Newer is (epoch, version) compared in that order; an envelope without an epoch is the oldest.
_SET_IF_NEWER = """
local current = redis.call('GET', KEYS[1])
if current then
  local ok, decoded = pcall(cjson.decode, current)
  if ok and decoded['version'] then
    local epoch = tonumber(decoded['epoch'] or -1)
    local new_epoch = tonumber(ARGV[4])
    if epoch > new_epoch or (epoch == new_epoch and tonumber(decoded['version']) > tonumber(ARGV[2])) then
      return 0
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[3]))
return 1
"""


def cache_key(org_id: UUID, agent_id: str) -> str:
    return f"{{{org_id}}}:directive:{agent_id}"


class Envelope(DirectiveOut, kw_only=True):
    """What Redis holds: the directive and the org's cache epoch it was read or written under."""

    epoch: int = -1
    """-1: an envelope from before epochs existed (never current)."""

    def directive(self) -> DirectiveOut:
        return DirectiveOut(agent_id=self.agent_id, content=self.content, version=self.version,
                            updated_at=self.updated_at)


class DirectiveStore:
    def __init__(self, db: Database, redis: Redis, epochs: CacheEpochs | None = None) -> None:
        self.db = db
        self.redis = redis
        self.epochs = epochs if epochs is not None else CacheEpochs(db)
        self._set_if_newer = redis.register_script(_SET_IF_NEWER)

    async def _cache(self, org_id: UUID, directive: DirectiveOut, epoch: int | None) -> bool:
        """Store the envelope (unless ``epoch`` is None: the org's cache is not trusted now); False if
        Redis failed."""
        if epoch is None:
            return True
        envelope = Envelope(agent_id=directive.agent_id, content=directive.content, version=directive.version,
                            updated_at=directive.updated_at, epoch=epoch)
        try:
            await self._set_if_newer(keys=[cache_key(org_id, directive.agent_id)],
                                     args=[msgspec.json.encode(envelope), directive.version, CACHE_TTL_S, epoch])
        except RedisError as exc:
            log.warning("directive_cache_write_failed", error=str(exc))
            return False
        return True

    async def read_cached(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        """The cached envelope if it is of the org's current cache epoch (raises RedisError when Redis
        is unreachable)."""
        epoch = await self.epochs.current(org_id)
        if epoch is None:
            return None
        raw = await self.redis.get(cache_key(org_id, agent_id))
        if raw is None:
            return None
        envelope = msgspec.json.decode(raw, type=Envelope)
        return envelope.directive() if envelope.epoch == epoch else None

    async def load(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        epoch = await self.epochs.current(org_id)  # before the read: a bump after it makes the stamp old
        async with self.db.tenant(org_id, readonly=True) as tx:
            row = await tx.fetchrow("directives.get", org_id, agent_id)
        if row is None:
            return None
        directive = DirectiveOut(agent_id=row["agent_id"], content=row["content"], version=row["version"],
                                 updated_at=row["updated_at"])
        await self._cache(org_id, directive, epoch)
        return directive

    async def get(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        try:
            cached = await self.read_cached(org_id, agent_id)
        except (RedisError, msgspec.DecodeError) as exc:
            log.warning("directive_cache_read_failed", error=str(exc))
            cached = None
        return cached if cached is not None else await self.load(org_id, agent_id)

    async def put(self, org_id: UUID, agent_id: str, content: str) -> DirectiveOut:
        epoch = await self.epochs.current(org_id)
        async with self.db.tenant(org_id) as tx:
            row = await tx.fetchrow("directives.upsert", org_id, agent_id, content)
        assert row is not None
        directive = DirectiveOut(agent_id=row["agent_id"], content=row["content"], version=row["version"],
                                 updated_at=row["updated_at"])
        if not await self._cache(org_id, directive, epoch):
            await self.epochs.bump(org_id)  # the old envelope may still be in Redis: stop trusting it
        return directive

    async def delete(self, org_id: UUID, agent_id: str) -> bool:
        async with self.db.tenant(org_id) as tx:
            version = await tx.fetchval("directives.delete", org_id, agent_id)
        try:
            await self.redis.delete(cache_key(org_id, agent_id))
        except RedisError as exc:
            # The deleted directive's envelope may still be in Redis: stop trusting it.
            log.warning("directive_cache_delete_failed", error=str(exc))
            await self.epochs.bump(org_id)
        return version is not None



"""Directives: Postgres is the truth; Redis holds an envelope (content, version, updated_at) per agent.

Key ``{org_id}:directive:{agent_id}`` (the braces are a Redis Cluster hash tag: one org, one slot).
Reads go Redis first, Postgres on a miss (then fill the cache); writes commit to Postgres and then
refresh the envelope, so the next read sees the write. Envelopes are only ever replaced by a newer
version (a Lua compare-and-set), so two racing writers cannot leave an older directive cached.
Redis being down only costs latency: every path falls back to Postgres.
"""

from __future__ import annotations

from uuid import UUID

import msgspec
import structlog
from redis.exceptions import RedisError

from service.db import Database
from service.directives.types import DirectiveOut
from service.redisconn import RedisClient

log = structlog.get_logger(__name__)

CACHE_TTL_S = 3600

# KEYS[1] envelope key; ARGV[1] envelope JSON; ARGV[2] its version; ARGV[3] ttl seconds.
_SET_IF_NEWER = """
local current = redis.call('GET', KEYS[1])
if current then
  local ok, decoded = pcall(cjson.decode, current)
  if ok and decoded['version'] and tonumber(decoded['version']) > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[3]))
return 1
"""


def cache_key(org_id: UUID, agent_id: str) -> str:
    return f"{{{org_id}}}:directive:{agent_id}"


class DirectiveStore:
    def __init__(self, db: Database, redis: RedisClient) -> None:
        self.db = db
        self.redis = redis
        self._set_if_newer = redis.register_script(_SET_IF_NEWER)

    async def _cache(self, org_id: UUID, directive: DirectiveOut) -> None:
        try:
            await self._set_if_newer(keys=[cache_key(org_id, directive.agent_id)],
                                     args=[msgspec.json.encode(directive), directive.version, CACHE_TTL_S])
        except RedisError as exc:
            log.warning("directive_cache_write_failed", error=str(exc))

    async def read_cached(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        """The cached envelope only (raises RedisError when Redis is unreachable)."""
        raw = await self.redis.get(cache_key(org_id, agent_id))
        return None if raw is None else msgspec.json.decode(raw, type=DirectiveOut)

    async def load(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        async with self.db.tenant(org_id, readonly=True) as tx:
            row = await tx.fetchrow("directives.get", org_id, agent_id)
        if row is None:
            return None
        directive = DirectiveOut(agent_id=row["agent_id"], content=row["content"], version=row["version"],
                                 updated_at=row["updated_at"])
        await self._cache(org_id, directive)
        return directive

    async def get(self, org_id: UUID, agent_id: str) -> DirectiveOut | None:
        try:
            cached = await self.read_cached(org_id, agent_id)
        except (RedisError, msgspec.DecodeError) as exc:
            log.warning("directive_cache_read_failed", error=str(exc))
            cached = None
        return cached if cached is not None else await self.load(org_id, agent_id)

    async def put(self, org_id: UUID, agent_id: str, content: str) -> DirectiveOut:
        async with self.db.tenant(org_id) as tx:
            row = await tx.fetchrow("directives.upsert", org_id, agent_id, content)
        assert row is not None
        directive = DirectiveOut(agent_id=row["agent_id"], content=row["content"], version=row["version"],
                                 updated_at=row["updated_at"])
        await self._cache(org_id, directive)
        return directive

    async def delete(self, org_id: UUID, agent_id: str) -> bool:
        async with self.db.tenant(org_id) as tx:
            version = await tx.fetchval("directives.delete", org_id, agent_id)
        try:
            await self.redis.delete(cache_key(org_id, agent_id))
        except RedisError as exc:
            # A stale envelope would outlive the delete: make sure it expires soon.
            log.warning("directive_cache_delete_failed", error=str(exc))
        return version is not None



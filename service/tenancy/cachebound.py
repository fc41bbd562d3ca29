"""Per-org bounds on what an org's caches may hold in Redis, so no org can crowd out another's keys.

A bounded cache (hot sets, directive envelopes) keeps, per org, beside its values:

* ``{org_id}:<name>_lru`` — a sorted set of the cached members (agent ids) by when each was last stored;
* ``{org_id}:<name>_bytes`` — a hash of each member's value size, plus the running total under ``#total``
  (``#`` is not allowed in agent ids).

Storing a value (the scripts that use :data:`BOUND_LUA`) records its size and time, then deletes the
least recently stored members' values while the org's total is over its bound: an org flooding its
caches (e.g. hot sets for ever new agents) only pushes out its own entries. Everything for one org
carries the org's hash tag, so the script touches one Redis Cluster slot (it deletes keys it builds
from ``prefix``, which Redis Cluster allows within the slot of the declared keys).

The sizes count values only (keys and Redis's per-key overhead are a few hundred bytes more per
member); a value removed by other means (TTL, invalidation) is counted until it is stored again or
trimmed, so the bound errs on the side of holding less.
"""

from __future__ import annotations

from typing import Final
from uuid import UUID

from service.db.redisconn import org_prefix

TOTAL_FIELD: Final = "#total"

BOUND_LUA: Final = """
-- Record that member's value (bytes long, at prefix..member) was just stored in the org's bounded
-- cache (lru: zset member -> last store time; sizes: hash member -> bytes, '#total' -> sum), then
-- delete the least recently stored values while the total exceeds max_bytes. Returns the total.
local function bound(lru, sizes, member, bytes, max_bytes, prefix)
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  local old = tonumber(redis.call('HGET', sizes, member) or '0')
  local total = tonumber(redis.call('HGET', sizes, '#total') or '0') - old + bytes
  redis.call('HSET', sizes, member, bytes)
  redis.call('ZADD', lru, now, member)
  while total > max_bytes do
    local oldest = redis.call('ZRANGE', lru, 0, 0)[1]
    if oldest == nil or oldest == member then break end
    redis.call('ZREM', lru, oldest)
    total = total - tonumber(redis.call('HGET', sizes, oldest) or '0')
    redis.call('HDEL', sizes, oldest)
    redis.call('DEL', prefix .. oldest)
  end
  redis.call('HSET', sizes, '#total', math.max(0, total))
  return total
end
"""

# KEYS[1] value, KEYS[2] lru, KEYS[3] sizes; ARGV[1] member.
UNTRACK: Final = """
local old = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
redis.call('DEL', KEYS[1])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 or old > 0 then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HINCRBY', KEYS[3], '#total', -old)
end
return old
"""
"""Delete a bounded cache's value and its bookkeeping (the write path's invalidation)."""


def lru_key(org_id: UUID, name: str) -> str:
    return f"{org_prefix(org_id)}{name}_lru"


def sizes_key(org_id: UUID, name: str) -> str:
    return f"{org_prefix(org_id)}{name}_bytes"

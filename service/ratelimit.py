"""Per-org rate limits: one token bucket per org in Redis, refilled continuously.

Key ``{org_id}:ratelimit`` (the braces are the Redis Cluster hash tag: the bucket lives in its org's
slot), a hash of the tokens left and the time they were counted. One Lua script reads, refills,
takes and writes back atomically, with Redis's own clock (``TIME``), so every worker and every
instance behind a load balancer shares one bucket per org and no client clock matters. The key
expires once a bucket would have refilled anyway, so idle orgs cost no memory (and the key has a
TTL, which ``volatile-lru`` eviction may take: an evicted bucket is simply full again).

Each authenticated request takes 1 token, a heavy one (:data:`HEAVY_ROUTES`) ``heavy_cost``; an
empty bucket answers 429 ``rate_limited`` with ``Retry-After`` (whole seconds, at least 1) until
enough tokens are back. Each org may also have at most ``max_in_flight`` requests in progress per
process (429 at once beyond): request rates do not bound what expensive requests hold of the
shared lanes. Redis failing or slower than ``timeout_ms`` lets the request through (fail open,
counted in ``pgcontext_rate_limit_fail_open_total``) and the limiter is skipped for ``retry_s``
so a dead Redis costs nothing per request.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Final
from uuid import UUID

import structlog
from litestar.types import ASGIApp, Receive, Scope, Send
from prometheus_client import Counter
from redis.exceptions import RedisError

from service.errors import TooManyRequests
from service.redisconn import RedisClient
from service.settings import RateLimitSettings

log = structlog.get_logger(__name__)

HEAVY_ROUTES: Final[frozenset[tuple[str, str]]] = frozenset({
    ("POST", "/v1/context/assemble"),
    ("POST", "/v1/memories/search"),
    ("POST", "/v1/memories"),
    ("PATCH", "/v1/memories/{memory_id}"),
    ("POST", "/v1/documents"),
    ("GET", "/v1/export"),
})
"""(method, route template) of requests that embed, search or stream a lot: they cost ``heavy_cost``."""

RATE_LIMITED = Counter("pgcontext_rate_limited_total", "Requests refused with 429 by the per-org rate limit")
FAIL_OPEN = Counter("pgcontext_rate_limit_fail_open_total",
                    "Requests let through unchecked because Redis failed or was slow (or failed recently)")

# KEYS[1] bucket; ARGV[1] tokens per second, ARGV[2] bucket size, ARGV[3] cost.
# Returns {allowed (0/1), milliseconds until the cost is available (0 when allowed)}.
_TAKE = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ms')
local tokens = tonumber(state[1])
local last = tonumber(state[2])
if tokens == nil or last == nil then
  tokens = burst
else
  tokens = math.min(burst, tokens + math.max(0, now - last) * rate / 1000)
end
local allowed = 0
local wait_ms = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait_ms = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ms', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {allowed, wait_ms}
"""


IN_FLIGHT_REFUSED = Counter("pgcontext_rate_limit_in_flight_refused_total",
                            "Requests refused with 429 because their org had max_in_flight requests in progress")
SLOT_STATE = "org_slot"
"""``scope["state"]`` key holding the org whose in-flight slot the request took (released by the middleware)."""


def bucket_key(org_id: UUID) -> str:
    return f"{{{org_id}}}:ratelimit"


class RateLimiter:
    def __init__(self, redis: RedisClient, settings: RateLimitSettings) -> None:
        self.settings = settings
        self._take = redis.register_script(_TAKE)
        self._skip_until = 0.0
        self._in_flight: dict[UUID, int] = {}

    @property
    def enabled(self) -> bool:
        return self.settings.rps > 0

    def cost(self, method: str, route: str) -> int:
        # A cost above the bucket could never be paid: cap it so a small burst still lets heavy calls through.
        heavy = (method, route) in HEAVY_ROUTES
        return min(self.settings.heavy_cost if heavy else 1, self.settings.burst)

    def enter(self, org_id: UUID) -> None:
        """Take one of the org's in-flight slots (this process), or raise :class:`TooManyRequests`.
        :func:`in_flight_middleware` gives it back when the response is done, whatever happened."""
        cap = self.settings.max_in_flight
        if cap <= 0:
            return
        held = self._in_flight.get(org_id, 0)
        if held >= cap:
            IN_FLIGHT_REFUSED.inc()
            raise TooManyRequests(f"this org already has {held} requests in progress (at most {cap} at once); "
                                  "retry in 1 s", retry_after_s=1,
                                  details={"retry_after_s": 1, "in_flight": held, "max_in_flight": cap})
        self._in_flight[org_id] = held + 1

    def leave(self, org_id: UUID) -> None:
        held = self._in_flight.get(org_id, 0) - 1
        if held > 0:
            self._in_flight[org_id] = held
        else:
            self._in_flight.pop(org_id, None)

    async def check(self, org_id: UUID, cost: int) -> None:
        """Take ``cost`` tokens from the org's bucket or raise :class:`TooManyRequests`."""
        s = self.settings
        if not self.enabled:
            return
        if time.monotonic() < self._skip_until:
            FAIL_OPEN.inc()
            return
        try:
            async with asyncio.timeout(s.timeout_ms / 1000):
                allowed, wait_ms = await self._take(keys=[bucket_key(org_id)], args=[s.rps, s.burst, cost])
        except (RedisError, TimeoutError, OSError) as exc:
            self._skip_until = time.monotonic() + s.retry_s
            FAIL_OPEN.inc()
            log.warning("rate_limit_unavailable", error=str(exc) or type(exc).__name__, retry_s=s.retry_s)
            return
        if not int(allowed):
            RATE_LIMITED.inc()
            retry_after = max(1, math.ceil(int(wait_ms) / 1000))
            raise TooManyRequests(
                f"this org is over its rate limit ({s.rps:g} requests/s, bursts of {s.burst}); "
                f"retry in {retry_after} s", retry_after_s=retry_after,
                details={"retry_after_s": retry_after, "rate_per_s": s.rps, "burst": s.burst, "cost": cost})


def in_flight_middleware(app: ASGIApp) -> ASGIApp:
    """Gives back the org's in-flight slot (:meth:`RateLimiter.enter`, taken after authentication)
    once the whole request is done: response sent, stream ended, error or client gone."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        finally:
            org_id = scope.get("state", {}).pop(SLOT_STATE, None)
            if org_id is not None:
                limiter = getattr(scope["app"].state, "services", None)
                if limiter is not None and limiter.rate_limiter is not None:
                    limiter.rate_limiter.leave(org_id)

    return middleware

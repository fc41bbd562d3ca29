"""Per-org rate limits: one token bucket per org in Redis, refilled continuously.

Key ``{org_id}:ratelimit`` (the braces are the Redis Cluster hash tag: the bucket lives in its org's
slot), a hash of the tokens left and the time they were counted. One Lua script reads, refills,
takes and writes back atomically, with Redis's own clock (``TIME``), so every worker and every
instance behind a load balancer shares one bucket per org and no client clock matters. The key
expires once a bucket would have refilled anyway, so idle orgs cost no memory (and the key has a
TTL, which ``volatile-lru`` eviction may take: an evicted bucket is simply full again).

Each authenticated request takes a price that follows its work (:mod:`service.tenancy.ratecost`: the
route, the body's size, the query's length and whether it is embedded; a hot-set miss pays after
the read); an empty bucket answers 429 ``rate_limited`` with ``Retry-After`` (whole seconds, at
least 1) until enough tokens are back. Each org may also have at most ``max_in_flight`` requests in
progress per process (429 at once beyond): request rates do not bound what expensive requests hold
of the shared lanes. Redis failing or slower than ``timeout_ms`` does not refuse anything Redis would
have allowed (fail open, counted in ``pgcontext_rate_limit_fail_open_total``): for ``retry_s`` the
limiter does not ask Redis (a dead Redis costs nothing per request) and each process counts the
org's bucket itself from what Redis last reported, so an org flooding while Redis is slow, or while
the event loop lags past ``timeout_ms`` under load, is still held to its rate in every process.

**Refusals cost next to nothing.** A flooding org's requests are mostly refusals, and a refusal
through the whole stack (dependency injection, the Redis script, the error handler) cost ~1.5 ms of
CPU, more than a cached hot-set read. So each process remembers every bucket as Redis last reported
it: tokens only come back at ``rps``, and other processes only take them, so that memory plus the
refill since is an upper bound on the real bucket. A request whose price is above it is refused
without asking Redis; and :func:`service.http.throttle.rate_limit_edge` does that in a middleware,
before dependencies, the body and the error handler run (an API key resolved in the last seconds,
the route's price before the body), with a header scan, a hash and a dict lookup (~0.4 ms of CPU per
429, most of it the HTTP server's). Such a refusal is always one Redis would have given too.
"""

from __future__ import annotations

import asyncio
import math
import time
from uuid import UUID

import structlog
from litestar.types import Receive, ReceiveMessage
from prometheus_client import Counter
from redis.exceptions import RedisError

from service.db.redisconn import RedisClient, org_prefix
from service.errors import TooManyRequests
from service.settings import RateLimitSettings
from service.tenancy.ratecost import base_cost

log = structlog.get_logger(__name__)

RATE_LIMITED = Counter("pgcontext_rate_limited_total", "Requests refused with 429 by the per-org rate limit")
FAIL_OPEN = Counter("pgcontext_rate_limit_fail_open_total",
                    "Requests let through unchecked because Redis failed or was slow (or failed recently)")

# KEYS[1] bucket; ARGV[1] tokens per second, ARGV[2] bucket size, ARGV[3] cost, ARGV[4] 1: take it
# even if short (a price known only after the work; the bucket may go down to -size).
# Returns {allowed (0/1), milliseconds until the cost is available (0 when allowed), tokens left x 1000}.
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
elseif ARGV[4] == '1' then
  tokens = math.max(-burst, tokens - cost)
  allowed = 1
else
  wait_ms = math.ceil((cost - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ms', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - math.min(tokens, 0)) * 1000 / rate) + 1000)
return {allowed, wait_ms, math.floor(tokens * 1000)}
"""


IN_FLIGHT_REFUSED = Counter("pgcontext_rate_limit_in_flight_refused_total",
                            "Requests refused with 429 because their org had max_in_flight requests in progress")
SLOT_STATE = "org_slot"
"""``scope["state"]`` key holding the org whose in-flight slot the request took (released by the middleware)."""


def bucket_key(org_id: UUID) -> str:
    return f"{org_prefix(org_id)}ratelimit"


class RateLimiter:
    def __init__(self, redis: RedisClient, settings: RateLimitSettings) -> None:
        self.settings = settings
        self._take = redis.register_script(_TAKE)
        self._skip_until = 0.0
        self._in_flight: dict[UUID, int] = {}
        self._known: dict[UUID, tuple[float, float]] = {}
        """Per org, (tokens left, monotonic time) as Redis last reported them: with the refill since,
        an upper bound on the bucket (see the module docstring)."""

    @property
    def enabled(self) -> bool:
        return self.settings.rps > 0

    def cost(self, method: str, route: str, body_bytes: int = 0) -> int:
        """The price known before the body is read (:func:`service.tenancy.ratecost.base_cost`)."""
        return base_cost(self.settings, method, route, body_bytes)

    def metered(self, receive: Receive, org_id: UUID, method: str, route: str) -> Receive:
        """``receive`` that prices the body as it arrives: each time the bytes read so far reach another
        ``body_bytes_per_token``, the 429 the org's bucket would answer for the price so far is raised
        (:meth:`refusal_if_short`), so a body past what the org can pay is refused before the rest of
        it is read, whether it came with a ``Content-Length`` or chunked."""
        step = self.settings.body_bytes_per_token
        read = 0

        async def metered_receive() -> ReceiveMessage:
            nonlocal read
            message = await receive()
            if message["type"] == "http.request" and step > 0:
                before, read = read, read + len(message.get("body", b""))
                if read // step > before // step:
                    refusal = self.refusal_if_short(org_id, self.cost(method, route, read))
                    if refusal is not None:
                        raise refusal
            return message

        return metered_receive

    def at_most(self, org_id: UUID) -> float:
        """An upper bound on the tokens in the org's bucket right now (``burst`` if nothing is known)."""
        s = self.settings
        known = self._known.get(org_id)
        if known is None:
            return float(s.burst)
        tokens, at = known
        return min(float(s.burst), tokens + (time.monotonic() - at) * s.rps)

    def refusal_if_short(self, org_id: UUID, cost: int) -> TooManyRequests | None:
        """The 429 Redis would answer for ``cost``, known without asking it; None if it may be paid."""
        if not self.enabled:
            return None
        tokens = self.at_most(org_id)
        if tokens >= min(cost, self.settings.burst):
            return None
        return self._refusal(math.ceil((cost - tokens) * 1000 / self.settings.rps), cost)

    def in_flight_refusal(self, org_id: UUID) -> TooManyRequests | None:
        """The 429 for an org holding all of its in-flight slots; None if it may take one."""
        cap = self.settings.max_in_flight
        held = self._in_flight.get(org_id, 0)
        if cap <= 0 or held < cap:
            return None
        IN_FLIGHT_REFUSED.inc()
        return TooManyRequests(f"this org already has {held} requests in progress (at most {cap} at once); "
                               "retry in 1 s", retry_after_s=1,
                               details={"retry_after_s": 1, "in_flight": held, "max_in_flight": cap})

    def enter(self, org_id: UUID) -> None:
        """Take one of the org's in-flight slots (this process), or raise :class:`TooManyRequests`.
        :func:`service.http.throttle.in_flight_middleware` gives it back when the response is done,
        whatever happened."""
        if self.settings.max_in_flight <= 0:
            return
        refusal = self.in_flight_refusal(org_id)
        if refusal is not None:
            raise refusal
        self._in_flight[org_id] = self._in_flight.get(org_id, 0) + 1

    def leave(self, org_id: UUID) -> None:
        held = self._in_flight.get(org_id, 0) - 1
        if held > 0:
            self._in_flight[org_id] = held
        else:
            self._in_flight.pop(org_id, None)

    async def check(self, org_id: UUID, cost: int) -> None:
        """Take ``cost`` tokens from the org's bucket or raise :class:`TooManyRequests`."""
        refusal = self.refusal_if_short(org_id, cost)
        if refusal is not None:
            raise refusal
        allowed, wait_ms = await self._ask(org_id, cost, force=False)
        if not allowed:
            raise self._refusal(wait_ms, cost)

    async def charge(self, org_id: UUID, cost: int) -> None:
        """Take ``cost`` tokens for work already done, even if that leaves the bucket below zero."""
        if cost > 0:
            await self._ask(org_id, cost, force=True)

    async def _ask(self, org_id: UUID, cost: int, *, force: bool) -> tuple[bool, int]:
        """(allowed, ms until ``cost`` is available) from Redis, or from this process's own account
        of the bucket while Redis fails or is skipped (:meth:`_take_locally`)."""
        s = self.settings
        if not self.enabled:
            return True, 0
        cost = min(cost, s.burst)
        if time.monotonic() < self._skip_until:
            FAIL_OPEN.inc()
            return self._take_locally(org_id, cost, force=force)
        asked = time.monotonic()  # before Redis's clock reads the bucket: the bound stays an upper one
        try:
            async with asyncio.timeout(s.timeout_ms / 1000):
                allowed, wait_ms, milli_tokens = await self._take(keys=[bucket_key(org_id)],
                                                                   args=[s.rps, s.burst, cost, int(force)])
        except (RedisError, TimeoutError, OSError) as exc:
            self._skip_until = time.monotonic() + s.retry_s
            FAIL_OPEN.inc()
            log.warning("rate_limit_unavailable", error=str(exc) or type(exc).__name__, retry_s=s.retry_s)
            return self._take_locally(org_id, cost, force=force)
        self._remember(org_id, int(milli_tokens) / 1000, asked)
        return bool(int(allowed)), int(wait_ms)

    def _remember(self, org_id: UUID, tokens: float, at: float) -> None:
        if len(self._known) >= 10_000 and org_id not in self._known:
            self._known.clear()  # bounded: forgetting only makes the next check ask Redis
        self._known[org_id] = (tokens, at)

    def _take_locally(self, org_id: UUID, cost: int, *, force: bool) -> tuple[bool, int]:
        """Redis is unavailable: take ``cost`` from this process's account of the bucket (Redis's last
        report plus the refill since, full if none). The other processes' takes are missing from it,
        so it never refuses what Redis would have allowed: an outage does not refuse requests, and
        an org flooding during it is still held to its rate in each process."""
        s = self.settings
        tokens = self.at_most(org_id)
        if tokens < cost and not force:
            return False, math.ceil((cost - tokens) * 1000 / s.rps)
        self._remember(org_id, max(-float(s.burst), tokens - cost), time.monotonic())
        return True, 0

    def _refusal(self, wait_ms: int, cost: int) -> TooManyRequests:
        s = self.settings
        RATE_LIMITED.inc()
        retry_after = max(1, math.ceil(wait_ms / 1000))
        return TooManyRequests(
            f"this org is over its rate limit ({s.rps:g} tokens/s, bursts of {s.burst}; this request costs "
            f"{cost}); retry in {retry_after} s", retry_after_s=retry_after,
            details={"retry_after_s": retry_after, "rate_per_s": s.rps, "burst": s.burst, "cost": cost})

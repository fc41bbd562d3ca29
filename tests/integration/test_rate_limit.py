"""Per-org rate limits: a token bucket per org in Redis, 429 + Retry-After past it, other
orgs untouched, refilled over time, and a dead or hung Redis lets requests through quickly."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import httpx
import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.app import create_app
from service.assembly.hot import ORG_WIDE, hot_key
from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.errors import TooManyRequests
from service.http.deps import strip_param_types
from service.runtime import Endpoints
from service.settings import RateLimitSettings, Settings
from service.tenancy.ratecost import HEAVY_ROUTES
from service.tenancy.ratelimit import FAIL_OPEN, RateLimiter, bucket_key
from tests.conftest import Tenant
from tests.integration.test_assembly_faults import served

pytestmark = pytest.mark.serial


@contextlib.asynccontextmanager
async def limited_client(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                         **limits: Any) -> AsyncIterator[AsyncTestClient[Any]]:
    # A generous Redis timeout: on a loaded test machine 20 ms can pass and the limiter would fail open
    # (what test_redis_down_or_hung_fails_open_quickly pins down).
    custom = dataclasses.replace(settings, rate_limit=RateLimitSettings(**{"timeout_ms": 1000, **limits}))
    async with AsyncTestClient(app=create_app(custom, endpoints, embedder=embedder)) as client:
        yield client


async def _get(client: AsyncTestClient[Any], tenant: Tenant) -> Any:
    return await client.get("/v1/memories", headers=tenant.headers)


async def test_over_the_limit_answers_429_with_retry_after(settings: Settings, endpoints: Endpoints,
                                                           embedder: Embedder, tenant: Tenant) -> None:
    async with limited_client(settings, endpoints, embedder, rps=0.5, burst=3) as client:
        for _ in range(3):
            assert (await _get(client, tenant)).status_code == 200
        r = await _get(client, tenant)
        assert r.status_code == 429, r.text
        error = r.json()["error"]
        assert error["code"] == "rate_limited" and error["request_id"] and "rate limit" in error["message"]
        retry_after = int(r.headers["retry-after"])
        assert retry_after == 2 and error["details"]["retry_after_s"] == retry_after  # one token at 0.5/s


async def test_one_orgs_flood_does_not_limit_another(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                     tenant: Tenant, other_tenant: Tenant) -> None:
    # 0.2 tokens/s: the 20 requests may take up to 5 s (a loaded machine) before one token is back
    async with limited_client(settings, endpoints, embedder, rps=0.2, burst=5) as client:
        statuses = [(await _get(client, tenant)).status_code for _ in range(20)]
        assert statuses[:5] == [200] * 5 and set(statuses[5:]) == {429}
        assert [(await _get(client, other_tenant)).status_code for _ in range(5)] == [200] * 5


async def test_bucket_refills_over_time(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                        tenant: Tenant) -> None:
    async with limited_client(settings, endpoints, embedder, rps=2, burst=2) as client:
        while (await _get(client, tenant)).status_code == 200:
            pass
        await asyncio.sleep(0.6)  # 2 tokens/s: one back after 0.5 s (the next one 0.4 s later: a loaded machine)
        assert (await _get(client, tenant)).status_code == 200
        assert (await _get(client, tenant)).status_code == 429


async def test_heavy_requests_cost_more(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                        tenant: Tenant) -> None:
    async with limited_client(settings, endpoints, embedder, rps=0.1, burst=5, heavy_cost=4) as client:
        r = await client.post("/v1/memories/search", json={"query": "tea", "strategy": "lexical"},
                              headers=tenant.headers)
        assert r.status_code == 200, r.text
        assert (await _get(client, tenant)).status_code == 200  # 4 + 1 = the whole bucket
        r = await client.post("/v1/memories/search", json={"query": "tea"}, headers=tenant.headers)
        assert r.status_code == 429 and r.json()["error"]["details"]["cost"] == 4
        assert int(r.headers["retry-after"]) >= 1


async def test_bucket_key_is_hash_tagged_and_expires(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                     redis_url: str, tenant: Tenant) -> None:
    async with limited_client(settings, endpoints, embedder, rps=10, burst=20) as client:
        assert (await _get(client, tenant)).status_code == 200
    redis = Redis.from_url(redis_url)
    try:
        key = bucket_key(tenant.org_id)
        assert key.startswith(f"{{{tenant.org_id}}}:")
        assert 0 < await redis.pttl(key) <= 20 / 10 * 1000 + 1000  # gone once it would be full again
    finally:
        await redis.aclose()


async def test_unauthenticated_and_health_requests_are_not_counted(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with limited_client(settings, endpoints, embedder, rps=0.1, burst=1) as client:
        for _ in range(3):
            assert (await client.get("/healthz")).status_code == 200
            assert (await client.get("/v1/memories")).status_code == 401
        assert (await _get(client, tenant)).status_code == 200


async def _blackhole() -> tuple[asyncio.Server, int]:
    """A TCP server that accepts connections and never answers: a hung Redis."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up
        writer.close()

    port = free_port()
    return await asyncio.start_server(swallow, "127.0.0.1", port), port


@pytest.mark.parametrize("fault", ["refused", "hung"])
async def test_redis_down_or_hung_fails_open_quickly(fault: str) -> None:
    """A dead or hung Redis refuses nothing the limit would allow and costs one short timeout, not one
    per request; meanwhile the process still holds each org to its rate from its own account."""
    if fault == "hung":
        server, port = await _blackhole()
    else:
        server, port = None, free_port()  # nothing listens there
    redis = Redis(host="127.0.0.1", port=port, socket_timeout=5, socket_connect_timeout=5)
    limiter = RateLimiter(redis, RateLimitSettings(rps=1, burst=100, timeout_ms=20, retry_s=30))
    try:
        before = FAIL_OPEN._value.get()
        started = time.perf_counter()
        for _ in range(50):
            await limiter.check(uuid4(), 1)  # fresh orgs, full buckets: nothing to refuse
        elapsed = time.perf_counter() - started
        assert FAIL_OPEN._value.get() - before == 50
        assert elapsed < 0.5, elapsed  # one short timeout, then skipped: no per-request wait
        flooding = uuid4()
        for _ in range(100):
            await limiter.check(flooding, 1)
        with pytest.raises(TooManyRequests) as refused:
            await limiter.check(flooding, 1)
        assert refused.value.retry_after_s == 1
    finally:
        await redis.aclose()
        if server is not None:
            server.close()
            await server.wait_closed()


async def test_limit_applies_across_app_instances(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                  tenant: Tenant) -> None:
    """Two service instances (two apps, as behind a load balancer) share one bucket per org."""
    async with limited_client(settings, endpoints, embedder, rps=0.1, burst=4) as one, \
            limited_client(settings, endpoints, embedder, rps=0.1, burst=4) as two:
        statuses = [(await _get(client, tenant)).status_code for client in (one, two, one, two, one, two)]
        assert statuses == [200, 200, 200, 200, 429, 429]


def test_too_many_requests_is_the_one_error_shape() -> None:
    exc = TooManyRequests("slow down", retry_after_s=3)
    assert (exc.status, exc.code, exc.retry_after_s) == (429, "rate_limited", 3)


def test_every_heavy_route_exists(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> None:
    """A renamed route must not silently become light."""
    app = create_app(settings, endpoints, embedder=embedder)
    routes = {(method, strip_param_types(route.path)) for route in app.routes
              for method in getattr(route, "methods", ())}
    assert routes >= HEAVY_ROUTES, HEAVY_ROUTES - routes


async def test_in_flight_cap_per_org(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                     tenant: Tenant, other_tenant: Tenant) -> None:
    """Org B's slow requests hold at most ``max_in_flight`` at once; more answer 429 at once, org A
    is not affected, and every slot comes back (after errors too)."""
    custom = dataclasses.replace(
        settings, rate_limit=RateLimitSettings(rps=100_000, burst=100_000, max_in_flight=2, timeout_ms=1000),
        retrieval=dataclasses.replace(settings.retrieval, branch_delay_ms=400))
    with served(create_app(custom, endpoints, embedder=embedder)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            slow = [asyncio.create_task(http.post("/v1/memories/search", headers=other_tenant.headers,
                                                  json={"query": "tea", "strategy": "lexical"}))
                    for _ in range(6)]
            await asyncio.sleep(0.15)  # all six sent; two are inside, sleeping in Postgres
            a = await http.get("/v1/memories", headers=tenant.headers)
            answers = await asyncio.gather(*slow)
            statuses = sorted(r.status_code for r in answers)
            assert a.status_code == 200
            assert statuses == [200, 200, 429, 429, 429, 429], statuses
            refused = next(r for r in answers if r.status_code == 429)
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["details"]["max_in_flight"] == 2
            for _ in range(5):  # errors give their slot back too
                r = await http.get(f"/v1/memories/{uuid4()}", headers=other_tenant.headers)
                assert r.status_code == 404
            r = await http.post("/v1/memories/search", headers=other_tenant.headers,
                                json={"query": "tea", "strategy": "lexical"})
            assert r.status_code == 200, r.text


async def _tokens_left(redis_url: str, tenant: Tenant) -> float:
    redis = Redis.from_url(redis_url)
    try:
        return float(await redis.hget(bucket_key(tenant.org_id), "tokens") or "nan")
    finally:
        await redis.aclose()


async def _stored(redis_url: str, key: str, within_s: float = 5.0) -> None:
    redis = Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + within_s
        while not await redis.exists(key):
            assert time.monotonic() < deadline, f"{key} was never stored"
            await asyncio.sleep(0.01)
    finally:
        await redis.aclose()


async def _drop(client: AsyncTestClient[Any], redis_url: str, tenant: Tenant, method: str, path: str,
                body: dict[str, Any] | None = None) -> float:
    """Tokens the request took from the org's bucket in Redis (the bucket refills 0.001/s: nothing)."""
    before = await _tokens_left(redis_url, tenant)
    r = await client.request(method, path, json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return round(before - await _tokens_left(redis_url, tenant))


async def test_prices_follow_the_work(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                      redis_url: str, tenant: Tenant) -> None:
    """A long query takes more tokens than a short one, an embedded one more than a lexical one (up to
    the model's cut), and a hot-set read from Postgres more than one from Redis: the bucket in Redis
    shows it."""
    long_query = ("tea cultivation in the highlands " * 40)[:1200]
    async with limited_client(settings, endpoints, embedder, rps=0.001, burst=1000, heavy_cost=4,
                              embed_chars_per_token=40, embed_max_chars=1000, text_chars_per_token=400,
                              hot_miss_cost=1) as client:
        assert (await _get(client, tenant)).status_code == 200  # the bucket exists: 999 left
        search = "/v1/memories/search"
        assert await _drop(client, redis_url, tenant, "POST", search, {"query": "tea", "strategy": "semantic"}) == 4
        assert await _drop(client, redis_url, tenant, "POST", search,
                           {"query": long_query, "strategy": "semantic"}) == 4 + 1000 // 40 + 1200 // 400
        assert await _drop(client, redis_url, tenant, "POST", search,
                           {"query": long_query, "strategy": "lexical"}) == 4 + 1200 // 400
        assemble = {"agent_id": "agent-x", "query": long_query, "model": "gpt-4o", "max_context_tokens": 2000}
        assert await _drop(client, redis_url, tenant, "POST", "/v1/context/assemble",
                           assemble) == 4 + 1000 // 40 + 1200 // 400
        # an agent with no memories of its own: the org-wide set, which agent-x's assembly cached (its
        # fill outlives a hot branch that timed out on a slow machine: wait for the set to be stored)
        await _stored(redis_url, hot_key(tenant.org_id, ORG_WIDE))
        assert await _drop(client, redis_url, tenant, "GET", "/v1/memories/hot?agent_id=nobody") == 1
        r = await client.post("/v1/memories", json={"text": "tea grows on hills", "agent_id": "hills"},
                              headers=tenant.headers)
        assert r.status_code == 201, r.text
        assert await _drop(client, redis_url, tenant, "GET", "/v1/memories/hot?agent_id=hills") == 2  # filled
        assert await _drop(client, redis_url, tenant, "GET", "/v1/memories/hot?agent_id=hills") == 1  # cached


async def test_a_long_query_past_the_bucket_is_refused_with_retry_after(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, other_tenant: Tenant) -> None:
    """Short searches fit where a long one does not: it answers 429 in the error shape with the price
    and Retry-After (tokens missing / rate); asked again at once it is refused the same way, now
    without asking Redis (the process knows the bucket cannot have refilled); other orgs are untouched."""
    long_query = "x" * 4000
    async with limited_client(settings, endpoints, embedder, rps=1, burst=40) as client:
        for _ in range(2):
            r = await client.post("/v1/memories/search", json={"query": "tea", "strategy": "semantic"},
                                  headers=tenant.headers)
            assert r.status_code == 200, r.text  # 4 each: 32 left
        refusals = []
        for _ in range(2):
            r = await client.post("/v1/memories/search", json={"query": long_query, "strategy": "semantic"},
                                  headers=tenant.headers)
            assert r.status_code == 429, r.text
            refusals.append(r)
        for r in refusals:
            error = r.json()["error"]
            assert error["code"] == "rate_limited" and error["request_id"] == r.headers["x-request-id"]
            assert error["details"]["cost"] == 4 + 25 + 10  # heavy + embedded up to the cut + every 400 chars
            retry_after = int(r.headers["retry-after"])
            assert retry_after == error["details"]["retry_after_s"] and 1 <= retry_after <= 9  # ~8 tokens at 1/s
        r = await client.post("/v1/memories/search", json={"query": long_query, "strategy": "semantic"},
                              headers=other_tenant.headers)
        assert r.status_code == 200, r.text


async def test_a_refused_org_is_answered_at_the_edge(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                     redis_url: str, tenant: Tenant) -> None:
    """Once an org is known to be short, its next requests are refused without asking Redis (the
    bucket in Redis is not touched: its clock field stays), in the same error shape."""
    async with limited_client(settings, endpoints, embedder, rps=0.01, burst=1) as client:
        assert (await _get(client, tenant)).status_code == 200
        assert (await _get(client, tenant)).status_code == 429  # Redis says so; the process remembers
        redis = Redis.from_url(redis_url)
        try:
            asked = await redis.hget(bucket_key(tenant.org_id), "ms")
            for path in ("/v1/memories", "/v1/memories/hot?agent_id=a"):
                r = await client.get(path, headers=tenant.headers)
                assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
                assert int(r.headers["retry-after"]) >= 1 and r.headers["x-request-id"]
            assert await redis.hget(bucket_key(tenant.org_id), "ms") == asked
        finally:
            await redis.aclose()
        r = await client.get("/v1/memories", headers={"Authorization": "Bearer pgc_unknown"})
        assert r.status_code == 401  # an unknown key is never refused at the edge

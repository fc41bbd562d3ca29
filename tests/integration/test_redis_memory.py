"""Redis memory: every org's hot sets and directive envelopes are bounded per org, every
key but a directive envelope (and its bookkeeping) has a TTL, and the embedded Redis evicts only
keys with a TTL, so no org's flood pushes another org's directives out."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.assembly.hot import HOT_CACHE, HotSetStore, RedisCircuit, hot_key
from service.db import Database, create_pool
from service.directives import DirectiveStore
from service.directives.store import DIRECTIVE_CACHE, cache_key
from service.embedded.redis_server import EmbeddedRedis
from service.runtime import Endpoints
from service.settings import Settings
from service.tenancy.cachebound import TOTAL_FIELD, sizes_key
from tests.conftest import Tenant

PERMANENT = (":directive:", ":directive_lru", ":directive_bytes")
"""Key infixes that are stored without a TTL on purpose (see service.directives.store)."""


@contextlib.asynccontextmanager
async def stores(endpoints: Endpoints, redis_url: str, settings: Settings,
                 org_bytes: int) -> AsyncIterator[tuple[HotSetStore, DirectiveStore, Redis]]:
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=2)
    redis = Redis.from_url(redis_url)
    db = Database(pool, statement_timeout_ms=5000)
    try:
        yield (HotSetStore(db, redis, settings.assembly, RedisCircuit(1.0), org_bytes=org_bytes),
               DirectiveStore(db, redis, org_bytes=org_bytes), redis)
    finally:
        await redis.aclose()
        await pool.close()


async def _remember(client: AsyncTestClient[Any], tenant: Tenant, agents: Sequence[str | None], text: str) -> None:
    r = await client.post("/v1/memories", json={"memories": [{"text": f"{text} for {a}", "agent_id": a}
                                                             for a in agents]}, headers=tenant.headers)
    assert r.status_code == 201, r.text


async def _org_keys(redis: Redis, org_id: UUID) -> list[str]:
    return [k.decode() async for k in redis.scan_iter(match=f"{{{org_id}}}:*", count=1000)]


async def test_every_key_but_directive_envelopes_expires(client: AsyncTestClient[Any], redis_url: str,
                                                         tenant: Tenant) -> None:
    await _remember(client, tenant, ["keeper"], "likes tea")
    assert (await client.put("/v1/agents/keeper/directive", json={"content": "Be kind."},
                             headers=tenant.headers)).status_code == 200
    r = await client.get("/v1/memories/hot", params={"agent_id": "keeper"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    r = await client.post("/v1/context/assemble", json={"agent_id": "keeper", "query": "tea", "model": "gpt-4o",
                                                        "max_context_tokens": 2000}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    await _remember(client, tenant, [None, "keeper"], "closes at six")  # bumps the counters
    redis = Redis.from_url(redis_url)
    try:
        keys = await _org_keys(redis, tenant.org_id)
        ttls = {k: await redis.ttl(k) for k in keys}
    finally:
        await redis.aclose()
    assert any(":directive:" in k for k in keys) and any(":hot_ver:" in k for k in keys)
    assert any(k.endswith(":ratelimit") for k in keys)
    for k, ttl in ttls.items():
        if any(p in k for p in PERMANENT):
            assert ttl == -1, k
        else:
            assert ttl > 0, (k, ttl)


async def test_one_orgs_hot_sets_stay_under_its_bound(client: AsyncTestClient[Any], endpoints: Endpoints,
                                                      redis_url: str, settings: Settings, tenant: Tenant,
                                                      other_tenant: Tenant) -> None:
    agents = [f"flood-{i}" for i in range(12)]
    await _remember(client, other_tenant, agents, "a note of some length " * 20)
    await _remember(client, tenant, ["quiet"], "the quiet agent's note")
    async with stores(endpoints, redis_url, settings, org_bytes=12_000) as (hot, _, redis):
        await hot.get(tenant.org_id, "quiet")
        for agent in agents:  # each set is ~2,100 bytes (text + embedding): the bound holds five
            await hot.get(other_tenant.org_id, agent)
        cached = [a for a in agents if await redis.exists(hot_key(other_tenant.org_id, a))]
        sizes = [await redis.strlen(hot_key(other_tenant.org_id, a)) for a in cached]
        total = int(await redis.hget(sizes_key(other_tenant.org_id, HOT_CACHE), TOTAL_FIELD) or 0)
        assert 2 <= len(cached) < len(agents) and sum(sizes) == total <= 12_000, (cached, sizes, total)
        assert cached == agents[-len(cached):]  # the least recently filled went first
        assert await redis.exists(hot_key(tenant.org_id, "quiet"))  # the other org's set is untouched
        read = await hot.get(other_tenant.org_id, agents[0])  # a trimmed set is still answered (from Postgres)
        assert read.source == "postgres" and read.items[0].text.startswith("a note")


async def test_one_orgs_directive_envelopes_stay_under_its_bound(client: AsyncTestClient[Any], endpoints: Endpoints,
                                                                 redis_url: str, settings: Settings, tenant: Tenant,
                                                                 other_tenant: Tenant) -> None:
    async with stores(endpoints, redis_url, settings, org_bytes=2000) as (_, directives, redis):
        kept = await directives.put(tenant.org_id, "steady", "Answer briefly.")
        agents = [f"d-{i}" for i in range(10)]
        for agent in agents:  # ~300-byte envelopes: about six fit
            await directives.put(other_tenant.org_id, agent, f"Directive for {agent}. " + "Be precise. " * 15)
        cached = [a for a in agents if await redis.exists(cache_key(other_tenant.org_id, a))]
        assert 2 <= len(cached) < len(agents) and cached == agents[-len(cached):]
        assert await redis.exists(cache_key(tenant.org_id, "steady"))
        for agent in agents:  # every directive is still served (trimmed ones from Postgres)
            got = await directives.get(other_tenant.org_id, agent)
            assert got is not None and got.agent_id == agent
        sizes = sizes_key(other_tenant.org_id, DIRECTIVE_CACHE)
        before = int(await redis.hget(sizes, TOTAL_FIELD) or 0)
        assert await directives.delete(other_tenant.org_id, agents[-1])
        after = int(await redis.hget(sizes, TOTAL_FIELD) or 0)
        none = await redis.get(cache_key(other_tenant.org_id, agents[-1]))  # "none", at the deleted version
        assert none is not None and int(await redis.hget(sizes, agents[-1]) or 0) == len(none) < 200
        assert after < before
        assert (await directives.get(tenant.org_id, "steady")) == kept


async def test_embedded_redis_evicts_only_keys_with_a_ttl(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis").start()
    redis = Redis.from_url(server.url())
    try:
        assert (await redis.config_get("maxmemory-policy"))["maxmemory-policy"] == "volatile-lru"
        await redis.config_set("maxmemory", str(8 * 1024 * 1024))  # small, so the flood below fills it
        org_a, org_b = UUID(int=1), UUID(int=2)
        envelope = cache_key(org_a, "planner")
        await redis.set(envelope, b"x" * 10_000)  # as DirectiveStore stores it: no TTL
        blob = b"y" * 50_000
        for i in range(1000):  # org B: ~50 MB of hot sets (with their TTL) into 8 MB
            await redis.set(hot_key(org_b, f"agent-{i}"), blob, ex=300)
        info = await redis.info("stats")
        assert int(info["evicted_keys"]) > 0  # the flood did push keys out ...
        assert await redis.get(envelope) == b"x" * 10_000  # ... never the directive envelope
    finally:
        await redis.aclose()
        server.stop()

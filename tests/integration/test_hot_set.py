"""The per-agent hot set: GET /v1/memories/hot, ordering and bound, correctness after writes (agent and
org-wide), a racing fill never winning over an invalidation, key namespacing and tenant isolation, an
assembly's filters applied to its items."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.assembly.hot import ORG_WIDE, HotSetStore, RedisCircuit, hot_key
from service.db import Database, create_pool
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client


async def hot(client: AsyncTestClient[Any], tenant: Tenant, agent: str) -> Any:
    r = await client.get("/v1/memories/hot", params={"agent_id": agent}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.json()


def texts(body: Any) -> list[str]:
    return [item["text"] for item in body["items"]]


async def create(client: AsyncTestClient[Any], tenant: Tenant, *memories: dict[str, Any]) -> list[str]:
    r = await client.post("/v1/memories", json={"memories": list(memories)}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    return [str(i) for i in r.json()["ids"]]


async def test_route_order_bound_and_cache(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                          tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, hot_set_size=4, **GENEROUS) as client:
        ids = await create(
            client, tenant,
            *({"text": f"routine note number {i}", "agent_id": "a1", "importance": 0.1 * i} for i in range(6)),
            {"text": "pinned but unimportant", "agent_id": "a1", "importance": 0.0, "pinned": True},
            {"text": "most important note", "agent_id": "a1", "importance": 1.0},
        )
        first = await hot(client, tenant, "a1")
        assert first["source"] == "postgres" and len(first["items"]) == 4
        assert texts(first)[0] == "pinned but unimportant"  # pinned first, then by importance
        assert texts(first)[1:] == ["most important note", "routine note number 5", "routine note number 4"]
        again = await hot(client, tenant, "a1")
        assert again["source"] == "cache" and texts(again) == texts(first)
        # The static path does not shadow /v1/memories/{id}, and agent_id is required.
        assert (await client.get(f"/v1/memories/{ids[0]}", headers=tenant.headers)).json()["id"] == ids[0]
        r = await client.get("/v1/memories/hot", headers=tenant.headers)
        assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"
        assert (await client.get("/v1/memories/hot", params={"agent_id": "nobody"},
                                 headers=tenant.headers)).json()["items"] == []


async def test_writes_keep_hot_sets_correct(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                           tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        [mine] = await create(client, tenant, {"text": "agent one fact", "agent_id": "a1"})
        await create(client, tenant, {"text": "agent two fact", "agent_id": "a2"})
        assert texts(await hot(client, tenant, "a1")) == ["agent one fact"]
        assert texts(await hot(client, tenant, "a2")) == ["agent two fact"]
        assert (await hot(client, tenant, "a1"))["source"] == "cache"

        [shared] = await create(client, tenant, {"text": "org-wide fact", "agent_id": None, "importance": 0.9})
        for agent in ("a1", "a2"):  # one org-wide write makes every agent's cached set stale
            body = await hot(client, tenant, agent)
            assert body["source"] == "postgres" and "org-wide fact" in texts(body)

        r = await client.patch(f"/v1/memories/{mine}", json={"text": "agent one fact, revised"},
                               headers=tenant.headers)
        assert r.status_code == 200
        assert "agent one fact, revised" in texts(await hot(client, tenant, "a1"))

        await client.patch(f"/v1/memories/{mine}", json={"agent_id": "a2"}, headers=tenant.headers)
        assert "agent one fact, revised" not in texts(await hot(client, tenant, "a1"))
        assert "agent one fact, revised" in texts(await hot(client, tenant, "a2"))

        assert (await client.delete(f"/v1/memories/{shared}", headers=tenant.headers)).status_code == 204
        for agent in ("a1", "a2"):
            assert "org-wide fact" not in texts(await hot(client, tenant, agent))


async def test_agents_without_memories_of_their_own_share_one_cached_org_wide_set(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, redis_url: str) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await create(client, tenant, {"text": "org-wide policy", "agent_id": None, "importance": 0.8},
                     {"text": "agent one's own note", "agent_id": "a1"})
        first = await hot(client, tenant, "newcomer")
        assert first["source"] == "postgres" and texts(first) == ["org-wide policy"]
        # Cached once for the org, served to every agent without memories of its own, and no key per
        # such agent (ever new agent ids cannot fill Redis).
        for agent in ("newcomer", "another-newcomer"):
            body = await hot(client, tenant, agent)
            assert body["source"] == "cache" and texts(body) == ["org-wide policy"]
        redis = Redis.from_url(redis_url)
        try:
            assert await redis.exists(hot_key(tenant.org_id, ORG_WIDE))
            assert not await redis.exists(hot_key(tenant.org_id, "newcomer"))
            assert not await redis.exists(hot_key(tenant.org_id, "another-newcomer"))
        finally:
            await redis.aclose()
        # An agent with memories of its own never gets the shared set, even with no key of its own.
        assert sorted(texts(await hot(client, tenant, "a1"))) == ["agent one's own note", "org-wide policy"]
        # The newcomer's first memory: from then on its own set, with that memory.
        await create(client, tenant, {"text": "newcomer's first note", "agent_id": "newcomer"})
        assert sorted(texts(await hot(client, tenant, "newcomer"))) == ["newcomer's first note", "org-wide policy"]
        # An org-wide write makes the shared set stale like every other.
        await create(client, tenant, {"text": "second org-wide rule", "agent_id": None, "importance": 0.9})
        body = await hot(client, tenant, "another-newcomer")
        assert body["source"] == "postgres" and texts(body) == ["second org-wide rule", "org-wide policy"]


async def test_an_aged_set_is_served_and_rebuilt_behind_the_request(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, owner_dsn: str, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, hot_set_size=1, hot_refresh_s=0, **GENEROUS) as client:
        first_id, _ = await create(client, tenant, {"text": "older note", "agent_id": "a1"},
                                           {"text": "newer note", "agent_id": "a1"})
        first = await hot(client, tenant, "a1")
        assert first["source"] == "postgres" and texts(first) == ["newer note"]  # equal scores: newest first
        # "older note" is used now (as the access flusher would record it): it ranks first from now on.
        owner = await asyncpg.connect(owner_dsn)
        try:
            await owner.execute("INSERT INTO memory_access (org_id, memory_id, access_count, last_accessed_at) "
                                "VALUES ($1, $2, 1, now())", tenant.org_id, UUID(first_id))
        finally:
            await owner.close()
        aged = await hot(client, tenant, "a1")  # older than hot_refresh_s: still served, no wait ...
        assert aged["source"] == "cache" and aged["built_at"] == first["built_at"] and texts(aged) == ["newer note"]
        for _ in range(50):  # ... while a fill replaces it in the background
            rebuilt = await hot(client, tenant, "a1")
            if rebuilt["built_at"] != first["built_at"]:
                break
            await asyncio.sleep(0.05)
        assert rebuilt["source"] == "cache" and texts(rebuilt) == ["older note"]
        assert rebuilt["items"][0]["access_count"] == 1 and rebuilt["items"][0]["last_accessed_at"] is not None


async def test_a_fill_racing_a_write_cannot_leave_a_stale_set(
        settings: Settings, endpoints: Endpoints, redis_url: str, tenant: Tenant, embedder: Embedder) -> None:
    """Counters are read before Postgres; a set stored under old counters is a miss afterwards."""
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=2)
    redis = Redis.from_url(redis_url)
    try:
        store = HotSetStore(Database(pool, statement_timeout_ms=5000), redis, settings.assembly, RedisCircuit(1.0))
        async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
            await create(client, tenant, {"text": "before the write", "agent_id": "racer"})
            assert texts(await hot(client, tenant, "racer")) == ["before the write"]
            # A reader took the (current) counters and read Postgres before the write below ...
            raw = await redis.mget([f"{{{tenant.org_id}}}:hot_gen", f"{{{tenant.org_id}}}:hot_ver:racer"])
            gen, ver = int(raw[0] or 0), int(raw[1] or 0)
            await create(client, tenant, {"text": "after the write", "agent_id": "racer"})
            # ... and stores its now-stale result after the write's invalidation.
            stale = await store._fill(tenant.org_id, "racer", gen, ver, 0)
            assert await redis.exists(hot_key(tenant.org_id, "racer"))
            assert len(stale.items) == 2  # (it happens to see both here; the stamps are what matter)
            body = await hot(client, tenant, "racer")
            assert body["source"] == "postgres" and "after the write" in texts(body)
    finally:
        await redis.aclose()
        await pool.close()


async def test_keys_are_org_namespaced_and_sets_never_cross_orgs(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, redis_url: str, tenant: Tenant,
        other_tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await create(client, tenant, {"text": "A's memory", "agent_id": "same-agent", "pinned": True})
        await create(client, other_tenant, {"text": "B's memory", "agent_id": "same-agent", "pinned": True},
                     {"text": "B's org-wide memory", "agent_id": None})
        assert texts(await hot(client, tenant, "same-agent")) == ["A's memory"]
        assert set(texts(await hot(client, other_tenant, "same-agent"))) == {"B's memory", "B's org-wide memory"}
        assert texts(await hot(client, tenant, "same-agent")) == ["A's memory"]  # from the cache now
    redis = Redis.from_url(redis_url)
    try:
        for t in (tenant, other_tenant):
            assert await redis.exists(hot_key(t.org_id, "same-agent"))
            assert hot_key(t.org_id, "same-agent").startswith(f"{{{t.org_id}}}:hot_memories:")
    finally:
        await redis.aclose()


async def test_an_assembly_without_org_wide_memories_leaves_them_out_of_the_hot_set_too(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        [chess, own] = await create(client, tenant,
                                    {"text": "The user plays chess on Sundays.", "agent_id": None, "pinned": True},
                                    {"text": "The user's chess club meets at the library.", "agent_id": "mine",
                                     "pinned": True})

        async def used(agent: str, **retrieval: Any) -> dict[str, str]:
            r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
                "agent_id": agent, "query": "chess", "model": "gpt-4o", "max_context_tokens": 2000,
                "retrieval": retrieval})
            assert r.status_code == 200, r.text
            assert r.json()["branches"]["hot"]["outcome"] == "ok"
            return {m["id"]: m["origin"] for m in r.json()["memories_used"]}

        # "exp" has no memories of its own (the org-wide set), "mine" has (a set of its own)
        for agent in ("exp", "mine"):
            assert (await used(agent))[chess] == "hot"  # org-wide memories are considered by default
            scoped = await used(agent, include_org_wide=False)
            assert chess not in scoped, (agent, scoped)  # neither through the hot set nor the search
            assert (await used(agent))[chess] == "hot"  # the cached set itself still holds it
        assert set(await used("mine", include_org_wide=False)) == {own}
        assert texts(await hot(client, tenant, "exp")) == ["The user plays chess on Sundays."]


async def test_a_cached_set_stops_serving_what_expires_or_ends_while_it_is_cached(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """No write invalidates a set when a memory's expires_at or valid_until passes: the read leaves it out,
    from a set built before (and, for an agent whose own memories all ended, the agent's old set is not
    kept in place of the shared org-wide one)."""
    async with assembly_client(settings, endpoints, embedder, hot_refresh_s=0, **GENEROUS) as client:
        soon = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
        await create(client, tenant, {"text": "Temporary door code is 4471.", "agent_id": "ends", "pinned": True,
                                      "expires_at": soon},
                     {"text": "The user is in a meeting right now.", "agent_id": "ends", "pinned": True,
                      "valid_until": soon},
                     {"text": "One-time password is 998877.", "agent_id": "gone", "pinned": True, "expires_at": soon},
                     {"text": "The office opens at nine.", "pinned": True})
        before = {agent: await hot(client, tenant, agent) for agent in ("ends", "gone")}
        assert len(texts(before["ends"])) == 3 and "One-time password is 998877." in texts(before["gone"])
        assert (await hot(client, tenant, "ends"))["source"] == "cache"
        await asyncio.sleep(1.6)
        for _ in range(3):  # the cached set (and whatever refills it behind the reads) no longer serves them
            assert texts(await hot(client, tenant, "ends")) == ["The office opens at nine."]
            assert texts(await hot(client, tenant, "gone")) == ["The office opens at nine."]
            await asyncio.sleep(0.05)
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "ends", "query": "What is the door code?", "model": "gpt-4o", "max_context_tokens": 2000})
        assert r.status_code == 200 and "4471" not in r.json()["context"] and "meeting" not in r.json()["context"]


async def test_an_assemblys_filters_apply_to_the_hot_set_as_to_the_search(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """kinds, sources and the created/occurred ranges apply to the hot set's items; a metadata filter,
    which a set cannot check, leaves the set out (the search alone answers), and neither is a degradation."""
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        [vegan, order, memo] = await create(
            client, tenant,
            {"text": "The user is vegan.", "agent_id": "hf", "kind": "fact", "pinned": True,
             "metadata": {"topic": "diet"}, "occurred_at": "2020-05-01T00:00:00Z"},
            {"text": "The user ordered a vegan lasagne.", "agent_id": "hf", "kind": "episode", "pinned": True,
             "metadata": {"topic": "orders"}, "occurred_at": "2024-05-01T00:00:00Z"},
            {"text": "The canteen serves lunch at noon.", "kind": "fact", "pinned": True,
             "occurred_at": "2022-06-01T00:00:00Z"})

        async def used(**filters: Any) -> tuple[dict[str, str], dict[str, Any]]:
            r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
                "agent_id": "hf", "query": "what does the user eat?", "model": "gpt-4o", "max_context_tokens": 2000,
                "retrieval": {"filters": filters}})
            assert r.status_code == 200, r.text
            body = r.json()
            assert "hot_unavailable" not in body["degradation_reasons"], body["degradation_reasons"]
            return {m["id"]: m["origin"] for m in body["memories_used"]}, body["branches"]["hot"]

        everything, branch = await used()
        assert {vegan, order, memo} <= set(everything) and branch["outcome"] == "ok"
        for filters, kept in (({"kinds": ["episode"]}, {order}),
                              ({"created_after": "2100-01-01T00:00:00Z"}, set()),
                              ({"occurred_before": "2021-01-01T00:00:00Z"}, {vegan}),
                              ({"occurred_after": "2023-01-01T00:00:00Z", "kinds": ["episode", "fact"]}, {order}),
                              ({"source_prefix": "docs/"}, set())):
            found, branch = await used(**filters)
            assert branch["outcome"] == "ok" and set(found) == kept, (filters, found)
        found, branch = await used(metadata={"topic": "orders"})
        assert set(found) == {order} and found[order] == "cold", found
        assert branch["outcome"] == "skipped" and "metadata" in branch["detail"], branch
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "hf", "query": "what does the user eat?", "model": "gpt-4o", "max_context_tokens": 2000,
            "retrieval": {"filters": {"as_of": "2025-01-01T00:00:00Z"}}})
        assert r.status_code == 200 and r.json()["degradation_reasons"] == []  # left out by the request

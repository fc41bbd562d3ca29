"""Directives: Postgres is the truth, a Redis envelope serves reads, writes refresh it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.db import Database, create_pool
from service.db.epochs import CacheEpochs
from service.directives import DirectiveStore
from service.settings import Settings
from tests.conftest import Tenant


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


def key(tenant: Tenant, agent_id: str) -> str:
    return f"{{{tenant.org_id}}}:directive:{agent_id}"


async def envelope(redis: Redis, tenant: Tenant, agent_id: str) -> dict[str, Any] | None:
    raw = await redis.get(key(tenant, agent_id))
    return None if raw is None else dict(json.loads(raw))


async def test_put_get_delete_and_versions(client: AsyncTestClient[Any], tenant: Tenant, redis: Redis) -> None:
    path = "/v1/agents/planner/directive"
    r = await client.put(path, json={"content": "You plan trips."}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    first = r.json()
    assert first["agent_id"] == "planner" and first["content"] == "You plan trips." and first["version"] == 1
    r = await client.put(path, json={"content": "You plan trips on a budget."}, headers=tenant.headers)
    second = r.json()
    assert second["version"] == 2 and second["updated_at"] >= first["updated_at"]
    got = await client.get(path, headers=tenant.headers)
    assert got.status_code == 200 and got.json() == second

    env = await envelope(redis, tenant, "planner")
    assert env is not None
    assert env["content"] == "You plan trips on a budget." and env["version"] == 2
    assert env["updated_at"] == second["updated_at"]
    assert await redis.ttl(key(tenant, "planner")) == -1  # no TTL: volatile-lru eviction never takes it

    assert (await client.delete(path, headers=tenant.headers)).status_code == 204
    env = await envelope(redis, tenant, "planner")  # "none", at the deleted directive's version
    assert env is not None and env["absent"] is True and env["version"] == 2 and env["content"] == ""
    assert (await client.get(path, headers=tenant.headers)).status_code == 404
    assert (await client.delete(path, headers=tenant.headers)).status_code == 404
    r = await client.put(path, json={"content": "Fresh start."}, headers=tenant.headers)
    assert r.json()["version"] == 3  # versions go on after a delete: version 2 named another text


async def test_read_through_on_miss(client: AsyncTestClient[Any], tenant: Tenant, redis: Redis) -> None:
    path = "/v1/agents/reader/directive"
    await client.put(path, json={"content": "Read me."}, headers=tenant.headers)
    assert await redis.delete(key(tenant, "reader")) == 1
    r = await client.get(path, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["content"] == "Read me." and r.json()["version"] == 1
    env = await envelope(redis, tenant, "reader")
    assert env is not None and env["content"] == "Read me." and env["version"] == 1


async def test_get_is_served_from_the_envelope(client: AsyncTestClient[Any], tenant: Tenant, redis: Redis) -> None:
    """A hit is answered by Redis alone (shown by planting a recognisable envelope)."""
    path = "/v1/agents/cached/directive"
    await client.put(path, json={"content": "From Postgres."}, headers=tenant.headers)
    cached = await envelope(redis, tenant, "cached")
    assert cached is not None and cached["epoch"] == 0  # the org's cache epoch (no failed cache write yet)
    planted = {**cached, "content": "From the Redis envelope."}
    await redis.set(key(tenant, "cached"), json.dumps(planted))
    assert (await client.get(path, headers=tenant.headers)).json()["content"] == "From the Redis envelope."


async def test_write_refreshes_the_envelope(client: AsyncTestClient[Any], tenant: Tenant, redis: Redis) -> None:
    path = "/v1/agents/writer/directive"
    for n in range(1, 5):
        await client.put(path, json={"content": f"revision {n}"}, headers=tenant.headers)
        r = await client.get(path, headers=tenant.headers)  # the next read sees the write
        assert r.json()["content"] == f"revision {n}" and r.json()["version"] == n
        env = await envelope(redis, tenant, "writer")
        assert env is not None and env["version"] == n


async def test_putting_the_same_text_again_changes_nothing(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """A PUT is idempotent: a client that retries one after a lost answer does not bump the version."""
    path = "/v1/agents/steady/directive"
    first = (await client.put(path, json={"content": "Stay calm."}, headers=tenant.headers)).json()
    again = (await client.put(path, json={"content": "Stay calm."}, headers=tenant.headers)).json()
    assert first["version"] == 1 and (again["version"], again["updated_at"]) == (1, first["updated_at"])
    changed = (await client.put(path, json={"content": "Stay calmer."}, headers=tenant.headers)).json()
    assert changed["version"] == 2
    assert (await client.get(path, headers=tenant.headers)).json()["version"] == 2


async def test_older_version_never_overwrites_newer(client: AsyncTestClient[Any], tenant: Tenant, redis: Redis,
                                                    app_dsn: str) -> None:
    path = "/v1/agents/racer/directive"
    for n in range(3):
        await client.put(path, json={"content": f"v{n + 1}"}, headers=tenant.headers)
    newer = {"agent_id": "racer", "content": "v9 from a newer writer", "version": 9,
             "updated_at": "2030-01-01T00:00:00Z", "epoch": 0}
    await redis.set(key(tenant, "racer"), json.dumps(newer))
    # A store of its own (the app's pool lives on the test client's loop), as another replica would have.
    pool = await create_pool(app_dsn, min_size=1, max_size=1)
    try:
        store = DirectiveStore(Database(pool, statement_timeout_ms=5000), redis)
        loaded = await store.load(tenant.org_id, "racer")  # a read-through that found version 3 in Postgres
        put = await store.put(tenant.org_id, "racer", "v4 from a slower writer")
    finally:
        await pool.close()
    assert loaded is not None and loaded.version == 3 and put.version == 4
    assert await envelope(redis, tenant, "racer") == newer


@pytest.mark.parametrize(("rewritten", "evicted"), [(True, False), (False, False), (False, True)],
                         ids=["deleted and written anew", "deleted", "deleted, its envelope evicted and read back"])
async def test_a_read_from_before_a_delete_never_caches_the_deleted_text(client: AsyncTestClient[Any], tenant: Tenant,
                                                                          redis: Redis, app_dsn: str,
                                                                          rewritten: bool, evicted: bool) -> None:
    """A read-through that found version 2 in Postgres caches it after the directive was deleted (and
    written anew): what came after must not lose to it. (Versions started again at 1 after a delete, so
    the late envelope, version 2, counted as newer than the new text's; and a delete left no envelope
    for it to lose to. Either way the deleted text was served until the next write.)"""
    agent = f"reborn-{rewritten}".lower()
    path = f"/v1/agents/{agent}/directive"
    for text in ("Be terse.", "Be very terse."):
        await client.put(path, json={"content": text}, headers=tenant.headers)
    pool = await create_pool(app_dsn, min_size=1, max_size=1)
    try:
        db = Database(pool, statement_timeout_ms=5000)
        # Another replica's store, which surely reads the org's cache epoch (so it does cache what it read).
        store = DirectiveStore(db, redis, CacheEpochs(db, check_s=60, timeout_s=10))
        read_postgres = store.read_postgres_state

        async def read_then_deleted(org_id: Any, agent_id: str) -> Any:
            found = await read_postgres(org_id, agent_id)
            assert (await client.delete(path, headers=tenant.headers)).status_code == 204
            if evicted:  # the deletion's envelope gone (evicted), then read back from Postgres
                await redis.delete(key(tenant, agent))
                assert (await client.get(path, headers=tenant.headers)).status_code == 404
            if rewritten:
                r = await client.put(path, json={"content": "Be chatty."}, headers=tenant.headers)
                assert r.status_code == 200, r.text
            return found

        store.read_postgres_state = read_then_deleted  # type: ignore[method-assign]
        stale = await store.load(tenant.org_id, agent)
        epoch = await store.epochs.current(tenant.org_id)
    finally:
        await pool.close()
    assert stale is not None and (stale.content, stale.version) == ("Be very terse.", 2) and epoch is not None
    current = await client.get(path, headers=tenant.headers)
    if rewritten:
        assert current.json()["content"] == "Be chatty." and current.json()["version"] > 2, current.text
    else:
        assert current.status_code == 404, current.text


async def test_concurrent_writes_leave_the_latest_version_cached(client: AsyncTestClient[Any], tenant: Tenant,
                                                                 redis: Redis) -> None:
    path = "/v1/agents/busy/directive"
    results = await asyncio.gather(*(client.put(path, json={"content": f"writer {i}"}, headers=tenant.headers)
                                     for i in range(8)))
    assert sorted(r.json()["version"] for r in results) == list(range(1, 9))
    latest = max((r.json() for r in results), key=lambda d: d["version"])
    env = await envelope(redis, tenant, "busy")
    assert env is not None and env["version"] == 8 and env["content"] == latest["content"]
    assert (await client.get(path, headers=tenant.headers)).json()["content"] == latest["content"]


async def test_bad_directive_input(client: AsyncTestClient[Any], tenant: Tenant, settings: Settings) -> None:
    path = "/v1/agents/strict/directive"
    await client.put(path, json={"content": "Keep me."}, headers=tenant.headers)
    too_long = "d" * (settings.limits.max_directive_chars + 1)
    cases: list[tuple[str, Any, int]] = [
        (path, {"content": ""}, 400),
        (path, {"content": "   "}, 400),
        (path, {"content": too_long}, 413),
        (path, {"content": "nul\u0000byte"}, 400),
        (path, {"content": 42}, 400),
        (path, {"content": "ok", "version": 7}, 400),
        (path, {}, 400),
        (path, [1], 400),
        ("/v1/agents/has%20space/directive", {"content": "ok"}, 400),
        ("/v1/agents/strict%0A/directive", {"content": "ok"}, 400),
        (f"/v1/agents/{'a' * 201}/directive", {"content": "ok"}, 400),
    ]
    for target, body, status in cases:
        r = await client.put(target, json=body, headers=tenant.headers)
        assert r.status_code == status, (target, body, r.text)
        assert set(r.json()["error"]) == {"code", "message", "details", "request_id"}
        if status == 413:  # the limit is named as a memory's text names it
            assert r.json()["error"]["details"] == {"field": "content", "limit": settings.limits.max_directive_chars}
    r = await client.put(path, content=b"{broken", headers={**tenant.headers, "Content-Type": "application/json"})
    assert r.status_code == 400
    got = (await client.get(path, headers=tenant.headers)).json()
    assert got["content"] == "Keep me." and got["version"] == 1
    assert (await client.get("/v1/agents/strict%0A/directive", headers=tenant.headers)).status_code == 400

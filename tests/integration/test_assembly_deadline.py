"""The caller's deadline honoured both ways, on real Postgres and Redis: ``X-Timeout-Ms``,
``X-Deadline-Ms`` and the body's ``timeout_ms`` lengthen the wall (and the cold search's own step
deadlines) up to ``PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS``, so a search that cannot finish in the
default 40 ms runs in full for a caller that gave it the time; a shorter one still shortens it.

The cold search is slowed by the retrieval engine's ``branch_delay_ms`` knob (every search query
sleeps that long in Postgres first).
"""

from __future__ import annotations

import time
from typing import Any

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import assemble, assembly_client, seed

DELAY_MS = 120
"""Each search branch's query sleeps this long: past the default wall, well within 1 s."""


def slowed(**assembly: Any) -> dict[str, Any]:
    return {"retrieval": {"branch_delay_ms": DELAY_MS}, "directive_timeout_ms": 0, **assembly}


async def test_the_default_deadline_cuts_the_slow_search_and_the_caller_can_buy_the_full_one(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **slowed()) as client:
        await seed(client, tenant)
        await assemble(client, tenant, headers={"X-Timeout-Ms": "2000"})  # warm: pool, model, caches
        default = (await assemble(client, tenant)).json()
        header = (await assemble(client, tenant, headers={"X-Timeout-Ms": "800"})).json()
        absolute = (await assemble(client, tenant,
                                   headers={"X-Deadline-Ms": str(int(time.time() * 1000) + 800)})).json()
        in_body = (await assemble(client, tenant, timeout_ms=800)).json()
    assert default["metrics"]["deadline_ms"] == settings.assembly.deadline_ms
    assert default["branches"]["cold"]["outcome"] == "timeout" and "cold_unavailable" in default["degradation_reasons"]
    for body in (header, absolute, in_body):
        assert 700 < body["metrics"]["deadline_ms"] <= 800, body["metrics"]
        assert body["branches"]["cold"]["outcome"] == "ok", body["branches"]
        assert body["retrieval"] == {"planned": "hybrid", "ran": "hybrid", "reduced": False, "reason": "planned"}
        assert body["degradation_level"] == "L0" and body["degradation_reasons"] == []
        assert body["metrics"]["cold_memory_retrieval_ms"] >= DELAY_MS


async def test_a_longer_deadline_is_capped_by_the_maximum(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **slowed(max_deadline_ms=80)) as client:
        await seed(client, tenant)
        await assemble(client, tenant, headers={"X-Timeout-Ms": "2000"})
        started = time.monotonic()
        body = (await assemble(client, tenant, headers={"X-Timeout-Ms": "5000"})).json()
        took_ms = (time.monotonic() - started) * 1000
    assert body["metrics"]["deadline_ms"] == 80
    assert body["branches"]["cold"]["outcome"] == "timeout", body["branches"]  # 80 ms cannot hold a 120 ms query
    assert took_ms < 2000  # not the caller's 5 s


async def test_the_soonest_of_the_caller_deadlines_wins_and_a_short_one_shortens_the_wall(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, deadline_ms=1000) as client:
        await seed(client, tenant)
        short = (await assemble(client, tenant, headers={"X-Timeout-Ms": "900"}, timeout_ms=300)).json()
        shorter_header = (await assemble(client, tenant, headers={"X-Timeout-Ms": "250"}, timeout_ms=900)).json()
    assert 200 < short["metrics"]["deadline_ms"] <= 300, short["metrics"]
    assert 150 < shorter_header["metrics"]["deadline_ms"] <= 250, shorter_header["metrics"]


async def test_timeout_ms_out_of_range_is_a_400(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder) as client:
        for bad in (0, -5, 3_600_001, "100"):
            r = await assemble(client, tenant, timeout_ms=bad)
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["error"]["code"] == "validation_error"

"""POST /v1/memories/feedback: bounded moving-average usefulness, validation, other orgs' ids, and
feedback changing a later assembly's ranking."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import AGENT, GENEROUS, assemble, assembly_client


async def feedback(client: AsyncTestClient[Any], tenant: Tenant, body: dict[str, Any]) -> Any:
    return await client.post("/v1/memories/feedback", json=body, headers=tenant.headers)


async def test_usefulness_moves_bounded_and_counts(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                   tenant: Tenant, other_tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, feedback_alpha=0.5, **GENEROUS) as client:
        r = await client.post("/v1/memories", json={"text": "a fact", "agent_id": AGENT}, headers=tenant.headers)
        [ident] = r.json()["ids"]
        r = await feedback(client, tenant, {"memory_ids": [ident], "helpful": True})
        assert r.status_code == 200, r.text
        assert r.json() == {"updated": [{"id": ident, "usefulness": 0.5, "feedback_count": 1}], "not_found": []}
        # Three reports in one request apply in order: 0.5 -> -0.25 -> -0.625 -> -0.8125.
        items = [{"id": ident, "helpful": False}] * 3
        r = await feedback(client, tenant, {"items": items})
        assert r.json()["updated"] == [{"id": ident, "usefulness": -0.8125, "feedback_count": 4}]
        for _ in range(10):
            r = await feedback(client, tenant, {"items": items})
        assert -1.0 <= r.json()["updated"][0]["usefulness"] < -0.999
        row = (await client.get(f"/v1/memories/{ident}", headers=tenant.headers)).json()
        assert row["usefulness"] == r.json()["updated"][0]["usefulness"]
        # Another org cannot touch it, and learns nothing about it.
        r = await feedback(client, other_tenant, {"memory_ids": [ident], "helpful": True})
        assert r.status_code == 200 and r.json() == {"updated": [], "not_found": [ident]}
        assert (await client.get(f"/v1/memories/{ident}", headers=tenant.headers)).json()["usefulness"] < -0.999


async def test_bad_feedback_requests(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                     tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ident = "01900000-0000-7000-8000-000000000000"
        for body in ({}, {"memory_ids": [ident]}, {"memory_ids": [ident], "items": [], "helpful": True},
                     {"items": [{"id": ident, "helpful": True}], "helpful": True}, {"memory_ids": [], "helpful": True},
                     {"memory_ids": [ident] * 257, "helpful": True}, {"memory_ids": ["nope"], "helpful": True}):
            r = await feedback(client, tenant, body)
            assert r.status_code == 400, (body, r.text)
            assert set(r.json()) == {"error"}
        r = await feedback(client, tenant, {"memory_ids": [ident], "helpful": True})
        assert r.json() == {"updated": [], "not_found": [ident]}


async def test_feedback_on_an_expired_memory_finds_nothing(settings: Settings, endpoints: Endpoints,
                                                         embedder: Embedder, tenant: Tenant) -> None:
    """An expired memory is gone for every read (404 from GET): feedback on it changes nothing and says so."""
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
        r = await client.post("/v1/memories", json={"text": "Door code is 4471.", "agent_id": AGENT,
                                                    "expires_at": soon}, headers=tenant.headers)
        [ident] = r.json()["ids"]
        await asyncio.sleep(1.1)
        assert (await client.get(f"/v1/memories/{ident}", headers=tenant.headers)).status_code == 404
        r = await feedback(client, tenant, {"memory_ids": [ident], "helpful": True})
        assert r.status_code == 200 and r.json() == {"updated": [], "not_found": [ident]}


async def test_feedback_changes_a_later_ranking(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                tenant: Tenant) -> None:
    twins = ["Deploys to production happen on Tuesdays after the change review meeting.",
             "Production releases are scheduled every Tuesday following the review of changes."]
    async with assembly_client(settings, endpoints, embedder, feedback_alpha=0.5, **GENEROUS) as client:
        r = await client.post("/v1/memories", headers=tenant.headers,
                              json={"memories": [{"text": t, "agent_id": AGENT} for t in twins]})
        ids = r.json()["ids"]
        query = "when do production deploys happen?"

        async def order() -> list[str]:
            body = (await assemble(client, tenant, query=query, retrieval={"use_hot": False})).json()
            return [m["id"] for m in body["memories_used"] if m["id"] in ids]

        before = await order()
        assert len(before) == 2, "both memories should be packed (they are similar, not duplicates)"
        winner, loser = before
        for _ in range(3):
            items = [{"id": winner, "helpful": False}, {"id": loser, "helpful": True}]
            await feedback(client, tenant, {"items": items})
        assert await order() == [loser, winner]


async def test_a_report_retried_under_its_idempotency_key_moves_usefulness_once(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "a retried fact", "agent_id": AGENT}, headers=tenant.headers)
    [ident] = r.json()["ids"]
    keyed = {**tenant.headers, "Idempotency-Key": "report-1"}
    body = {"memory_ids": [ident], "helpful": True}
    first = await client.post("/v1/memories/feedback", json=body, headers=keyed)
    again = await client.post("/v1/memories/feedback", json=body, headers=keyed)
    assert first.status_code == again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first.json() and first.json()["updated"][0]["feedback_count"] == 1
    other = await client.post("/v1/memories/feedback", json={"memory_ids": [ident], "helpful": False}, headers=keyed)
    assert other.status_code == 409 and other.json()["error"]["code"] == "idempotency_key_reused"
    counted = await feedback(client, tenant, body)
    assert counted.json()["updated"][0]["feedback_count"] == 2

"""Erasure of facts over HTTP on real Postgres + Redis: erasing a memory removes every event that holds
its text or a text merged into it, wherever the event is recorded; erasing an agent removes the
history of every memory it erased, whatever agent the events were recorded under. Checked in the
history and in the data-subject export."""

from __future__ import annotations

import json
from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.test_facts import history, write


async def exported(client: AsyncTestClient[Any], tenant: Tenant, agent_id: str | None = None) -> str:
    """The export's lines, as text (whether a secret is still in it)."""
    r = await client.get("/v1/export", params={"agent_id": agent_id} if agent_id else {}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return r.text


async def history_texts(client: AsyncTestClient[Any], tenant: Tenant, memory_id: str) -> str:
    r = await client.get(f"/v1/memories/{memory_id}/history", headers=tenant.headers)
    assert r.status_code in (200, 404), r.text
    return json.dumps(r.json()["items"]) if r.status_code == 200 else ""


async def test_erasing_a_restored_duplicate_removes_its_text_from_the_kept_memorys_merge(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (kept,) = (await write(client, tenant, {"text": "The user secret is zebra-alpha.", "agent_id": "er1"}))["ids"]
    merged = (await write(client, tenant, {"text": "the user secret is zebra alpha", "agent_id": "er1"}))["items"][0]
    assert merged["status"] == "merged" and merged["id"] == kept
    event = (await history(client, tenant, kept))[-1]
    r = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    restored = r.json()["restored"]
    assert (await client.delete(f"/v1/memories/{restored}?erase=true", headers=tenant.headers)).status_code == 204
    assert "zebra alpha" not in await history_texts(client, tenant, kept)
    assert "zebra alpha" not in await exported(client, tenant, "er1")
    assert "zebra alpha" not in await exported(client, tenant)
    # the kept memory's own history stays
    assert [e["event"] for e in await history(client, tenant, kept)] == ["created"]


async def test_erasing_a_memory_removes_the_history_of_what_was_merged_into_it(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (kept,) = (await write(client, tenant, {"text": "The user owns a red bicycle.", "agent_id": "er2"}))["ids"]
    (other,) = (await write(client, tenant, {"text": "The user phone is 555-1234 secretish.",
                                             "agent_id": "er2"}))["ids"]
    r = await client.patch(f"/v1/memories/{other}", json={"text": "the user owns a red bicycle"},
                           headers=tenant.headers)
    assert r.status_code == 200 and r.json()["status"] == "merged" and r.json()["id"] == kept, r.text
    assert (await client.delete(f"/v1/memories/{kept}?erase=true", headers=tenant.headers)).status_code == 204
    for memory_id in (kept, other):
        left = await history_texts(client, tenant, memory_id)
        assert "555-1234" not in left and "red bicycle" not in left
    text = await exported(client, tenant, "er2")
    assert "555-1234" not in text and "red bicycle" not in text


async def test_erasing_an_agent_removes_the_history_of_memories_moved_to_it(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (moved,) = (await write(client, tenant, {"text": "The user passport number is X1234567.",
                                             "agent_id": "er3a"}))["ids"]
    (stays,) = (await write(client, tenant, {"text": "The user likes sailing.", "agent_id": "er3a"}))["ids"]
    r = await client.patch(f"/v1/memories/{moved}", json={"agent_id": "er3b"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    r = await client.delete("/v1/memories", params={"agent_id": "er3b"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["deleted"] == 1
    assert (await client.get(f"/v1/memories/{moved}/history", headers=tenant.headers)).status_code == 404
    for agent in ("er3a", "er3b", None):
        assert "X1234567" not in await exported(client, tenant, agent)
    # the other agent's own memory keeps its history
    assert [e["event"] for e in await history(client, tenant, stays)] == ["created"]


async def test_erasing_a_merged_away_memory_removes_its_text_from_the_kept_memory(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (kept,) = (await write(client, tenant, {"text": "The user drives a blue van.", "agent_id": "er4"}))["ids"]
    (other,) = (await write(client, tenant, {"text": "The user pin is 9931.", "agent_id": "er4"}))["ids"]
    r = await client.patch(f"/v1/memories/{other}", json={"text": "the user drives a blue van!"},
                           headers=tenant.headers)
    assert r.status_code == 200 and r.json()["status"] == "merged", r.text
    # gone as a row, its history left behind: erasing it takes the copy in the kept memory's merge too
    assert (await client.delete(f"/v1/memories/{other}?erase=true", headers=tenant.headers)).status_code == 204
    assert "blue van!" not in await history_texts(client, tenant, kept)
    assert "9931" not in await exported(client, tenant, "er4")
    got = (await client.get(f"/v1/memories/{kept}", headers=tenant.headers)).json()
    assert got["text"] == "The user drives a blue van."

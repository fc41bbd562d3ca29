"""Facts that stay true, over HTTP on real Postgres + Redis: duplicates merged (or kept, or refused) at
write time, each item's outcome reported, history recorded and merges undone; messages never merged."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.test_memories_api import list_all


async def write(client: AsyncTestClient[Any], tenant: Tenant, body: dict[str, Any], status: int = 201) -> Any:
    r = await client.post("/v1/memories", json=body, headers=tenant.headers)
    assert r.status_code == status, r.text
    return r.json()


async def history(client: AsyncTestClient[Any], tenant: Tenant, memory_id: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/memories/{memory_id}/history", headers=tenant.headers)
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


async def test_the_same_fact_written_again_is_merged(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    first = await write(client, tenant, {"text": "The user prefers dark roast coffee.", "agent_id": "barista",
                                         "metadata": {"source": "chat"}, "occurred_at": "2024-03-01T10:00:00Z"})
    assert first["items"] == [{"id": first["ids"][0], "status": "created", "superseded": [], "current": True,
                               "superseded_by": None, "similarity": None}]
    again = await write(client, tenant, {"text": "the user prefers dark-roast coffee", "agent_id": "barista",
                                         "metadata": {"source": "email", "channel": "inbox"},
                                         "occurred_at": "2024-05-01T10:00:00Z"})
    (item,) = again["items"]
    assert item["status"] == "merged" and item["id"] == first["ids"][0] and again["ids"] == first["ids"]
    assert item["similarity"] > 0.9
    listed = await list_all(client, tenant, agent_id="barista")
    assert [m["id"] for m in listed] == first["ids"]
    kept = listed[0]
    assert kept["seen_count"] == 2 and kept["text"] == "The user prefers dark roast coffee."
    assert kept["metadata"] == {"source": "chat", "channel": "inbox"}  # its own values win, new keys added
    assert kept["first_occurred_at"].startswith("2024-03-01") and kept["last_occurred_at"].startswith("2024-05-01")
    events = await history(client, tenant, kept["id"])
    assert [e["event"] for e in events] == ["created", "merged"]
    merged = events[1]["detail"]
    assert merged["item"]["text"] == "the user prefers dark-roast coffee"
    assert merged["similarity"]["rule"] in ("exact", "same_words") and merged["added_metadata"] == {"channel": "inbox"}


async def test_changed_meaning_is_not_merged(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    base = "Alice takes 3 pills every morning."
    (first,) = (await write(client, tenant, {"text": base, "agent_id": "nurse"}))["ids"]
    for text in ("Alice takes 4 pills every morning.", "Alice does not take 3 pills every morning.",
                 "Bob takes 3 pills every morning.", "Alice takes 3 pills every evening.",
                 "Alice takes 3 vitamins every morning."):
        (item,) = (await write(client, tenant, {"text": text, "agent_id": "nurse"}))["items"]
        assert item["status"] == "created" and item["id"] != first, text
    (item,) = (await write(client, tenant, {"text": "Honestly, Alice takes 3 pills every morning!",
                                            "agent_id": "nurse"}))["items"]
    assert item == {**item, "status": "merged", "id": first}


async def test_scope_kind_and_policy(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    text = "The office closes at six."
    (mine,) = (await write(client, tenant, {"text": text, "agent_id": "a"}))["ids"]
    other_agent = (await write(client, tenant, {"text": text, "agent_id": "b"}))["items"][0]
    org_wide = (await write(client, tenant, {"text": text}))["items"][0]
    other_kind = (await write(client, tenant, {"text": text, "agent_id": "a", "kind": "episode"}))["items"][0]
    assert {other_agent["status"], org_wide["status"], other_kind["status"]} == {"created"}
    kept = (await write(client, tenant, {"text": text, "agent_id": "a", "on_duplicate": "keep"}))["items"][0]
    assert kept["status"] == "created" and kept["id"] != mine
    r = await client.post("/v1/memories", json={"memories": [{"text": "A new fact for the batch.", "agent_id": "a"},
                                                             {"text": text, "agent_id": "a"}],
                                                "on_duplicate": "reject"}, headers=tenant.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "duplicate"
    assert r.json()["error"]["details"]["items"][0]["index"] == 1
    assert not [m for m in await list_all(client, tenant, agent_id="a") if m["text"] == "A new fact for the batch."]


async def test_a_batch_spanning_scopes_merges_each_item_in_its_own(client: AsyncTestClient[Any],
                                                                   tenant: Tenant) -> None:
    fact, reworded = "The user bought a car.", "The user purchased a car."  # near, not the same words
    scopes: list[dict[str, Any]] = [{"agent_id": "a"}, {"agent_id": "b"}, {}, {"agent_id": "a", "kind": "episode"}]
    targets = [(await write(client, tenant, {"text": fact, **scope}))["ids"][0] for scope in scopes]
    batch = [{"text": reworded, **scope} for scope in [scopes[1], scopes[0], {"agent_id": "c"}, scopes[3], scopes[2]]]
    items = (await write(client, tenant, {"memories": batch}))["items"]
    assert [i["status"] for i in items] == ["merged", "merged", "created", "merged", "merged"]
    assert [items[k]["id"] for k in (1, 0, 4, 3)] == targets
    assert all(items[k]["similarity"] < 1.0 for k in (0, 1, 3, 4))  # the vector probe's finds, not the hash's


async def test_a_batch_holding_a_fact_twice_writes_it_once(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    body = {"memories": [{"text": "Maya moved to Lisbon in May.", "agent_id": "m"},
                         {"text": "Maya's sister is a nurse.", "agent_id": "m"},
                         {"text": "maya moved to lisbon in may", "agent_id": "m"}]}
    result = await write(client, tenant, body)
    assert [i["status"] for i in result["items"]] == ["created", "created", "merged"]
    assert result["ids"][2] == result["ids"][0]
    assert len(await list_all(client, tenant, agent_id="m")) == 2


async def test_messages_are_never_merged(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    said = {"agent_id": "chat", "messages": [{"speaker": "Ann", "content": "Sounds good, see you then!"}]}
    for _ in range(2):
        r = await client.post("/v1/conversations/c-merge/messages", json=said, headers=tenant.headers)
        assert r.status_code == 201, r.text
    r = await client.get("/v1/conversations/c-merge/messages", headers=tenant.headers)
    items = r.json()["items"]
    assert [m["position"] for m in items] == [1, 2] and items[0]["id"] != items[1]["id"]
    for memory_id in (items[0]["id"], items[1]["id"]):
        memory = (await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers)).json()
        assert memory["kind"] == "message" and memory.get("seen_count", 1) == 1, memory
    # the memory API does not write messages, so a message cannot be given a key to supersede
    r = await client.post("/v1/memories", json={"text": "x", "agent_id": "chat", "kind": "message",
                                                "key": "user.mood"}, headers=tenant.headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "reserved_kind", r.text


async def test_messages_are_never_deduplicated_or_superseded(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """Conversation turns are events: whatever the org's policy, a message is written as a message of its
    own, and a fact with the same words is not merged into one."""
    chat, h = "/v1/conversations/lisbon/messages", tenant.headers
    said = {"speaker": "Ann", "content": "I moved to Lisbon last week."}
    r = await client.post(chat, json={"agent_id": "chat", "messages": [
        said, said, {**said, "content": "i moved to lisbon last week"}]}, headers=h)
    assert r.status_code == 201 and len({m["id"] for m in r.json()["messages"]}) == 3, r.text
    first = r.json()["messages"][0]["id"]
    r = await client.patch("/v1/org/settings", json={"on_duplicate": "reject"}, headers=h)
    assert r.status_code == 200, r.text
    r = await client.post(chat, json={"agent_id": "chat", "messages": [said]}, headers=h)
    assert r.status_code == 201 and r.json()["messages"][0]["position"] == 4, r.text
    r = await client.patch("/v1/org/settings", json={"on_duplicate": "merge"}, headers=h)
    assert r.status_code == 200, r.text
    fact = await write(client, tenant, {"text": said["content"], "agent_id": "chat"})
    assert fact["items"][0]["status"] == "created" and fact["ids"][0] != first
    r = await client.get(f"/v1/memories/{first}", headers=h)
    assert r.status_code == 200 and r.json().get("superseded_by") is None, r.text


async def test_org_default_policy(client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    r = await client.get("/v1/org/settings", headers=tenant.headers)
    assert r.json()["on_duplicate"] == "merge"
    r = await client.patch("/v1/org/settings", json={"on_duplicate": "keep"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["on_duplicate"] == "keep"
    text = {"text": "Our wifi password changes monthly.", "agent_id": "it"}
    assert [(await write(client, tenant, text))["items"][0]["status"] for _ in range(2)] == ["created", "created"]
    # another org's default is its own
    assert (await client.get("/v1/org/settings", headers=other_tenant.headers)).json()["on_duplicate"] == "merge"
    assert [(await write(client, other_tenant, text))["items"][0]["status"] for _ in range(2)] == ["created", "merged"]
    # a request still chooses for itself
    assert (await write(client, tenant, {**text, "on_duplicate": "merge"}))["items"][0]["status"] == "merged"
    r = await client.patch("/v1/org/settings", json={"on_duplicate": "sometimes"}, headers=tenant.headers)
    assert r.status_code == 400


async def test_a_merge_is_undone(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (kept,) = (await write(client, tenant, {"text": "Sam is allergic to peanuts.", "agent_id": "s",
                                            "metadata": {"a": 1}}))["ids"]
    merged = (await write(client, tenant, {"text": "sam is allergic to peanuts", "agent_id": "s",
                                           "metadata": {"b": 2}}))["items"][0]
    assert merged["status"] == "merged"
    event = (await history(client, tenant, kept))[-1]
    r = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    restored = r.json()["restored"]
    assert restored and restored != kept
    listed = {m["id"]: m for m in await list_all(client, tenant, agent_id="s")}
    assert set(listed) == {kept, restored}
    assert listed[kept]["seen_count"] == 1 and listed[kept]["metadata"] == {"a": 1}
    assert listed[restored]["text"] == "sam is allergic to peanuts" and listed[restored]["metadata"] == {"b": 2}
    again = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={}, headers=tenant.headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_undone"
    events = await history(client, tenant, kept)
    assert [e["event"] for e in events] == ["created", "merged", "undone"]
    assert events[1]["undone_by"] == events[2]["id"] and events[2]["undoes"] == events[1]["id"]
    created = await client.post(f"/v1/memories/{kept}/history/{events[0]['id']}/undo", json={}, headers=tenant.headers)
    assert created.status_code == 422 and created.json()["error"]["code"] == "not_undoable"


async def test_concurrent_writers_of_one_fact_end_with_one_memory(client: AsyncTestClient[Any],
                                                                    tenant: Tenant) -> None:
    texts = ["Priya's flight lands at 9:40.", "priya's flight lands at 9:40", "PRIYA'S FLIGHT LANDS AT 9:40!"] * 3
    results = await asyncio.gather(*(write(client, tenant, {"text": t, "agent_id": "travel"}) for t in texts))
    statuses = sorted(r["items"][0]["status"] for r in results)
    assert statuses == ["created"] + ["merged"] * (len(texts) - 1)
    (memory,) = await list_all(client, tenant, agent_id="travel")
    assert memory["seen_count"] == len(texts)


async def test_patch_into_a_duplicate_merges(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (kept,) = (await write(client, tenant, {"text": "The meeting room is on floor two.", "agent_id": "p"}))["ids"]
    (other,) = (await write(client, tenant, {"text": "Lunch is served at noon.", "agent_id": "p"}))["ids"]
    r = await client.patch(f"/v1/memories/{other}", json={"text": "the meeting room is on floor two",
                                                         "on_duplicate": "reject"}, headers=tenant.headers)
    assert r.status_code == 409
    r = await client.patch(f"/v1/memories/{other}", json={"text": "the meeting room is on floor two"},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "merged" and r.json()["id"] == kept and r.json()["seen_count"] == 2
    assert (await client.get(f"/v1/memories/{other}", headers=tenant.headers)).status_code == 404
    assert [e["event"] for e in await history(client, tenant, other)] == ["created", "updated", "merged"]
    event = (await history(client, tenant, kept))[-1]
    r = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["restored"] == other  # back under its own id
    got = (await client.get(f"/v1/memories/{other}", headers=tenant.headers)).json()
    assert got["text"] == "the meeting room is on floor two"


async def test_history_of_deleted_and_erased_memories(client: AsyncTestClient[Any], tenant: Tenant,
                                                      other_tenant: Tenant) -> None:
    other_headers = other_tenant.headers
    (a,) = (await write(client, tenant, {"text": "Rosa likes jazz.", "agent_id": "r"}))["ids"]
    (b,) = (await write(client, tenant, {"text": "Rosa plays cello.", "agent_id": "r"}))["ids"]
    r = await client.patch(f"/v1/memories/{a}", json={"importance": 0.9}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["status"] == "updated"
    assert (await client.delete(f"/v1/memories/{a}", headers=tenant.headers)).status_code == 204
    events = await history(client, tenant, a)
    assert [e["event"] for e in events] == ["created", "updated", "deleted"]
    assert events[1]["detail"]["changes"] == {"importance": 0.9}
    # past the last event of a deleted memory's history: an empty page; of a memory unknown here: 404,
    # with a cursor as without one
    after_last = base64.urlsafe_b64encode(uuid.UUID(events[-1]["id"]).bytes).decode().rstrip("=")
    r = await client.get(f"/v1/memories/{a}/history", params={"cursor": after_last}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["items"] == [], r.text
    for unknown, headers in ((str(uuid.uuid4()), tenant.headers), (a, other_headers)):
        r = await client.get(f"/v1/memories/{unknown}/history", params={"cursor": after_last}, headers=headers)
        assert r.status_code == 404, r.text
    assert (await client.delete(f"/v1/memories/{b}?erase=true", headers=tenant.headers)).status_code == 204
    assert (await client.get(f"/v1/memories/{b}/history", headers=tenant.headers)).status_code == 404
    # a memory deleted before can still be erased: its history goes, once
    (c,) = (await write(client, tenant, {"text": "Rosa lives in Porto.", "agent_id": "q"}))["ids"]
    assert (await client.delete(f"/v1/memories/{c}", headers=tenant.headers)).status_code == 204
    assert (await client.delete(f"/v1/memories/{c}?erase=true", headers=tenant.headers)).status_code == 204
    assert (await client.get(f"/v1/memories/{c}/history", headers=tenant.headers)).status_code == 404
    assert (await client.delete(f"/v1/memories/{c}?erase=true", headers=tenant.headers)).status_code == 404
    r = await client.delete("/v1/memories", params={"agent_id": "r"}, headers=tenant.headers)
    assert r.status_code == 200
    assert (await client.get(f"/v1/memories/{a}/history", headers=tenant.headers)).status_code == 404


async def test_another_orgs_history_and_undo_answer_404(client: AsyncTestClient[Any], tenant: Tenant,
                                                       other_tenant: Tenant) -> None:
    (kept,) = (await write(client, tenant, {"text": "Ivan speaks Czech.", "agent_id": "i"}))["ids"]
    await write(client, tenant, {"text": "ivan speaks czech", "agent_id": "i"})
    event = (await history(client, tenant, kept))[-1]
    r = await client.get(f"/v1/memories/{kept}/history", headers=other_tenant.headers)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={},
                          headers=other_tenant.headers)
    assert r.status_code == 404
    assert (await client.delete(f"/v1/memories/{kept}", headers=tenant.headers)).status_code == 204
    r = await client.delete(f"/v1/memories/{kept}?erase=true", headers=other_tenant.headers)
    assert r.status_code == 404  # another org cannot erase the history a deleted memory left
    assert [e["event"] for e in await history(client, tenant, kept)][-1] == "deleted"
    assert (await history(client, tenant, kept))[-1]["undone_by"] is None
    # the other org writing the same text merges into nothing of ours
    theirs = (await write(client, other_tenant, {"text": "Ivan speaks Czech.", "agent_id": "i"}))["items"][0]
    assert theirs["status"] == "created" and theirs["id"] != kept

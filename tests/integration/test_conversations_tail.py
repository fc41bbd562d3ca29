"""Removing a conversation's last messages (``DELETE /v1/conversations/{id}/messages?from_position=``) and
reading it from the last back (``order=desc``), over HTTP on real Postgres + Redis: the tail and
everything derived from it go, positions stay gapless, a conditional removal refuses when an append came
in between, and appends racing a removal keep one order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.conversations import store
from service.conversations.handlers import POSITION_MAX
from tests.conftest import Tenant
from tests.integration.test_conversations import TURNS, all_messages, append
from tests.integration.test_memories_api import assert_error
from tests.integration.test_search_context import index_drift

URL = "/v1/conversations/{}/messages"


async def truncate(client: AsyncTestClient[Any], tenant: Tenant, conversation: str,
                   **params: Any) -> dict[str, Any]:
    r = await client.delete(URL.format(conversation), headers=tenant.headers, params=params)
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, dict)
    return body


async def test_removing_the_last_messages_takes_what_was_derived_from_them(
        client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    turns = [{**t, "content": t["content"] + f" marker{i}", "message_id": f"m{i}"} for i, t in enumerate(TURNS)]
    out = await append(client, tenant, "tail", turns, agent_id="coach")
    gone = [m["id"] for m in out["messages"][2:]]

    assert await truncate(client, tenant, "tail", from_position=3) == {
        "conversation_id": "tail", "messages_deleted": 2, "message_count": 2}
    assert [m["message_id"] for m in await all_messages(client, tenant, "tail")] == ["m0", "m1"]
    r = await client.get("/v1/conversations/tail", headers=tenant.headers)
    assert r.json()["message_count"] == 2 and r.json()["agent_id"] == "coach", r.text
    for memory_id in gone:
        assert_error(await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers), 404)
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "marker2 marker3", "strategy": "lexical"})
    assert r.json()["results"] == [], r.text
    assert set((await index_drift(owner_dsn, tenant)).values()) == {0}  # postings, df and lengths exact

    # the next append goes right after what is left; a removed message's id is free again
    again = await append(client, tenant, "tail", [turns[3], {"content": "And a new one."}])
    assert [(m["position"], m["created"]) for m in again["messages"]] == [(3, True), (4, True)]
    assert again["message_count"] == 4
    # nothing from a position past the end: nothing removed, the count as it is
    assert await truncate(client, tenant, "tail", from_position=9) == {
        "conversation_id": "tail", "messages_deleted": 0, "message_count": 4}
    assert await truncate(client, tenant, "tail", from_position=1) == {
        "conversation_id": "tail", "messages_deleted": 4, "message_count": 0}
    assert await all_messages(client, tenant, "tail") == []
    assert (await append(client, tenant, "tail", TURNS[:1]))["messages"][0]["position"] == 1


async def test_a_conditional_removal_refuses_a_conversation_that_changed(client: AsyncTestClient[Any],
                                                                        tenant: Tenant) -> None:
    await append(client, tenant, "cas", TURNS[:3])
    r = await client.delete(URL.format("cas"), headers=tenant.headers,
                            params={"from_position": 3, "message_count": 2})
    assert_error(r, 409, "conversation_changed")
    assert r.json()["error"]["details"] == {"message_count": 3}
    assert len(await all_messages(client, tenant, "cas")) == 3  # nothing removed
    assert await truncate(client, tenant, "cas", from_position=3, message_count=3) == {
        "conversation_id": "cas", "messages_deleted": 1, "message_count": 2}
    # its retry (the answer was lost): nothing from position 3 is left, so nothing to refuse
    assert await truncate(client, tenant, "cas", from_position=3, message_count=3) == {
        "conversation_id": "cas", "messages_deleted": 0, "message_count": 2}


async def test_a_removal_naming_another_agent_is_refused(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "theirs", TURNS[:3], agent_id="coach")
    await append(client, tenant, "everyones", TURNS[:2])
    for chat, agent, owner in (("theirs", "intruder", "coach"), ("everyones", "coach", None)):
        r = await client.delete(URL.format(chat), headers=tenant.headers,
                                params={"from_position": 1, "agent_id": agent})
        assert_error(r, 409, "conversation_agent_mismatch")
        assert r.json()["error"]["details"] == {"agent_id": owner}
    r = await client.delete(URL.format("theirs"), headers=tenant.headers, params={"from_position": 1, "agent_id": "x"})
    assert "belongs to agent 'coach', not agent 'x'" in r.json()["error"]["message"], r.text
    assert [len(await all_messages(client, tenant, c)) for c in ("theirs", "everyones")] == [3, 2]  # nothing removed
    assert await truncate(client, tenant, "theirs", from_position=3, agent_id="coach") == {
        "conversation_id": "theirs", "messages_deleted": 1, "message_count": 2}
    # the agent is part of the request an Idempotency-Key stands for
    headers = {**tenant.headers, "Idempotency-Key": "pop-owned"}
    first = await client.delete(URL.format("theirs"), headers=headers, params={"from_position": 2, "agent_id": "coach"})
    assert first.status_code == 200 and first.json()["messages_deleted"] == 1, first.text
    assert_error(await client.delete(URL.format("theirs"), headers=headers,
                                     params={"from_position": 2, "agent_id": "intruder"}),
                 409, "idempotency_key_reused")
    assert_error(await client.delete(URL.format("nobody"), headers=tenant.headers,
                                     params={"from_position": 1, "agent_id": "coach"}), 404, "conversation_not_found")
    assert_error(await client.delete(URL.format("theirs"), headers=tenant.headers,
                                     params={"from_position": 1, "agent_id": "not an id"}), 400)


async def test_bad_removals_are_clear_errors(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    assert_error(await client.delete(URL.format("nobody"), headers=tenant.headers, params={"from_position": 1}),
                 404, "conversation_not_found")
    await append(client, tenant, "bad", TURNS[:1])
    for params in ({}, {"from_position": 0}, {"from_position": -1}, {"from_position": "x"},
                   {"from_position": 2**70}, {"from_position": 1, "message_count": -1}):
        r = await client.delete(URL.format("bad"), headers=tenant.headers, params=params)
        assert r.status_code == 400, (params, r.text)
        assert "from_position" in r.text or "message_count" in r.text, r.text
    assert_error(await client.delete(URL.format("a b"), headers=tenant.headers, params={"from_position": 1}), 400)
    assert len(await all_messages(client, tenant, "bad")) == 1


async def test_a_long_tail_goes_in_batches_and_appends_racing_it_keep_one_order(
        client: AsyncTestClient[Any], tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "_DELETE_BATCH", 2)  # 7 batches for 13 messages
    await append(client, tenant, "long", [{"content": f"turn {n}", "message_id": f"t{n}"} for n in range(15)])
    assert await truncate(client, tenant, "long", from_position=3) == {
        "conversation_id": "long", "messages_deleted": 13, "message_count": 2}

    await append(client, tenant, "long", [{"content": f"again {n}"} for n in range(10)])

    async def one(n: int) -> None:
        await append(client, tenant, "long", [{"content": f"racing {n}"}])

    removal = asyncio.ensure_future(client.delete(URL.format("long"), headers=tenant.headers,
                                                  params={"from_position": 5}))
    await asyncio.gather(*(one(n) for n in range(6)))
    r = await removal
    assert r.status_code == 200, r.text
    listed = await all_messages(client, tenant, "long")
    count = (await client.get("/v1/conversations/long", headers=tenant.headers)).json()["message_count"]
    assert [m["position"] for m in listed] == list(range(1, count + 1))  # gapless, the count its last position
    assert [m["content"] for m in listed[:4]] == ["turn 0", "turn 1", "again 0", "again 1"]
    assert r.json()["message_count"] <= count


async def test_listing_from_the_last_message_back(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "back", TURNS)
    newest = await all_messages(client, tenant, "back", order="desc", limit=3)
    assert [m["position"] for m in newest] == [4, 3, 2, 1]
    r = await client.get(URL.format("back"), headers=tenant.headers, params={"order": "desc", "limit": 1})
    assert [m["content"] for m in r.json()["items"]] == [TURNS[3]["content"]] and r.json()["next_cursor"]
    assert [m["position"] for m in await all_messages(client, tenant, "back", order="desc", session_id="s1")] == [
        3, 2, 1]
    assert_error(await client.get(URL.format("back"), headers=tenant.headers, params={"order": "newest"}), 400)
    assert_error(await client.get(URL.format("nobody"), headers=tenant.headers, params={"order": "desc"}), 404)


async def test_a_removal_conditional_on_the_last_message_refuses_one_appended_in_its_place(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "aba", TURNS[:3])
    read = (await client.get(URL.format("aba"), headers=tenant.headers,
                             params={"order": "desc", "limit": 1})).json()["items"][0]
    # meanwhile another client takes that message back and a new one lands at its position: the count
    # is what was read, the last message is not
    await truncate(client, tenant, "aba", from_position=3)
    await append(client, tenant, "aba", [{"content": "A new last turn."}])
    r = await client.delete(URL.format("aba"), headers=tenant.headers,
                            params={"from_position": read["position"], "message_count": read["position"],
                                    "last_id": read["id"]})
    assert_error(r, 409, "conversation_changed")
    assert r.json()["error"]["details"] == {"message_count": 3}
    assert [m["content"] for m in await all_messages(client, tenant, "aba")][-1] == "A new last turn."
    last = (await all_messages(client, tenant, "aba", order="desc", limit=1))[0]
    assert await truncate(client, tenant, "aba", from_position=3, last_id=last["id"]) == {
        "conversation_id": "aba", "messages_deleted": 1, "message_count": 2}
    # nothing left from the position: nothing to refuse, whatever the condition
    assert await truncate(client, tenant, "aba", from_position=3, last_id=last["id"]) == {
        "conversation_id": "aba", "messages_deleted": 0, "message_count": 2}
    assert_error(await client.delete(URL.format("aba"), headers=tenant.headers,
                                     params={"from_position": 1, "last_id": "not-a-uuid"}), 400)


async def test_a_retried_removal_under_its_idempotency_key_gets_the_first_answer(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "idem", TURNS)
    headers = {**tenant.headers, "Idempotency-Key": "pop-1"}
    first = await client.delete(URL.format("idem"), headers=headers, params={"from_position": 4, "message_count": 4})
    assert first.status_code == 200 and first.json()["messages_deleted"] == 1, first.text
    again = await client.delete(URL.format("idem"), headers=headers, params={"from_position": 4, "message_count": 4})
    assert again.json() == first.json() and again.headers.get("Idempotent-Replayed") == "true", again.text
    # a removal of the same position under another key (another client's) is told nothing went
    assert await truncate(client, tenant, "idem", from_position=4, message_count=4) == {
        "conversation_id": "idem", "messages_deleted": 0, "message_count": 3}
    assert_error(await client.delete(URL.format("idem"), headers=headers, params={"from_position": 3}), 409,
                 "idempotency_key_reused")
    assert len(await all_messages(client, tenant, "idem")) == 3


async def test_the_schema_states_the_bounds_a_removal_enforces(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    operation = schema["paths"][URL.format("{conversation_id}")]["delete"]
    parameters = {p["name"]: p["schema"] for p in operation["parameters"]}
    for name, least in (("from_position", 1), ("message_count", 0)):
        assert (parameters[name].get("minimum"), parameters[name].get("maximum")) == (least, POSITION_MAX), name
    assert float(POSITION_MAX + 1) > POSITION_MAX  # a validator reading JSON numbers as doubles tells the two apart
    await append(client, tenant, "bounds", TURNS[:1])
    for name, least in (("from_position", 1), ("message_count", 0)):
        given = {"from_position": 2, name: POSITION_MAX}  # nothing from 2: nothing to refuse
        assert (await client.delete(URL.format("bounds"), headers=tenant.headers, params=given)).status_code == 200
        for value in (least - 1, POSITION_MAX + 1):
            r = await client.delete(URL.format("bounds"), headers=tenant.headers, params={**given, name: value})
            assert_error(r, 400)


async def test_a_retried_delete_under_its_idempotency_key_gets_the_first_answer(client: AsyncTestClient[Any],
                                                                                tenant: Tenant) -> None:
    await append(client, tenant, "retried", TURNS[:3])
    await append(client, tenant, "other", TURNS[:1])
    headers = {**tenant.headers, "Idempotency-Key": "delete-retried-1"}
    first = await client.delete("/v1/conversations/retried", headers=headers)
    assert first.status_code == 200 and first.json()["messages_deleted"] == 3, first.text
    again = await client.delete("/v1/conversations/retried", headers=headers)  # its answer was lost: retried
    # once: 404 conversation_not_found, which a client retrying after a broken connection took for an error
    assert again.status_code == 200 and again.json() == first.json(), again.text
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert_error(await client.delete("/v1/conversations/retried", headers=tenant.headers), 404)  # no key: gone
    assert_error(await client.delete("/v1/conversations/other", headers=headers), 409, "idempotency_key_reused")
    assert len(await all_messages(client, tenant, "other")) == 1

"""The conversation API over HTTP on real Postgres + Redis: append in order, idempotent by
``message_id``, concurrent appends totally ordered, sessions, listing with cursors, the owning agent,
messages searchable as memories of kind ``message`` with their place in the conversation, read-only
through /v1/memories, and a delete that takes everything derived from the conversation along."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from uuid import UUID

import asyncpg
from litestar.testing import AsyncTestClient

from service.db.queries import query
from tests.conftest import Tenant
from tests.integration.test_memories_api import assert_error
from tests.integration.test_search_context import index_drift

TURNS = [
    {"speaker": "Melanie", "content": "What do you do to unwind after a long week?", "session_id": "s1"},
    {"speaker": "Caroline", "content": "I'm off to go swimming with the kids.", "session_id": "s1"},
    {"speaker": "Melanie", "content": "That sounds lovely. I paint sunsets on Sundays.", "session_id": "s1"},
    {"speaker": "Caroline", "content": "I adopted a puppy named Oscar last week!", "session_id": "s2"},
]


ROLE_CHAT = [{"role": "user", "content": "My sister relocated to Oslo last spring."},
             {"role": "assistant", "content": "Where did your sister move from? Sisters who move abroad often "
                                              "move for work."},
             *({"role": "user" if n % 2 else "assistant", "content": f"Where to put the couch after the move, day {n}."}
               for n in range(8))]
"""An agent's chat, written with roles: the user's turn (first) says where the sister moved; the assistant's
reply (second) holds more of the words of "Where did my sister move?"."""


async def append(client: AsyncTestClient[Any], tenant: Tenant, conversation: str, messages: list[dict[str, Any]],
                 **extra: Any) -> dict[str, Any]:
    r = await client.post(f"/v1/conversations/{conversation}/messages", headers=tenant.headers,
                          json={"messages": messages, **extra})
    assert r.status_code == 201, r.text
    body = r.json()
    assert isinstance(body, dict)
    return body


async def all_messages(client: AsyncTestClient[Any], tenant: Tenant, conversation: str,
                       **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        r = await client.get(f"/v1/conversations/{conversation}/messages", headers=tenant.headers,
                             params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            return items


async def search_contexts(client: AsyncTestClient[Any], tenant: Tenant, out: dict[str, Any]) -> list[str | None]:
    contexts = []
    for m in out["messages"]:
        r = await client.get(f"/v1/memories/{m['id']}", headers=tenant.headers)
        assert r.status_code == 200, r.text
        contexts.append(r.json()["search_context"])
    return contexts


async def test_append_list_and_get(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    out = await append(client, tenant, "chat-1", TURNS[:2], agent_id="coach")
    assert out["created"] is True and out["agent_id"] == "coach" and out["message_count"] == 2
    assert [m["position"] for m in out["messages"]] == [1, 2] and all(m["created"] for m in out["messages"])
    out = await append(client, tenant, "chat-1", TURNS[2:])
    assert out["created"] is False and out["agent_id"] == "coach" and out["message_count"] == 4
    assert [m["position"] for m in out["messages"]] == [3, 4]

    listed = await all_messages(client, tenant, "chat-1", limit=3)
    assert [(m["position"], m["speaker"], m["content"], m["session_id"]) for m in listed] == [
        (i + 1, t["speaker"], t["content"], t["session_id"]) for i, t in enumerate(TURNS)]
    assert [m["position"] for m in await all_messages(client, tenant, "chat-1", session_id="s2")] == [4]

    r = await client.get("/v1/conversations/chat-1", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["message_count"] == 4 and r.json()["agent_id"] == "coach", r.text
    # a message is a memory of kind message, of the conversation's agent, read-only through /v1/memories
    memory_id = out["messages"][1]["id"]
    r = await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["kind"] == "message" and r.json()["agent_id"] == "coach", r.text
    assert r.json()["text"] == TURNS[3]["content"] and r.json()["search_context"] is None  # a new session
    place = {"conversation_id": "chat-1", "position": 4, "session_id": "s2", "speaker": TURNS[3]["speaker"],
             "role": None, "message_id": None}
    assert r.json()["message"] == place, r.text  # where it stands, as a search result says
    listed_memories = (await client.get("/v1/memories", headers=tenant.headers, params={
        "agent_id": "coach", "kind": "message"})).json()["items"]
    assert {m["id"]: m["message"] for m in listed_memories}[memory_id] == place
    assert_error(await client.patch(f"/v1/memories/{memory_id}", headers=tenant.headers, json={"text": "changed"}),
                 409, "managed_by_conversations")
    assert_error(await client.delete(f"/v1/memories/{memory_id}", headers=tenant.headers),
                 409, "managed_by_conversations")
    assert_error(await client.post("/v1/memories", headers=tenant.headers, json={"text": "x", "kind": "message"}),
                 400, "reserved_kind")


async def test_message_ids_make_appends_idempotent(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    batch = [{**t, "message_id": f"m{i}"} for i, t in enumerate(TURNS[:3])]
    first = await append(client, tenant, "idem", batch[:2])
    again = await append(client, tenant, "idem", batch)  # a retry with one more message
    assert [m["created"] for m in again["messages"]] == [False, False, True]
    assert [m["id"] for m in again["messages"][:2]] == [m["id"] for m in first["messages"]]
    assert [m["position"] for m in again["messages"]] == [1, 2, 3] and again["message_count"] == 3
    assert len(await all_messages(client, tenant, "idem")) == 3
    changed = [{**batch[0], "content": "Something else entirely."}]
    r = await client.post("/v1/conversations/idem/messages", headers=tenant.headers, json={"messages": changed})
    assert_error(r, 409, "message_id_reused")
    r = await client.post("/v1/conversations/idem/messages", headers=tenant.headers,
                          json={"messages": [batch[0], batch[0]]})
    assert_error(r, 422, "duplicate_message_id")
    assert len(await all_messages(client, tenant, "idem")) == 3


async def test_an_idempotency_key_makes_a_retry_of_messages_without_ids_write_nothing(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    body = {"agent_id": "coach", "messages": [{"speaker": "Ann", "content": "Book the 7am class."}]}
    headers = {**tenant.headers, "Idempotency-Key": "turn-17"}
    first = await client.post("/v1/conversations/keyed/messages", headers=headers, json=body)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers, first.text
    again = await client.post("/v1/conversations/keyed/messages", headers=headers,
                              json={"messages": body["messages"], "agent_id": "coach"})  # keys in another order
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true", again.text
    assert again.json() == first.json()
    assert [m["content"] for m in await all_messages(client, tenant, "keyed")] == ["Book the 7am class."]

    other = {"agent_id": "coach", "messages": [{"speaker": "Ann", "content": "Book the 8am class."}]}
    assert_error(await client.post("/v1/conversations/keyed/messages", headers=headers, json=other),
                 409, "idempotency_key_reused")
    assert_error(await client.post("/v1/conversations/elsewhere/messages", headers=headers, json=body),
                 409, "idempotency_key_reused")  # bound to its conversation too
    assert_error(await client.post("/v1/conversations/keyed/messages", json=body,
                                   headers={**tenant.headers, "Idempotency-Key": "k" * 201}), 400, "validation_error")
    assert [m["content"] for m in await all_messages(client, tenant, "keyed")] == ["Book the 7am class."]


async def test_a_resent_message_keeps_its_stored_time_and_metadata(client: AsyncTestClient[Any],
                                                                    tenant: Tenant) -> None:
    sent = {**TURNS[0], "message_id": "m0", "occurred_at": "2026-03-02T08:30:00Z", "metadata": {"channel": "sms"}}
    first = await append(client, tenant, "resent-meta", [sent])
    again = await append(client, tenant, "resent-meta", [{**sent, "occurred_at": "2026-03-09T10:00:00Z",
                                                          "metadata": {"channel": "email"}}])
    assert again["messages"] == [first["messages"][0] | {"created": False}]
    [stored] = await all_messages(client, tenant, "resent-meta")
    assert stored["occurred_at"] == "2026-03-02T08:30:00Z" and stored["metadata"] == {"channel": "sms"}
    # nothing of an append is written when one of its messages reuses a message_id with other words
    r = await client.post("/v1/conversations/resent-meta/messages", headers=tenant.headers, json={"messages": [
        {"content": "A new turn."}, {**sent, "content": "Other words."}]})
    assert_error(r, 409, "message_id_reused")
    assert len(await all_messages(client, tenant, "resent-meta")) == 1


async def test_concurrent_appends_keep_one_order(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    writers, each = 8, 3

    async def writer(w: int) -> list[dict[str, Any]]:
        sent = []
        for j in range(each):
            message = {"role": "user", "content": f"writer {w} message {j}", "message_id": f"w{w}-{j}"}
            out = await append(client, tenant, "busy", [message, {**message, "message_id": f"w{w}-{j}b"}])
            sent += out["messages"]
        return sent

    results = await asyncio.gather(*(writer(w) for w in range(writers)))
    # the same messages again, concurrently: nothing is written twice
    await asyncio.gather(*(append(client, tenant, "busy", [{"role": "user", "content": f"writer {w} message 0",
                                                             "message_id": f"w{w}-0"}]) for w in range(writers)))
    listed = await all_messages(client, tenant, "busy", limit=7)
    assert [m["position"] for m in listed] == list(range(1, writers * each * 2 + 1))
    by_writer: dict[int, list[int]] = {}
    for m in listed:
        by_writer.setdefault(int(m["content"].split()[1]), []).append(m["position"])
    for w, sent in enumerate(results):
        # each writer's appends are in the order it made them, each batch contiguous
        assert [m["position"] for m in sent] == by_writer[w]
        assert all(b["position"] == a["position"] + 1 for a, b in zip(sent[::2], sent[1::2], strict=True))


async def test_the_first_append_sets_the_agent(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "owned", TURNS[:1], agent_id="coach")
    for agent in ("someone-else", None):
        r = await client.post("/v1/conversations/owned/messages", headers=tenant.headers,
                              json={"messages": TURNS[1:2], "agent_id": agent})
        assert_error(r, 409, "conversation_agent_mismatch")
    out = await append(client, tenant, "org-wide", TURNS[:1])
    assert out["agent_id"] is None
    assert_error(await client.post("/v1/conversations/org-wide/messages", headers=tenant.headers,
                                   json={"messages": TURNS[1:2], "agent_id": "coach"}), 409,
                 "conversation_agent_mismatch")
    r = await client.get("/v1/conversations", headers=tenant.headers, params={"agent_id": "coach"})
    assert [c["id"] for c in r.json()["items"]] == ["owned"] and r.json()["items"][0]["message_count"] == 1


async def test_list_conversations_pages(client: AsyncTestClient[Any], make_tenant: Any) -> None:
    tenant = await make_tenant("pages")
    for i in range(5):
        await append(client, tenant, f"c{i}", TURNS[:1], agent_id="a" if i % 2 else None)
    seen, cursor = [], None
    while True:
        r = await client.get("/v1/conversations", headers=tenant.headers,
                             params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        seen += [c["id"] for c in r.json()["items"]]
        if (cursor := r.json()["next_cursor"]) is None:
            break
    assert seen == [f"c{i}" for i in reversed(range(5))]
    assert_error(await client.get("/v1/conversations", headers=tenant.headers, params={"cursor": "nope"}),
                 400, "bad_cursor")


async def test_delete_takes_everything_derived_along(client: AsyncTestClient[Any], tenant: Tenant,
                                                    owner_dsn: str) -> None:
    out = await append(client, tenant, "gone", [{**t, "content": t["content"] + " zebracorn"} for t in TURNS])
    kept = await append(client, tenant, "kept", TURNS[:2])
    ids = [m["id"] for m in out["messages"]]
    r = await client.post("/v1/memories/feedback", headers=tenant.headers, json={"memory_ids": ids, "helpful": True})
    assert r.status_code == 200, r.text
    conn = await asyncpg.connect(owner_dsn)
    try:  # as if assemblies had packed them: access statistics derived from the messages
        await conn.execute("INSERT INTO memory_access (org_id, memory_id, access_count, last_accessed_at) "
                           "SELECT $1, unnest($2::uuid[]), 3, now()", tenant.org_id, ids)
    finally:
        await conn.close()
    r = await client.delete("/v1/conversations/gone", headers=tenant.headers)
    assert r.status_code == 200 and r.json() == {"conversation_id": "gone", "messages_deleted": 4}, r.text
    assert_error(await client.get("/v1/conversations/gone", headers=tenant.headers), 404, "conversation_not_found")
    assert_error(await client.get("/v1/conversations/gone/messages", headers=tenant.headers), 404)
    assert_error(await client.delete("/v1/conversations/gone", headers=tenant.headers), 404)
    for memory_id in ids:
        assert_error(await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers), 404)
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "zebracorn", "strategy": "lexical"})
    assert r.json()["results"] == []
    assert set((await index_drift(owner_dsn, tenant)).values()) == {0}  # postings, df and lengths exact
    conn = await asyncpg.connect(owner_dsn)
    try:
        left = await conn.fetchval("SELECT count(*) FROM memories WHERE org_id = $1 AND conversation_id = 'gone'",
                                   tenant.org_id)
        accesses = await conn.fetchval("SELECT count(*) FROM memory_access WHERE org_id = $1 AND "
                                       "memory_id = ANY($2::uuid[])", tenant.org_id, ids)
    finally:
        await conn.close()
    assert left == 0 and accesses == 0
    assert len(await all_messages(client, tenant, "kept")) == len(kept["messages"])
    # the same id starts a new conversation from position 1
    assert [m["position"] for m in (await append(client, tenant, "gone", TURNS[:1]))["messages"]] == [1]


async def test_a_delete_naming_another_agent_is_refused(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "owned-chat", TURNS[:2], agent_id="coach")
    await append(client, tenant, "org-chat", TURNS[:1])
    for chat, agent, owner in (("owned-chat", "intruder", "coach"), ("org-chat", "coach", None)):
        r = await client.delete(f"/v1/conversations/{chat}", headers=tenant.headers, params={"agent_id": agent})
        assert_error(r, 409, "conversation_agent_mismatch")
        assert r.json()["error"]["details"] == {"agent_id": owner}
    assert [len(await all_messages(client, tenant, c)) for c in ("owned-chat", "org-chat")] == [2, 1]
    headers = {**tenant.headers, "Idempotency-Key": "delete-owned"}
    first = await client.delete("/v1/conversations/owned-chat", headers=headers, params={"agent_id": "coach"})
    assert first.status_code == 200 and first.json()["messages_deleted"] == 2, first.text
    again = await client.delete("/v1/conversations/owned-chat", headers=headers, params={"agent_id": "coach"})
    assert again.json() == first.json() and again.headers.get("Idempotent-Replayed") == "true", again.text
    # the agent is part of the request the key stands for
    assert_error(await client.delete("/v1/conversations/owned-chat", headers=headers, params={"agent_id": "x"}),
                 409, "idempotency_key_reused")
    r = await client.delete("/v1/conversations/org-chat", headers=tenant.headers)  # no agent named: no check
    assert r.status_code == 200 and r.json()["messages_deleted"] == 1, r.text


async def test_messages_stay_out_of_hot_sets(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", headers=tenant.headers,
                          json={"text": "The coach's standing rule: warm up first.", "agent_id": "hot-coach",
                                "pinned": True})
    assert r.status_code == 201, r.text
    out = await append(client, tenant, "hot-chat", TURNS, agent_id="hot-coach")
    r = await client.get("/v1/memories/hot", headers=tenant.headers, params={"agent_id": "hot-coach"})
    hot = {m["id"] for m in r.json()["items"]}
    assert r.json()["items"][0]["pinned"] and not hot & {m["id"] for m in out["messages"]}
    # an agent whose only memories are messages gets the org-wide hot set
    await append(client, tenant, "only-chat", TURNS[:1], agent_id="chatty")
    r = await client.get("/v1/memories/hot", headers=tenant.headers, params={"agent_id": "chatty"})
    assert r.status_code == 200 and all(m["kind"] != "message" for m in r.json()["items"])


async def test_erasing_an_agent_removes_its_conversations(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await append(client, tenant, "coach-chat", TURNS, agent_id="coach")
    await append(client, tenant, "other-chat", TURNS[:1], agent_id="other")
    r = await client.delete("/v1/memories", headers=tenant.headers, params={"agent_id": "coach"})
    assert r.status_code == 200 and r.json()["deleted"] == 4, r.text
    assert_error(await client.get("/v1/conversations/coach-chat", headers=tenant.headers), 404)
    assert (await client.get("/v1/conversations/other-chat", headers=tenant.headers)).status_code == 200


async def held_until_waited_on(conn: asyncpg.Connection, what: str) -> None:
    """Returns once another session waits for a lock ``conn``'s transaction holds (which then commits)."""
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
    for _ in range(2000):
        if await conn.fetchval(waiting, conn.get_server_pid()):
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{what} never waited")

def _append_under_way(owner_dsn: str, org_id: UUID, holding: threading.Event) -> None:
    """An append of a third message to "racing", caught half-way: it holds the conversation's row and has
    written its message, and commits once another session waits for it (on a thread and loop of its own:
    the test client runs a request to its end before its caller's loop goes on)."""
    async def run() -> None:
        conn = await asyncpg.connect(owner_dsn)
        try:
            async with conn.transaction():
                await conn.fetchrow(query("conversations.open"), org_id, "racing", None)
                await conn.execute(
                    "INSERT INTO memories (org_id, id, kind, text, embedding, conversation_id, position, message_id) "
                    "SELECT org_id, pgcontext_uuidv7(), kind, 'A late turn.', embedding, conversation_id, 3, 'late' "
                    "  FROM memories WHERE org_id = $1 AND conversation_id = 'racing' AND position = 1", org_id)
                await conn.execute(query("conversations.advance"), org_id, "racing", 3)
                holding.set()
                await held_until_waited_on(conn, "the delete")
        finally:
            await conn.close()

    asyncio.run(run())


async def test_a_delete_counts_the_messages_an_append_racing_it_wrote(client: AsyncTestClient[Any], tenant: Tenant,
                                                                      owner_dsn: str) -> None:
    await append(client, tenant, "racing", TURNS[:2])
    holding = threading.Event()
    racer = asyncio.get_running_loop().run_in_executor(None, _append_under_way, owner_dsn, tenant.org_id, holding)
    assert await asyncio.to_thread(holding.wait, 30)
    r = await client.delete("/v1/conversations/racing", headers=tenant.headers)
    await racer
    assert r.status_code == 200 and r.json() == {"conversation_id": "racing", "messages_deleted": 3}, r.text

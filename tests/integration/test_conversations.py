"""The conversation API over HTTP on real Postgres + Redis: append in order, idempotent by
``message_id``, concurrent appends totally ordered, sessions, listing with cursors, the owning agent,
messages searchable as memories of kind ``message`` with their place in the conversation, read-only
through /v1/memories, and a delete that takes everything derived from the conversation along."""

from __future__ import annotations

import asyncio
import base64
import re
import threading
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.db.queries import query
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
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
    assert_error(await client.patch(f"/v1/memories/{memory_id}", headers=tenant.headers, json={"text": "changed"}),
                 409, "managed_by_conversations")
    assert_error(await client.delete(f"/v1/memories/{memory_id}", headers=tenant.headers),
                 409, "managed_by_conversations")
    assert_error(await client.post("/v1/memories", headers=tenant.headers, json={"text": "x", "kind": "message"}),
                 400, "reserved_kind")


async def test_search_context_is_derived_from_the_same_sessions_turns(client: AsyncTestClient[Any],
                                                                        tenant: Tenant) -> None:
    out = await append(client, tenant, "derived", TURNS)
    assert await search_contexts(client, tenant, out) == [
        None, "Melanie: What do you do to unwind after a long week?",
        "Melanie: What do you do to unwind after a long week?\nCaroline: I'm off to go swimming with the kids.", None]
    # the question's words find the reply through its context (lexically), and the result says
    # where the message stands and who said it
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "unwind after a long week", "strategy": "lexical"})
    hits = {h["id"]: h for h in r.json()["results"]}
    reply = hits[out["messages"][1]["id"]]
    assert reply["kind"] == "message" and reply["message"] == {
        "conversation_id": "derived", "position": 2, "session_id": "s1", "speaker": "Caroline", "role": None,
        "message_id": None}


async def test_search_context_is_the_previous_turns_of_the_same_session(client: AsyncTestClient[Any],
                                                                         tenant: Tenant) -> None:
    def said(who: str, words: str, session: str | None) -> dict[str, Any]:
        return {"speaker": who, "content": words, **({"session_id": session} if session else {})}

    a1, b1, a2, n1, a3 = (said("Ann", "a one", "A"), said("Bo", "b one", "B"), said("Ann", "a two", "A"),
                          said("Nia", "n one", None), said("Ann", "a three", "A"))
    first = await append(client, tenant, "interleaved", [a1, b1, a2, n1, a3])
    assert await search_contexts(client, tenant, first) == [None, None, "Ann: a one", None, "Ann: a one\nAnn: a two"]
    # across appends: the session's last turns, however many turns of other sessions came since
    b2, n2, a4 = said("Bo", "b two", "B"), said("Nia", "n two", None), said("Ann", "a four", "A")
    later = await append(client, tenant, "interleaved", [b2, b2 | {"content": "b three"}, n2, a4])
    assert await search_contexts(client, tenant, later) == [
        "Bo: b one", "Bo: b one\nBo: b two", "Nia: n one", "Ann: a two\nAnn: a three"]


async def test_the_session_turns_query_reads_an_index_in_a_long_conversation(tenant: Tenant,
                                                                              owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("INSERT INTO conversations (org_id, id) VALUES ($1, 'long')", tenant.org_id)
        await conn.execute(
            "INSERT INTO memories (org_id, id, kind, text, conversation_id, position, session_id) "
            "SELECT $1, pgcontext_uuidv7(), 'message', 'turn ' || n, 'long', n, "
            "       CASE WHEN n % 50 = 0 THEN NULL ELSE 's' || (n % 7) END "
            "  FROM generate_series(1, 5000) AS n", tenant.org_id)
        await conn.execute("ANALYZE memories")
        for mode in ("force_custom_plan", "force_generic_plan"):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL plan_cache_mode = {mode}")
                await conn.execute(f"PREPARE turns AS {query('conversations.session_turns')}")
                plan = "\n".join(r[0] for r in await conn.fetch(
                    f"EXPLAIN EXECUTE turns('{tenant.org_id}', 'long', ARRAY['s1', 's2'], true, 2)"))
                await conn.execute("DEALLOCATE turns")
            # each session's turns, and those without a session, straight from the session index's end
            assert plan.count("Index Scan Backward using memories_conversation_session") == 2, (mode, plan)
            assert "Seq Scan" not in plan and "Filter: (session_id" not in plan, (mode, plan)
    finally:
        await conn.close()


async def test_fusion_boosts_the_messages_of_the_speaker_a_query_names(client: AsyncTestClient[Any],
                                                                            tenant: Tenant) -> None:
    turns = [{"speaker": "Melanie", "content": "Caroline, your painting of the lake is wonderful!"},
             {"speaker": "Caroline", "content": "Thanks! I paint landscapes most weekends."},
             {"speaker": "Melanie", "content": "I only paint pottery, never landscapes."},
             *({"speaker": "Melanie" if n % 2 else "Caroline", "content": f"Unrelated chat about the weather, day {n}."}
               for n in range(8))]
    out = await append(client, tenant, "painters", turns)
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "What does Caroline paint?", "strategy": "hybrid", "limit": 5})
    assert r.status_code == 200, r.text
    body = r.json()  # hybrid, fused as auto fuses (z-scores with the speaker boost)
    assert "said by someone the query names (speaker or metadata.speaker)" in body["reason"], body["reason"]
    assert body["results"][0]["id"] == out["messages"][1]["id"]
    assert body["results"][0]["message"]["speaker"] == "Caroline"
    # the three painting turns are neighbours: each also scores with the window around it
    assert re.search(r"; [1-9]\d* messages \+0\.15 of their best neighbour's score", body["reason"]), body["reason"]


async def test_a_query_in_the_first_or_second_person_ranks_up_that_sides_messages(client: AsyncTestClient[Any],
                                                                     tenant: Tenant) -> None:
    out = await append(client, tenant, "sisters", ROLE_CHAT)
    query = {"query": "Where did my sister move?", "strategy": "auto", "limit": 5}
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={**query, "tuning": {"speaker_boost": 0}})
    assert r.status_code == 200, r.text
    assert r.json()["results"][0]["id"] == out["messages"][1]["id"]  # without the boost: the reply
    r = await client.post("/v1/memories/search", headers=tenant.headers, json=query)
    assert r.status_code == 200, r.text
    body = r.json()
    assert "asked in the first person: " in body["reason"], body["reason"]
    assert body["results"][0]["id"] == out["messages"][0]["id"]
    assert body["results"][0]["message"]["role"] == "user"
    # asked about someone else, the user's turns are not favoured
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={**query, "query": "Where did her sister move?"})
    assert "person" not in r.json()["reason"], r.json()["reason"]
    # asked about what the other side said, the assistant's are
    for other in ("Where did your sister move?", "Where did you say my sister would move?"):
        r = await client.post("/v1/memories/search", headers=tenant.headers, json={**query, "query": other})
        assert "asked in the second person: " in r.json()["reason"], (other, r.json()["reason"])
        assert "messages of other roles than assistant" in r.json()["reason"], (other, r.json()["reason"])
        assert r.json()["results"][0]["id"] == out["messages"][1]["id"], other
    # the request says whose the first person is: nobody's, or the assistant's (the agent asking)
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={**query, "tuning": {"first_person": None}})
    assert "first person" not in r.json()["reason"]
    assert r.json()["results"][0]["id"] == out["messages"][1]["id"]
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={**query, "tuning": {"first_person": "assistant"}})
    assert "messages of other roles than assistant" in r.json()["reason"], r.json()["reason"]
    assert r.json()["results"][0]["id"] == out["messages"][1]["id"]
    assert_error(await client.post("/v1/memories/search", headers=tenant.headers,
                                   json={**query, "tuning": {"first_person": "tool"}}), 400, "validation_error")


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


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"messages": []}, 400, None),
    ({"messages": [{"content": "   "}]}, 400, None),
    ({"messages": [{"content": "x", "role": "narrator"}]}, 400, None),
    ({"messages": [{"content": "x", "speaker": "two\nlines"}]}, 400, None),
    ({"messages": [{"content": "x", "speaker": "  "}]}, 400, None),
    *(({"messages": [{"content": "x", "speaker": bad}]}, 400, "validation_error") for bad in (
        "Dana\u2028Evil", "Dana\u2029Evil", "Dana\u0085Evil", "Dana\x7f", "\u200b", "\u202e", "Dana\u202eliveD",
        "\ufeffDana", "\u3000", "Dana\t")),
    ({"messages": [{"content": "x", "session_id": ".."}]}, 400, "validation_error"),
    ({"messages": [{"content": "x", "message_id": "."}]}, 400, "validation_error"),
    ({"messages": [{"content": "x", "message_id": "has space"}]}, 400, None),
    ({"messages": [{"content": "x", "session_id": "s" * 201}]}, 400, None),
    ({"messages": [{"content": "x", "occurred_at": "2024-05-01T14:30:00"}]}, 400, None),
    ({"messages": [{"content": "x", "occurred_at": "0999-05-01T14:30:00Z"}]}, 400, None),
    ({"messages": [{"content": "x", "metadata": {"k": "v" * 20_000}}]}, 413, "metadata_too_large"),
    ({"messages": [{"content": "x" * 40_000}]}, 413, "text_too_long"),
    ({"messages": [{"content": "x"}] * 257}, 413, "batch_too_large"),
    ({"messages": [{"content": "x"}], "extra": 1}, 400, None),
])
async def test_bad_appends_answer_4xx_and_write_nothing(client: AsyncTestClient[Any], tenant: Tenant,
                                                       body: dict[str, Any], status: int, code: str | None) -> None:
    r = await client.post("/v1/conversations/bad/messages", headers=tenant.headers, json=body)
    assert_error(r, status, code)
    assert_error(await client.get("/v1/conversations/bad", headers=tenant.headers), 404, "conversation_not_found")


@pytest.mark.parametrize("conversation", ["has space", "x" * 201, "new%0Aline", "%2E", "%2E%2E", "..."])
async def test_bad_conversation_ids_answer_400(client: AsyncTestClient[Any], tenant: Tenant, conversation: str) -> None:
    r = await client.post(f"/v1/conversations/{conversation}/messages", headers=tenant.headers,
                          json={"messages": TURNS[:1]})
    assert_error(r, 400, "validation_error")
    for method in ("GET", "DELETE"):
        assert_error(await client.request(method, f"/v1/conversations/{conversation}", headers=tenant.headers), 400)
    assert_error(await client.get(f"/v1/conversations/{conversation}/messages", headers=tenant.headers), 400)


async def test_ids_of_dots_only_are_refused_wherever_a_conversation_or_session_is_named(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    # "." and ".." are path segments every HTTP client resolves away: such a conversation could not be reached
    await append(client, tenant, "dots", TURNS[:1])
    assert_error(await client.get("/v1/conversations/dots/messages", headers=tenant.headers,
                                  params={"session_id": ".."}), 400, "validation_error")
    r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
        "query": "anything", "model": "gpt-4o", "max_context_tokens": 1000, "conversation_id": ".."})
    assert_error(r, 400, "validation_error")
    schema = (await client.get("/schema/openapi.json")).json()
    pattern = next(p["schema"]["pattern"] for p in schema["paths"]["/v1/conversations/{conversation_id}"]["get"][
        "parameters"] if p["name"] == "conversation_id")
    assert re.search(pattern, "a.b") and not re.search(pattern, "..") and not re.search(pattern, ".")


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


PETS = [{"speaker": "Caroline", "content": f"My puppy Oscar learned trick number {n} today: {trick}."}
        for n, trick in enumerate(["sit", "roll over", "play dead", "shake paws", "fetch the ball", "spin"], start=1)]


async def test_assembly_leaves_out_the_turns_the_model_already_sees(settings: Settings, endpoints: Endpoints,
                                                                    embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await leaves_out_the_turns_the_model_already_sees(client, tenant)


async def leaves_out_the_turns_the_model_already_sees(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    chat = await append(client, tenant, "pets", PETS, agent_id="pal")
    earlier = {"speaker": "Caroline", "content": "Oscar the puppy can high-five now, his first trick of all."}
    other = await append(client, tenant, "pets-before", [earlier], agent_id="pal")
    ids = [m["id"] for m in chat["messages"]]
    base = {"agent_id": "pal", "query": "Which tricks did Oscar the puppy learn?", "model": "gpt-4o",
            "max_context_tokens": 2000, "retrieval": {"strategy": "lexical"}}

    async def assemble(**extra: Any) -> dict[str, Any]:
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={**base, **extra})
        assert r.status_code == 200, r.text
        body = r.json()
        assert isinstance(body, dict)
        return body

    def packed(body: dict[str, Any]) -> set[str]:
        return {m["id"] for m in body["memories_used"]}

    everything = await assemble()
    assert set(ids) <= packed(everything) and other["messages"][0]["id"] in packed(everything)
    assert "Caroline: My puppy Oscar learned trick number 1 today: sit." in everything["context"]
    assert {m["message"]["position"] for m in everything["memories_used"] if m["id"] in ids} == set(range(1, 7))

    # the last two turns are in the request's history: neither is packed again, the rest are
    history = [{"role": "user", "content": PETS[4]["content"]},
               {"role": "user", "content": f"Caroline: {PETS[5]['content']}"}]
    seen = await assemble(recent_messages=history, conversation_id="pets")
    assert packed(seen) & set(ids) == set(ids[:4]) and other["messages"][0]["id"] in packed(seen)
    left_out = {d["id"]: d for d in seen["dropped"] if d["reason"] == "in_history"}
    assert set(left_out) == set(ids[4:]) and all("recent_messages" in d["detail"] for d in left_out.values())
    assert {d["message"]["position"] for d in left_out.values()} == {5, 6}
    # without conversation_id, the same history changes nothing of what is packed
    assert set(ids) <= packed(await assemble(recent_messages=history))

    # the caller says the model sees the last three turns (history_turns), whether or not they are sent
    last3 = await assemble(conversation_id="pets", history_turns=3)
    assert packed(last3) & set(ids) == set(ids[:3])
    assert {d["id"] for d in last3["dropped"] if d["reason"] == "in_history"} == set(ids[3:])
    assert packed(await assemble(conversation_id="pets", history_turns=0)) >= set(ids)
    assert packed(await assemble(conversation_id="nothing-here", history_turns=3)) >= set(ids)
    r = await client.post("/v1/context/assemble", headers=tenant.headers, json={**base, "history_turns": 3})
    assert_error(r, 422, "validation_error")  # schema-valid fields that rule each other out


async def test_a_follow_up_is_searched_after_the_name_it_leans_on(settings: Settings, endpoints: Endpoints,
                                                                  embedder: Embedder, tenant: Tenant) -> None:
    turns = [{"speaker": "Melanie", "content": "I paint pottery every Sunday, it calms me down."},
             {"speaker": "Caroline", "content": "I paint landscapes of the lake on weekends."},
             *({"speaker": "Melanie" if n % 2 else "Caroline", "content": f"Unrelated chat about the weather, day {n}."}
               for n in range(8))]
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        out = await append(client, tenant, "painters", turns, agent_id="pal")
        caroline = out["messages"][1]["id"]
        base = {"agent_id": "pal", "query": "What does she paint?", "model": "gpt-4o", "max_context_tokens": 2000,
                "recent_messages": [{"role": "user", "content": "Let us talk about Caroline."},
                                    {"role": "assistant", "content": "Sure, what would you like to know?"},
                                    {"role": "user", "content": "What does she paint?"}]}

        async def assemble(query: str = "What does she paint?", **retrieval: Any) -> dict[str, Any]:
            r = await client.post("/v1/context/assemble", headers=tenant.headers,
                                  json={**base, "query": query, "retrieval": {"use_hot": False, **retrieval}})
            assert r.status_code == 200, r.text
            body = r.json()
            assert isinstance(body, dict)
            return body

        completed = await assemble()
        # searched as "Caroline What does she paint?": her painting comes first (the speaker boost)
        assert completed["memories_used"][0]["id"] == caroline, completed["memories_used"][:2]
        assert "searched after the names 'Caroline'" in completed["branches"]["cold"]["detail"]
        assert "said by someone the query names" in completed["branches"]["cold"]["detail"]
        # the context and history are the request's own: only the search changed
        assert "Let us talk about Caroline." in completed["context"]
        alone = await assemble(complete_from_history=False)
        assert "searched after the names" not in alone["branches"]["cold"]["detail"]
        assert "said by someone the query names" not in alone["branches"]["cold"]["detail"]
        # a query with a name of its own is searched as it is: Melanie's painting first
        named = await assemble("What does Melanie paint?")
        assert "searched after the names" not in named["branches"]["cold"]["detail"]
        assert named["memories_used"][0]["id"] == out["messages"][0]["id"]
        # a follow-up as long as a query may be is searched as it is: the names would make it too long
        longest = await assemble(("What does she paint? " * 400)[:settings.retrieval.max_query_chars])
        assert "searched after the names" not in longest["branches"]["cold"]["detail"]


async def test_a_speaker_is_trimmed_and_a_resend_still_matches(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    first = await append(client, tenant, "trimmed", [{"speaker": " Dana\u00a0", "content": "Espresso at 8:45.",
                                                      "message_id": "m1", "session_id": "s"}])
    assert [m["speaker"] for m in await all_messages(client, tenant, "trimmed")] == ["Dana"]
    for speaker in (" Dana\u00a0", "Dana", "  Dana "):  # the same message, however it is padded
        again = await append(client, tenant, "trimmed", [{"speaker": speaker, "content": "Espresso at 8:45.",
                                                          "message_id": "m1", "session_id": "s"}])
        assert again["messages"][0] | {"created": True} == first["messages"][0] and not again["messages"][0]["created"]
    r = await client.post("/v1/conversations/trimmed/messages", headers=tenant.headers, json={"messages": [
        {"speaker": "Dan", "content": "Espresso at 8:45.", "message_id": "m1", "session_id": "s"}]})
    assert_error(r, 409, "message_id_reused")
    reply = await append(client, tenant, "trimmed", [{"speaker": "Bo", "content": "Noted.", "session_id": "s"}])
    assert await search_contexts(client, tenant, reply) == ["Dana: Espresso at 8:45."]


@pytest.mark.parametrize(("path", "raw"), [
    ("/v1/conversations", "2026-12-05T20:29:09+14:00|\x00"), ("/v1/conversations", "0001-01-01T00:00:00+14:00|x"),
    ("/v1/conversations", "2026-12-05T20:29:09|x"), ("/v1/conversations", "2026-12-05T20:29:09Z|a b"),
    ("/v1/conversations/paged/messages", "-1"), ("/v1/conversations/paged/messages", "9" * 19)])
async def test_a_cursor_is_checked_before_the_database_sees_it(client: AsyncTestClient[Any], tenant: Tenant,
                                                               path: str, raw: str) -> None:
    # once answered with the database's error (400 bad_request, sqlstate 22021 or 22000), or with a page
    await append(client, tenant, "paged", TURNS[:1])
    cursor = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    assert_error(await client.get(path, headers=tenant.headers, params={"cursor": cursor}), 400, "bad_cursor")


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
                waiting = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
                for _ in range(2000):
                    if await conn.fetchval(waiting, conn.get_server_pid()):
                        return
                    await asyncio.sleep(0.005)
                raise AssertionError("the delete never waited for the append")
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

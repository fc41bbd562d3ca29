"""Conversation messages in search and assembly on real Postgres + Redis: search contexts from the turns
of the same session, speaker- and person-aware fusion, history-aware packing and follow-ups."""

from __future__ import annotations

import re
from typing import Any

import asyncpg
from litestar.testing import AsyncTestClient

from service.db.queries import query
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_conversations import ROLE_CHAT, TURNS, append, search_contexts
from tests.integration.test_memories_api import assert_error


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

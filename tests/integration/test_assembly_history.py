"""History-aware packing end to end on real Postgres + Redis: only the turns the budget keeps in the
``<history>`` section count as seen; a turn trimmed out of it is packed like any other memory."""

from __future__ import annotations

from typing import Any

import asyncpg

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_conversations import append

TURNS = [{"role": "user", "content": "The zephyrine launch code is ALPHA-7.", "message_id": "z0"},
         {"role": "assistant", "content": "filler " + "blah " * 400, "message_id": "z1"},
         {"role": "user", "content": "Tell me about zephyrine.", "message_id": "z2"}]
"""A fact, a long reply that a small window cannot hold beside it, and the latest turn."""


async def test_a_turn_trimmed_out_of_the_history_is_packed(settings: Settings, endpoints: Endpoints,
                                                           embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        out = await append(client, tenant, "asm3", TURNS, agent_id="zz3")
        ids = [m["id"] for m in out["messages"]]
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "zz3", "query": "What is the zephyrine launch code?", "model": "gpt-4o",
            "max_context_tokens": 500, "reserve_tokens": 100, "conversation_id": "asm3",
            "recent_messages": [{"role": t["role"], "content": t["content"]} for t in TURNS]})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
    budget = body["budget"]
    # the window keeps only the latest turn in <history>: the fact and the long reply are trimmed out of it
    assert (budget["history_messages"], budget["history_messages_dropped"]) == (1, 2)
    in_history = {d["id"]: d for d in body["dropped"] if d["reason"] == "in_history"}
    assert set(in_history) == {ids[2]}, body["dropped"]  # only the turn the model sees
    assert in_history[ids[2]]["message"]["position"] == 3
    # the trimmed fact is packed among the memories, so the model sees it once
    assert ids[0] in {m["id"] for m in body["memories_used"]}, body["dropped"]
    assert budget["memories_tokens"] > 0
    memories = body["context"].split("<memories>")[1].split("</memories>")[0]
    assert "ALPHA-7" in memories and "Tell me about zephyrine." not in memories
    assert "<history>" in body["context"] and "ALPHA-7" not in body["context"].split("<history>")[1]


async def test_the_turns_the_model_sees_take_no_places_of_what_it_does_not(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    chat = [{"role": "user" if n % 2 else "assistant",
             "content": f"Ziggy the cat ate tuna again on day {n}, tuna is his favourite food."} for n in range(30)]
    facts = ["Ziggy the cat is allergic to chicken, says the vet.", "Ziggy the cat weighs 5 kilograms."]
    async with assembly_client(settings, endpoints, embedder, **GENEROUS, cold_limit=10, cold_limit_max=10) as client:
        await append(client, tenant, "ziggy", chat, agent_id="zz4")
        for text in facts:
            r = await client.post("/v1/memories", headers=tenant.headers, json={"text": text, "agent_id": "zz4"})
            assert r.status_code == 201, r.text
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "zz4", "query": "What does Ziggy the cat eat?", "model": "gpt-4o",
            "max_context_tokens": 2000, "conversation_id": "ziggy", "history_turns": len(chat),
            "retrieval": {"strategy": "lexical"}})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
    # the model sees the whole chat: its 30 turns are left out, and the search went past them to the facts
    assert sum(d["reason"] == "in_history" for d in body["dropped"]) == len(chat), body["dropped"]
    assert {m["text"] for m in body["memories_used"]} == set(facts), body["memories_used"]


async def test_last_turns_not_read_in_time_are_reported_not_left_out(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, owner_dsn: str) -> None:
    """The conversation's length is read beside the branches; when it does not come within the wall the
    last ``history_turns`` stay candidates, and the response says so (``history_turns_unread``)."""
    deadlines: dict[str, Any] = {"deadline_ms": 1500, "directive_timeout_ms": 500, "hot_timeout_ms": 500,
                                 "cold_timeout_ms": 1000}
    async with assembly_client(settings, endpoints, embedder, **deadlines) as client:
        await append(client, tenant, "asm5", TURNS[:1], agent_id="zz5")
        conn = await asyncpg.connect(owner_dsn)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE")  # the length read waits
                r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
                    "agent_id": "zz5", "query": "What is the zephyrine launch code?", "model": "gpt-4o",
                    "max_context_tokens": 1000, "conversation_id": "asm5", "history_turns": 1})
        finally:
            await conn.close()
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        assert "history_turns_unread" in body["degradation_reasons"], body["degradation_reasons"]
        assert not [d for d in body["dropped"] if d["reason"] == "in_history"]
        assert "ALPHA-7" in body["context"]
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "zz5", "query": "What is the zephyrine launch code?", "model": "gpt-4o",
            "max_context_tokens": 1000, "conversation_id": "asm5", "history_turns": 1})
        assert r.status_code == 200 and r.json()["degradation_reasons"] == [], r.text
        assert [d["reason"] for d in r.json()["dropped"]] == ["in_history"]

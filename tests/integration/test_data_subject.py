"""Data-subject requests over HTTP: DELETE /v1/memories?agent_id= and GET /v1/export?agent_id=,
against real Postgres + Redis, each checked with two orgs."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.assembly.hot import hot_key
from service.db import Database, create_pool
from service.export import stream
from service.memories import write
from service.memories.types import AGENT_ID_PATTERN
from service.runtime import Endpoints
from tests.conftest import Tenant
from tests.integration.test_memories_api import assert_error

SUBJECT = "subject-7"


async def owner_rows(owner_dsn: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """Read as the owner (its admin policy sees every org): what is really stored, not what the API says."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def agent_memory_count(owner_dsn: str, org_id: UUID, agent_id: str) -> int:
    rows = await owner_rows(owner_dsn, "SELECT count(*) AS n FROM memories WHERE org_id = $1 AND agent_id = $2 "
                                       "AND kind <> 'document_chunk'", org_id, agent_id)
    return int(rows[0]["n"])


async def remember(client: AsyncTestClient[Any], tenant: Tenant, *memories: dict[str, Any]) -> list[str]:
    r = await client.post("/v1/memories", json={"memories": list(memories)}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    return [str(i) for i in r.json()["ids"]]


async def export(client: AsyncTestClient[Any], tenant: Tenant, agent_id: str) -> list[dict[str, Any]]:
    r = await client.get("/v1/export", params={"agent_id": agent_id}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    assert r.headers["cache-control"] == "no-store"
    assert r.text.endswith("\n")
    return [json.loads(line) for line in r.text.splitlines()]


async def test_delete_removes_only_the_agents_memories_of_the_callers_org(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant, owner_dsn: str, redis_url: str) -> None:
    mine = await remember(client, tenant, *({"text": f"Subject likes quokkazine number {i}.", "agent_id": SUBJECT,
                                             "pinned": True} for i in range(3)))
    await remember(client, tenant, {"text": "Another agent's note.", "agent_id": "bystander"},
                   {"text": "An org-wide fact."})
    theirs = await remember(client, other_tenant, *({"text": f"B's subject note {i}.", "agent_id": SUBJECT}
                                                    for i in range(2)))

    async def hot_ids() -> set[str]:
        hot = await client.get("/v1/memories/hot", params={"agent_id": SUBJECT}, headers=tenant.headers)
        assert hot.status_code == 200, hot.text
        return {str(m["id"]) for m in hot.json()["items"]}

    # A's hot set is cached in Redis before anything is deleted.
    assert set(mine) <= await hot_ids()
    cached = hot_key(tenant.org_id, SUBJECT)
    redis = Redis.from_url(redis_url)
    try:
        for _ in range(100):  # under load the fill may finish in the background
            if await redis.exists(cached):
                break
            await asyncio.sleep(0.05)
        assert await redis.exists(cached)

        # Org B asks to delete "subject-7": only B's rows go; A's rows and A's cached set survive.
        r = await client.delete("/v1/memories", params={"agent_id": SUBJECT}, headers=other_tenant.headers)
        assert r.status_code == 200, r.text
        assert r.json() == {"agent_id": SUBJECT, "deleted": len(theirs)}
        assert await agent_memory_count(owner_dsn, other_tenant.org_id, SUBJECT) == 0
        assert await agent_memory_count(owner_dsn, tenant.org_id, SUBJECT) == len(mine)
        for memory_id in mine:
            assert (await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers)).status_code == 200
        assert await redis.exists(cached)

        r = await client.delete("/v1/memories", params={"agent_id": SUBJECT}, headers=tenant.headers)
        assert r.status_code == 200 and r.json() == {"agent_id": SUBJECT, "deleted": len(mine)}, r.text
        assert not await redis.exists(cached)  # A's own delete invalidated A's set
    finally:
        await redis.aclose()
    assert await agent_memory_count(owner_dsn, tenant.org_id, SUBJECT) == 0
    assert await agent_memory_count(owner_dsn, tenant.org_id, "bystander") == 1
    listed = await client.get("/v1/memories", headers=tenant.headers)
    assert [m["text"] for m in listed.json()["items"]] == ["An org-wide fact.", "Another agent's note."]

    # The derived lexical postings went with the rows, and a rebuilt hot set no longer holds them.
    postings = await owner_rows(owner_dsn, "SELECT count(*) AS n FROM memory_postings WHERE memory_id = ANY($1)",
                                [UUID(m) for m in mine])
    assert postings[0]["n"] == 0
    assert not set(mine) & await hot_ids()

    # Idempotent: a repeat deletes nothing and still answers 200.
    again = await client.delete("/v1/memories", params={"agent_id": SUBJECT}, headers=tenant.headers)
    assert again.status_code == 200 and again.json()["deleted"] == 0


async def test_delete_runs_in_batches_until_none_is_left(
        client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(write, "_DELETE_AGENT_BATCH", 2)
    await remember(client, tenant, *({"text": f"Batch row {i}.", "agent_id": "batchy"} for i in range(5)))
    r = await client.delete("/v1/memories", params={"agent_id": "batchy"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["deleted"] == 5, r.text
    assert await agent_memory_count(owner_dsn, tenant.org_id, "batchy") == 0


async def test_delete_leaves_document_chunks_to_the_documents_api(
        client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    body = {"files": [{"path": "notes/a.md", "content": "# Title\n\nSome text about otters.\n"}],
            "agent_id": "docowner"}
    assert (await client.post("/v1/documents", json=body, headers=tenant.headers)).status_code in (200, 201)
    await remember(client, tenant, {"text": "A plain memory.", "agent_id": "docowner"})
    r = await client.delete("/v1/memories", params={"agent_id": "docowner"}, headers=tenant.headers)
    assert r.json()["deleted"] == 1
    chunks = await owner_rows(owner_dsn, "SELECT count(*) AS n FROM memories WHERE org_id = $1 AND "
                                         "agent_id = 'docowner' AND kind = 'document_chunk'", tenant.org_id)
    assert chunks[0]["n"] > 0


@pytest.mark.parametrize("params", [{}, {"agent_id": ""}, {"agent_id": "has space"}, {"agent_id": "x" * 201},
                                    {"agent_id": "line\n"}, {"agent_id": "semi;colon"}])
async def test_bad_agent_ids_are_400(client: AsyncTestClient[Any], tenant: Tenant, params: dict[str, str]) -> None:
    assert_error(await client.delete("/v1/memories", params=params, headers=tenant.headers), 400)
    if params:  # no agent_id exports the whole org (tests/integration/test_export_import.py)
        assert_error(await client.get("/v1/export", params=params, headers=tenant.headers), 400)


async def test_both_need_a_key(client: AsyncTestClient[Any]) -> None:
    assert_error(await client.delete("/v1/memories", params={"agent_id": SUBJECT}), 401)
    assert_error(await client.get("/v1/export", params={"agent_id": SUBJECT}), 401)
    bad = {"Authorization": "Bearer pgc_not-a-key"}
    assert_error(await client.get("/v1/export", params={"agent_id": SUBJECT}, headers=bad), 401)


async def chat(client: AsyncTestClient[Any], tenant: Tenant, conversation_id: str, agent_id: str, text: str) -> str:
    """Append one message to the agent's conversation; returns its memory id."""
    r = await client.post(f"/v1/conversations/{conversation_id}/messages", headers=tenant.headers,
                          json={"agent_id": agent_id, "messages": [{"content": text}]})
    assert r.status_code == 201, r.text
    return str(r.json()["messages"][0]["id"])


async def test_export_holds_everything_of_the_agent_and_nothing_of_another_org(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant, owner_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An expired memory is exported until it is purged, and one write in _PURGE_EVERY purges a few
    # expired rows of the org: the writes below must not (a flake once in ~20 runs otherwise).
    monkeypatch.setattr(write, "_PURGE_EVERY", 10**12)
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    mine = await remember(client, tenant,
                          {"text": "Subject drinks oolong.", "agent_id": SUBJECT, "metadata": {"src": "chat"}},
                          {"text": "Subject's expired note.", "agent_id": SUBJECT, "expires_at": past})
    await remember(client, tenant, {"text": "Not the subject's.", "agent_id": "bystander"})
    r = await client.put(f"/v1/agents/{SUBJECT}/directive", json={"content": "Be brief with the subject."},
                         headers=tenant.headers)
    assert r.status_code == 200, r.text
    body = {"files": [{"path": "subject/profile.md", "content": "# Profile\n\nLikes hiking.\n\n## More\n\nTea.\n"}],
            "agent_id": SUBJECT}
    assert (await client.post("/v1/documents", json=body, headers=tenant.headers)).status_code in (200, 201)
    said = await chat(client, tenant, "subject-chat", SUBJECT, "Subject: call me Sev.")
    await chat(client, tenant, "bystander-chat", "bystander", "Not the subject's chat.")
    theirs = await remember(client, other_tenant, {"text": "B's secret about its own subject-7.", "agent_id": SUBJECT})
    theirs.append(await chat(client, other_tenant, "subject-chat", SUBJECT, "B's chat with its subject-7."))
    await client.put(f"/v1/agents/{SUBJECT}/directive", json={"content": "B's directive."},
                     headers=other_tenant.headers)

    lines = await export(client, tenant, SUBJECT)
    assert lines[0]["type"] == "export" and lines[0]["agent_id"] == SUBJECT
    assert lines[0]["org_id"] == str(tenant.org_id)
    assert lines[-1]["type"] == "end"
    by_type: dict[str, list[dict[str, Any]]] = {}
    for line in lines[1:-1]:
        by_type.setdefault(line["type"], []).append(line)
    assert lines[-1]["counts"] == {t: len(by_type.get(t, []))
                                   for t in ("directive", "document", "conversation", "memory", "chunk", "event")}
    assert {(e["event"], e["memory_id"]) for e in by_type["event"]} == {("created", i) for i in mine}

    assert [d["content"] for d in by_type["directive"]] == ["Be brief with the subject."]
    assert {m["id"] for m in by_type["memory"]} == {*mine, said}
    assert [(c["id"], c["message_count"]) for c in by_type["conversation"]] == [("subject-chat", 1)]
    memory = next(m for m in by_type["memory"] if m["text"] == "Subject drinks oolong.")
    assert memory["metadata"] == {"src": "chat"} and memory["access_count"] == 0
    assert "embedding" not in memory and "tsv" not in memory
    assert any(m["expires_at"] is not None for m in by_type["memory"])  # held until purged, so exported
    assert [d["path"] for d in by_type["document"]] == ["subject/profile.md"]
    stored_chunks = await owner_rows(owner_dsn, "SELECT id FROM memories WHERE org_id = $1 AND agent_id = $2 "
                                                "AND kind = 'document_chunk'", tenant.org_id, SUBJECT)
    assert {c["id"] for c in by_type["chunk"]} == {str(r["id"]) for r in stored_chunks} != set()
    assert all(c["source_path"] == "subject/profile.md" for c in by_type["chunk"])
    for line in lines[1:-1]:
        assert line.get("org_id") == str(tenant.org_id), line
        assert line.get("agent_id") == SUBJECT, line

    # Org B exporting the same agent name sees its own row only: none of A's.
    other = await export(client, other_tenant, SUBJECT)
    other_text = json.dumps(other)
    assert {m["id"] for m in other if m["type"] == "memory"} == set(theirs)
    assert [d["content"] for d in other if d["type"] == "directive"] == ["B's directive."]
    assert not [d for d in other if d["type"] in ("document", "chunk")]
    assert str(tenant.org_id) not in other_text and not any(i in other_text for i in mine)
    assert "oolong" not in other_text and "hiking" not in other_text


async def test_export_of_an_unknown_agent_is_empty_but_complete(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    lines = await export(client, tenant, "nobody-here")
    assert [line["type"] for line in lines] == ["export", "end"]
    assert lines[-1]["counts"] == {"directive": 0, "document": 0, "conversation": 0, "memory": 0, "chunk": 0,
                                   "event": 0}


async def test_export_streams_in_chunks(client: AsyncTestClient[Any], tenant: Tenant, endpoints: Endpoints,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows leave as they are read (a chunk per ~_CHUNK_BYTES), not as one body built in memory."""
    await remember(client, tenant, *({"text": f"Streamed row {i} " + "x" * 200, "agent_id": "streamer"}
                                     for i in range(40)))
    monkeypatch.setattr(stream, "_CHUNK_BYTES", 1000)
    monkeypatch.setattr(stream, "_PREFETCH", 7)
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=1), statement_timeout_ms=5000)
    try:
        chunks = [chunk async for chunk in stream.export_lines(db, tenant.org_id, "streamer")]
    finally:
        await db.close()
    lines = [json.loads(line) for line in b"".join(chunks).splitlines()]
    assert len([x for x in lines if x["type"] == "memory"]) == 40
    assert len(chunks) >= 8  # header, then roughly one chunk per four rows, then the trailer
    assert all(len(chunk) < 2000 for chunk in chunks)


async def test_export_after_delete_shows_what_is_left(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await remember(client, tenant, {"text": "To be erased.", "agent_id": "erased"})
    await client.put("/v1/agents/erased/directive", json={"content": "Kept until deleted."}, headers=tenant.headers)
    await chat(client, tenant, "erased-chat", "erased", "Erased with its agent.")
    assert (await client.delete("/v1/memories", params={"agent_id": "erased"}, headers=tenant.headers)).status_code \
        == 200
    lines = await export(client, tenant, "erased")
    assert lines[-1]["counts"] == {"directive": 1, "document": 0, "conversation": 0, "memory": 0, "chunk": 0,
                                   "event": 0}  # history too, and conversations


async def test_a_failure_part_way_ends_the_stream_with_an_error_line(
        client: AsyncTestClient[Any], tenant: Tenant, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    await remember(client, tenant, {"text": "Never reaches the stream.", "agent_id": "broken"})
    real_query = stream.query  # type: ignore[attr-defined]
    monkeypatch.setattr(stream, "query", lambda name: "SELECT 1 / 0 AS part, 1 AS kind, 1 AS line"
                        if name == "export.lines" else real_query(name))
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=1), statement_timeout_ms=5000)
    try:
        lines = [json.loads(line) for chunk in [c async for c in stream.export_lines(db, tenant.org_id, "broken")]
                 for line in chunk.splitlines()]
    finally:
        await db.close()
    assert [line["type"] for line in lines] == ["export", "error"]
    assert lines[-1]["code"] == "export_failed"


async def test_both_are_in_the_openapi_schema(client: AsyncTestClient[Any]) -> None:
    schema = (await client.get("/schema/openapi.json")).json()
    erase = schema["paths"]["/v1/memories"]["delete"]
    export_op = schema["paths"]["/v1/export"]["get"]
    for operation, required in ((erase, True), (export_op, False)):  # an export without an agent: the org's
        (param,) = [p for p in operation["parameters"] if p["name"] == "agent_id"]
        assert param["in"] == "query" and param.get("required", False) is required
        assert param["schema"]["pattern"] == AGENT_ID_PATTERN and param["schema"]["maxLength"] == 200
    assert erase["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("DeletedAgentMemories")
    assert "application/x-ndjson" in export_op["responses"]["200"]["content"]
    assert "end" in export_op["description"] and "chunk" in export_op["description"]


async def test_one_export_per_org_at_a_time_and_a_bounded_number_per_process(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant, endpoints: Endpoints,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An export holds a pooled connection while its client reads: a tenant cannot pile them up."""
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=2), statement_timeout_ms=5000)
    running = stream.export_lines(db, tenant.org_id, SUBJECT)
    try:
        assert b'"type": "export"' in await anext(running)  # open, client not reading on
        busy = assert_error(await client.get("/v1/export", params={"agent_id": "x"}, headers=tenant.headers),
                            429, "export_in_progress")
        assert "already running" in busy["message"]
        assert (await client.get("/v1/export", params={"agent_id": "x"}, headers=tenant.headers)).headers[
            "retry-after"] == str(stream.RETRY_AFTER_S)
        # Another org is not held up by it...
        assert (await client.get("/v1/export", params={"agent_id": "x"},
                                 headers=other_tenant.headers)).status_code == 200
        # ...until the process-wide bound is reached.
        monkeypatch.setattr(stream.SLOTS, "limit", 1)
        assert_error(await client.get("/v1/export", params={"agent_id": "x"}, headers=other_tenant.headers),
                     503, "overloaded")
    finally:
        await running.aclose()
        await db.close()
    assert tenant.org_id not in stream.SLOTS.orgs  # closing the stream gave the slot back
    r = await client.get("/v1/export", params={"agent_id": "x"}, headers=tenant.headers)
    assert r.status_code == 200 and r.text.splitlines()[-1].startswith('{"type":"end"')

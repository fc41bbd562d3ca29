"""``pgcontext orgs delete``, run as an operator runs it (a subprocess) against a database a live app
wrote into: every row of the org in every table, its Redis keys and its partial HNSW index go; another
org keeps everything; the org's keys answer 401."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.app import create_app
from service.db.redisconn import org_prefix
from service.embeddings import Embedder
from service.retrieval.maintenance import index_name
from service.runtime import Endpoints
from service.settings import Settings
from tests.integration.test_cli import clean_env, run, with_database
from tests.servers import fresh_database

AGENT = "concierge"


@pytest.fixture(scope="module")
def delete_db(pg_server: str) -> Iterator[str]:
    with fresh_database(pg_server) as dsn:
        yield dsn


def new_key(env: dict[str, str], org: str) -> str:
    return run(env, "keys", "create", "--org", org).stdout.strip().splitlines()[-1]


async def fill(client: AsyncTestClient[Any], key: str, word: str) -> None:
    """One of everything an org can hold: memories (an agent's, org-wide, a keyed fact), a directive, a
    conversation, a document, feedback (access rows), an idempotency record; an assembly fills the
    agent's hot set and directive in Redis."""
    headers = {"Authorization": f"Bearer {key}"}
    r = await client.post("/v1/memories", headers={**headers, "Idempotency-Key": f"{word}-1"}, json={"memories": [
        {"text": f"The {word} guest prefers a quiet room.", "agent_id": AGENT, "pinned": True},
        {"text": f"Breakfast for {word} is served at seven.", "metadata": {"key": "breakfast"}},
    ]})
    assert r.status_code == 201, r.text
    ids = r.json()["ids"]
    r = await client.put(f"/v1/agents/{AGENT}/directive", headers=headers, json={"content": "Be brief."})
    assert r.status_code == 200, r.text
    r = await client.post(f"/v1/conversations/{word}-chat/messages", headers=headers, json={
        "agent_id": AGENT, "messages": [{"speaker": "Ann", "content": f"Is the {word} spa open?"},
                                        {"role": "assistant", "content": "Until nine."}]})
    assert r.status_code in (200, 201), r.text
    r = await client.post("/v1/documents", headers=headers,
                          json={"files": [{"path": "house/rules.md", "content": f"# Rules\n\nNo {word} pets.\n"}]})
    assert r.status_code in (200, 201), r.text
    r = await client.post("/v1/memories/feedback", headers=headers, json={"memory_ids": ids, "helpful": True})
    assert r.status_code == 200, r.text
    r = await client.post("/v1/context/assemble", headers=headers, json={
        "agent_id": AGENT, "query": f"what does the {word} guest prefer?", "model": "gpt-4o",
        "max_context_tokens": 1000})
    assert r.status_code == 200, r.text
    assert f"{word} guest prefers" in r.json()["context"]


async def rows_by_table(conn: asyncpg.Connection, org_id: UUID) -> dict[str, int]:
    """Rows of the org in every table with an ``org_id`` column (tables added later are counted too)."""
    tables = await conn.fetch("SELECT table_name FROM information_schema.columns "
                              "WHERE table_schema = 'public' AND column_name = 'org_id' ORDER BY 1")
    return {t["table_name"]: await conn.fetchval(f'SELECT count(*) FROM "{t["table_name"]}" WHERE org_id = $1',
                                                 org_id) for t in tables}


async def redis_keys(url: str, org_id: UUID) -> list[bytes]:
    redis = Redis.from_url(url)
    try:
        return [k async for k in redis.scan_iter(match=org_prefix(org_id) + "*")]
    finally:
        await redis.aclose()


async def test_an_org_goes_with_everything_it_holds(delete_db: str, app_dsn: str, redis_url: str,
                                                    settings: Settings, embedder: Embedder) -> None:
    env = clean_env(PGCONTEXT_DATABASE_URL=delete_db, PGCONTEXT_REDIS_URL=redis_url, PGCONTEXT_AUTH_CACHE_TTL_S="0.5")
    doomed = UUID(run(env, "orgs", "create", "doomed").stdout.strip().splitlines()[-1])
    kept = UUID(run(env, "orgs", "create", "kept").stdout.strip().splitlines()[-1])
    doomed_key, kept_key = new_key(env, "doomed"), new_key(env, "kept")

    database = urlsplit(delete_db).path.lstrip("/")
    endpoints = Endpoints(owner_dsn=delete_db, app_dsn=with_database(app_dsn, database), redis_url=redis_url)
    # The app caches a key as long as the command waits after revoking it.
    quick = dataclasses.replace(settings, server=dataclasses.replace(settings.server, auth_cache_ttl_s=0.5))
    async with AsyncTestClient(app=create_app(quick, endpoints, embedder=embedder), timeout=30) as client:
        await fill(client, doomed_key, "doomed")
        await fill(client, kept_key, "kept")
        conn = await asyncpg.connect(delete_db)
        try:
            # As `pgcontext maintain` builds one for a big org.
            await conn.execute(f"CREATE INDEX {index_name(doomed)} ON memories USING hnsw "
                               f"(embedding vector_cosine_ops) WHERE org_id = '{doomed}'")
            for _ in range(100):  # an assembly's access rows are written after it answers
                before = await rows_by_table(conn, doomed)
                if before["memory_access"]:
                    break
                await asyncio.sleep(0.05)
            assert {t for t, n in before.items() if n} >= {
                "api_keys", "memories", "memory_postings", "memory_access", "directives", "conversations",
                "documents", "memory_events", "idempotency_keys"}, before
            assert await redis_keys(redis_url, doomed)

            asked = run(env, "orgs", "delete", "doomed", ok=False)
            assert asked.returncode == 2 and "--yes" in asked.stderr, asked.stderr
            assert "1 active key(s)" in asked.stdout and "1 conversation(s)" in asked.stdout, asked.stdout
            assert await rows_by_table(conn, doomed) == before  # only said what it holds

            done = run(env, "orgs", "delete", "doomed", "--yes")
            assert "deleted org 'doomed'" in done.stdout, done.stdout
            assert all(n == 0 for n in (await rows_by_table(conn, doomed)).values())
            assert await conn.fetchval("SELECT count(*) FROM pg_class WHERE relname = $1", index_name(doomed)) == 0
            assert all(n > 0 for t, n in (await rows_by_table(conn, kept)).items()
                       if t in ("memories", "memory_postings", "directives", "conversations", "documents"))
        finally:
            await conn.close()
        assert await redis_keys(redis_url, doomed) == []
        assert await redis_keys(redis_url, kept)

        gone = await client.get("/v1/memories", headers={"Authorization": f"Bearer {doomed_key}"})
        assert gone.status_code == 401, gone.text
        r = await client.post("/v1/memories/search", headers={"Authorization": f"Bearer {kept_key}"},
                              json={"query": "quiet room"})
        assert r.status_code == 200 and "kept guest" in r.json()["results"][0]["text"], r.text

    listed = run(env, "orgs", "list").stdout
    assert "kept" in listed and "doomed" not in listed
    again = run(env, "orgs", "delete", "doomed", "--yes", ok=False)
    assert again.returncode == 2 and "no org named 'doomed'" in again.stderr, again.stderr


def test_nothing_is_deleted_when_redis_does_not_answer(delete_db: str) -> None:
    env = clean_env(PGCONTEXT_DATABASE_URL=delete_db, PGCONTEXT_REDIS_URL="redis://127.0.0.1:9/0")
    run(env, "orgs", "create", "stays")
    key = new_key(env, "stays")
    refused = run(env, "orgs", "delete", "stays", "--yes", ok=False)
    assert refused.returncode == 2 and "nothing was deleted" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    keys = run(env, "keys", "list", "--org", "stays").stdout
    assert key[:10] in keys and keys.splitlines()[1].split()[-1] == "no"  # still active

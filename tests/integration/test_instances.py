"""Many service instances on one Postgres and one Redis: two real ``pgcontext serve`` processes.

* Started together on an empty database: both migrate (the advisory lock serializes them), exactly
  one creates the ``default`` org, both serve.
* A write acknowledged by one is visible through the other at once (the documented bound,
  docs/scaling.md): search and memory reads (Postgres), hot sets (invalidated in Redis before the
  write is acknowledged), directives (envelope refreshed before the PUT answers); an
  ``Idempotency-Key`` sent to both at once creates one memory.
* Background work running in every instance at once gives the right totals with no error or
  deadlock: access-statistics flushes (each instance's batched UPSERT), feedback, the opportunistic
  expiry purge, and ``pgcontext maintain`` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit
from uuid import UUID

import asyncpg
import httpx
import pytest
import structlog

from service.assembly.feedback import AccessRecorder
from service.auth import admin
from service.db import Database, create_pool
from service.embedded.postgres import free_port
from service.retrieval import maintenance
from service.settings import Settings
from tests.integration.test_cli import PGCONTEXT, ROOT, Output, clean_env, copy_models, wait_until_answering
from tests.integration.test_serve_no_migrate import app_dsn_for
from tests.processes import stop_process
from tests.servers import fresh_database

pytestmark = pytest.mark.slow
AGENT = "ops"
GENEROUS = {"PGCONTEXT_DEADLINE_MS": "5000", "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS": "2000",
            "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS": "2000", "PGCONTEXT_ASSEMBLY_COLD_TIMEOUT_MS": "3000"}
"""Branch timeouts that do not depend on how loaded the machine is (consistency is tested, not speed)."""


@dataclass(frozen=True)
class Instances:
    owner_dsn: str
    app_dsn: str
    urls: tuple[str, str]
    outputs: tuple[Output, Output]
    org_id: UUID
    headers: dict[str, str]


@pytest.fixture(scope="module")
def instances(pg_server: str, app_dsn: str, redis_url: str, settings: Settings,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instances]:
    data_dir = tmp_path_factory.mktemp("instances")
    copy_models(settings.data_dir / "models", data_dir / "models")
    with fresh_database(pg_server) as owner, contextlib.ExitStack() as stack:
        procs: list[subprocess.Popen[str]] = []
        outputs: list[Output] = []
        urls: list[str] = []
        for _ in range(2):  # started together, on an empty database
            port = free_port()
            env = clean_env(PGCONTEXT_DATABASE_URL=owner, PGCONTEXT_REDIS_URL=redis_url,
                            PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(port),
                            # roles are cluster-wide: keep the password the rest of the session uses
                            PGCONTEXT_APP_ROLE_PASSWORD=urlsplit(app_dsn).password or "",
                            PGCONTEXT_ASSEMBLY_ACCESS_FLUSH_S="0.5", **GENEROUS)
            proc = subprocess.Popen([*PGCONTEXT, "serve"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
            stack.callback(stop_process, proc, 30)
            procs.append(proc)
            outputs.append(Output(proc))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, out, url in zip(procs, outputs, urls, strict=True):
            wait_until_answering(proc, out, f"{url}/readyz", timeout_s=180)
        issued = asyncio.run(_tenant(owner))
        yield Instances(owner, app_dsn_for(app_dsn, owner), (urls[0], urls[1]), (outputs[0], outputs[1]),
                        issued.org_id, {"Authorization": f"Bearer {issued.key}"})


async def _tenant(owner: str) -> admin.IssuedKey:
    conn = await asyncpg.connect(owner)
    try:
        await admin.create_org(conn, "instances")
        return await admin.create_key(conn, "instances")
    finally:
        await conn.close()


async def _fetchval(dsn: str, sql: str, *args: object) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


def test_started_together_one_default_org(instances: Instances) -> None:
    created = [out.text().count("Created org 'default'") for out in instances.outputs]
    assert sorted(created) == [0, 1], [out.text()[-2000:] for out in instances.outputs]
    assert asyncio.run(_fetchval(instances.owner_dsn, "SELECT count(*) FROM orgs WHERE name = 'default'")) == 1


async def test_a_write_through_one_is_visible_through_the_other_at_once(instances: Instances) -> None:
    a_url, b_url = instances.urls
    h = instances.headers
    async with httpx.AsyncClient(base_url=a_url, headers=h, timeout=30) as a, \
            httpx.AsyncClient(base_url=b_url, headers=h, timeout=30) as b:
        # Hot set cached by B, then a write through A: B's very next read has it.
        r = await a.post("/v1/memories", json={"text": "The deploy window is Tuesday morning.", "agent_id": AGENT})
        assert r.status_code == 201, r.text
        assert [(await b.get("/v1/memories/hot", params={"agent_id": AGENT})).json()["source"]
                for _ in range(2)] == ["postgres", "cache"]
        r = await a.post("/v1/memories", json={"text": "Rollbacks need the on-call engineer's approval.",
                                               "agent_id": AGENT, "pinned": True})
        assert r.status_code == 201, r.text
        new_id = r.json()["ids"][0]
        hot = (await b.get("/v1/memories/hot", params={"agent_id": AGENT})).json()
        assert new_id in [m["id"] for m in hot["items"]]
        # Search through B, no wait: lexical and semantic.
        for strategy in ("lexical", "semantic", "hybrid"):
            r = await b.post("/v1/memories/search", json={"query": "who approves a rollback?", "strategy": strategy,
                                                          "filters": {"agent_id": AGENT}})
            assert r.status_code == 200, r.text
            assert new_id in [x["id"] for x in r.json()["results"]], strategy
        assert (await b.get(f"/v1/memories/{new_id}")).status_code == 200

        # Directives both ways, read from the cache each side keeps in the shared Redis.
        r = await a.put(f"/v1/agents/{AGENT}/directive", json={"content": "Be terse."})
        assert r.status_code == 200 and r.json()["version"] == 1
        assert (await b.get(f"/v1/agents/{AGENT}/directive")).json()["content"] == "Be terse."
        r = await b.put(f"/v1/agents/{AGENT}/directive", json={"content": "Be terse and polite."})
        assert r.json()["version"] == 2
        body = (await a.post("/v1/context/assemble", json={"agent_id": AGENT, "query": "rollback approval",
                                                           "model": "gpt-4o", "max_context_tokens": 1000})).json()
        assert body["directive"]["content"] == "Be terse and polite."
        assert new_id in [m["id"] for m in body["memories_used"]]

        # A delete through B: gone through A.
        assert (await b.delete(f"/v1/memories/{new_id}")).status_code in (200, 204)
        assert (await a.get(f"/v1/memories/{new_id}")).status_code == 404
        hot = (await a.get("/v1/memories/hot", params={"agent_id": AGENT})).json()
        assert new_id not in [m["id"] for m in hot["items"]]
        r = await a.post("/v1/memories/search", json={"query": "who approves a rollback?", "strategy": "lexical"})
        assert new_id not in [x["id"] for x in r.json()["results"]]

        # One Idempotency-Key sent to both at once: one memory.
        body_once = {"text": "Sent twice, stored once.", "agent_id": AGENT}
        answers = await asyncio.gather(*(c.post("/v1/memories", json=body_once, headers={"Idempotency-Key": "k-1"})
                                         for c in (a, b)))
        assert all(r.status_code in (201, 200, 409) for r in answers), [r.text for r in answers]
        listed = (await a.get("/v1/memories", params={"agent_id": AGENT, "limit": 200})).json()["items"]
        assert [m["text"] for m in listed].count("Sent twice, stored once.") == 1


async def test_access_statistics_of_both_instances_add_up(instances: Instances) -> None:
    """Assemblies through both processes at once pack the same pinned memories; each process flushes
    its own batched counts (every 0.5 s here): the totals in Postgres are the sum."""
    h = instances.headers
    agent = "counter"
    async with httpx.AsyncClient(headers=h, timeout=30) as http:
        r = await http.post(f"{instances.urls[0]}/v1/memories", json={"memories": [
            {"text": f"Pinned fact number {i} about the counters.", "agent_id": agent, "pinned": True}
            for i in range(5)]})
        ids = r.json()["ids"]
        packed: dict[str, int] = dict.fromkeys(ids, 0)

        async def assemble_through(url: str) -> None:
            for _ in range(15):
                body = (await http.post(f"{url}/v1/context/assemble", json={
                    "agent_id": agent, "query": "counters", "model": "gpt-4o", "max_context_tokens": 1000})).json()
                for m in body["memories_used"]:
                    if m["id"] in packed:
                        packed[m["id"]] += 1

        await asyncio.gather(*(assemble_through(url) for url in instances.urls for _ in range(2)))
    packed = {k: n for k, n in packed.items() if n}  # memories never packed have no statistics row
    assert sum(packed.values()) >= 60, packed  # 60 assemblies, each packing at least one of them
    deadline = time.monotonic() + 10
    while True:  # each process flushes within its interval (0.5 s)
        conn = await asyncpg.connect(instances.owner_dsn)
        try:
            rows = await conn.fetch("SELECT memory_id::text AS id, access_count FROM memory_access "
                                    "WHERE org_id = $1 AND memory_id = ANY($2::uuid[])", instances.org_id, ids)
        finally:
            await conn.close()
        counted = {r["id"]: r["access_count"] for r in rows}
        if counted == packed or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    assert counted == packed
    for out in instances.outputs:
        assert "access_stats_flush_failed" not in out.text()


async def test_background_jobs_from_two_instances_at_once(instances: Instances) -> None:
    """Two pools (two instances' worth of connections) run the same background work at the same time,
    over the same rows, in opposite orders."""
    org, h = instances.org_id, instances.headers
    async with httpx.AsyncClient(headers=h, timeout=60) as http:
        r = await http.post(f"{instances.urls[1]}/v1/memories", json={"memories": [
            {"text": f"Background row {i}: the {('red', 'green', 'blue')[i % 3]} queue drains nightly.",
             "agent_id": "jobs"} for i in range(90)]})
        assert r.status_code == 201, r.text
        ids = [UUID(i) for i in r.json()["ids"]]
    expired, live = ids[:45], ids[45:]
    conn = await asyncpg.connect(instances.owner_dsn)
    try:
        await conn.execute("UPDATE memories SET expires_at = now() - interval '1 second' WHERE id = ANY($1::uuid[])",
                           expired)
        docs_before = await conn.fetchval("SELECT sum(n_docs) FROM memory_lex_stats WHERE org_id = $1", org)
    finally:
        await conn.close()

    pools = [Database(await create_pool(instances.app_dsn, min_size=1, max_size=6), statement_timeout_ms=30_000)
             for _ in range(2)]
    try:
        with structlog.testing.capture_logs() as logs:
            # Access-statistics flushes: each instance's recorder, the same rows in opposite orders.
            recorders = [AccessRecorder(db, 3600) for db in pools]
            for _ in range(40):
                recorders[0].record(org, live)
                recorders[1].record(org, live[::-1])
                await asyncio.gather(*(rec.flush() for rec in recorders))

            # Feedback from both at once, opposite orders.
            async def feedback(db: Database, order: list[UUID]) -> None:
                for _ in range(20):
                    async with db.tenant(org) as tx:
                        await tx.fetch("assembly.feedback", org, order, [0.5] * len(order), [0.5] * len(order),
                                       [1] * len(order))

            # The opportunistic expiry purge, many at once from both (several writers per instance).
            async def purge(db: Database) -> None:
                for _ in range(10):
                    async with db.tenant(org) as tx:
                        await tx.execute("memories.purge_expired", org, 7)

            await asyncio.gather(feedback(pools[0], live), feedback(pools[1], live[::-1]),
                                 *(purge(db) for db in pools for _ in range(3)))
        assert [e for e in logs if e["log_level"] in ("warning", "error")] == []
    finally:
        for db in pools:
            await db.close()

    conn = await asyncpg.connect(instances.owner_dsn)
    try:
        counts = await conn.fetch("SELECT access_count FROM memory_access WHERE org_id = $1 "
                                  "AND memory_id = ANY($2::uuid[])", org, live)
        assert sorted(r["access_count"] for r in counts) == [80] * len(live)
        feedback_counts = await conn.fetch("SELECT feedback_count, usefulness FROM memories "
                                           "WHERE id = ANY($1::uuid[])", live)
        assert [r["feedback_count"] for r in feedback_counts] == [40] * len(live)
        assert all(abs(r["usefulness"] - 1.0) < 1e-6 for r in feedback_counts)
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE id = ANY($1::uuid[])", expired) == 0
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE id = ANY($1::uuid[])", live) == len(live)
        # The BM25 statistics the deletes' trigger keeps stay exact.
        docs_after = await conn.fetchval("SELECT sum(n_docs) FROM memory_lex_stats WHERE org_id = $1", org)
        assert docs_after == docs_before - len(expired)
        assert docs_after == await conn.fetchval("SELECT count(*) FROM memories WHERE org_id = $1", org)
    finally:
        await conn.close()


async def test_maintain_runs_from_two_instances_take_turns(instances: Instances) -> None:
    async with httpx.AsyncClient(headers=instances.headers, timeout=60) as http:
        r = await http.post(f"{instances.urls[0]}/v1/memories", json={"memories": [
            {"text": f"Maintenance row {i}."} for i in range(5)]})
        assert r.status_code == 201, r.text
    owners = [await asyncpg.connect(instances.owner_dsn) for _ in range(2)]
    try:
        runs = await asyncio.gather(*(maintenance.maintain(conn, threshold=5) for conn in owners))
        index = maintenance.index_name(instances.org_id)
        assert sorted(len(actions) for actions in runs) == [0, 1], runs  # one built it, the other found it built
        assert [a.index for actions in runs for a in actions] == [index]
        valid = await owners[0].fetchval("SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                                         "WHERE c.relname = $1", index)
        assert valid is True
        assert await maintenance.maintain(owners[1], threshold=5) == []
    finally:
        for conn in owners:
            await conn.close()

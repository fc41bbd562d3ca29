"""Per-org partial HNSW indexes (``service.retrieval.maintenance`` and ``pgcontext maintain``), on a small threshold."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from urllib.parse import unquote, urlsplit
from uuid import UUID

import asyncpg
import numpy as np
import pytest
from pgvector import Vector
from pgvector.asyncpg import register_vector

from service.db import migrate
from service.db.queries import query
from service.retrieval import maintenance
from service.retrieval.branches import semantic_args
from service.retrieval.types import SearchFilters
from tests.integration.test_cli import clean_env, run
from tests.servers import fresh_database

THRESHOLD = 40


@pytest.fixture(scope="module")
def maint_db(pg_server: str, app_dsn: str) -> Iterator[tuple[str, str]]:
    """(owner DSN, app DSN) of a fresh migrated database: partial indexes are database-wide state.
    pgcontext_app is a cluster-wide role: keep the session's password (setting one derived from this
    database's DSN would lock every later test's new app connections out)."""
    with fresh_database(pg_server) as dsn:
        migrate.upgrade(dsn)
        yield dsn, migrate.app_dsn(dsn, unquote(urlsplit(app_dsn).password or ""))


async def _org_with_rows(conn: asyncpg.Connection, name: str, n: int, seed: int) -> UUID:
    org = UUID(str(await conn.fetchval("INSERT INTO orgs (name) VALUES ($1) RETURNING id", name)))
    vectors = np.random.default_rng(seed).normal(size=(n, 384)).astype(np.float32)
    await conn.executemany("INSERT INTO memories (org_id, text, embedding) VALUES ($1, $2, $3)",
                           [(org, f"memory {i} of {name}", Vector(v)) for i, v in enumerate(vectors)])
    return org


async def _partial(conn: asyncpg.Connection) -> dict[str, bool]:
    return {r["index"]: r["valid"] for r in await conn.fetch(query("maintenance.partial_indexes"))}


async def _semantic_plan(app_dsn: str, org: UUID) -> str:
    """EXPLAIN of the 6th execution of the service's semantic query, as pgcontext_app under RLS."""
    conn = await asyncpg.connect(app_dsn)
    try:
        vec = "[" + ",".join(["0.05"] * 384) + "]"
        async with conn.transaction(readonly=True):
            await conn.execute("SELECT set_config('pgcontext.org_id', $1, true)", str(org))
            # A 60-row org is cheaper to sort than to walk any graph; take the sort away so the test
            # sees which HNSW index the planner would pick (the partial one must be provable from org_id = $1).
            await conn.execute("SET LOCAL enable_sort = off; SET LOCAL hnsw.iterative_scan = relaxed_order")
            await conn.execute(f"PREPARE sem AS {query('retrieval.semantic_hnsw')}")
            # no filters, no rows scope: every further argument is a NULL or a boolean
            rest = ", ".join("NULL" if a is None else str(a).lower() for a in semantic_args(SearchFilters(), None))
            call = f"EXECUTE sem('{org}', '{vec}', 5, {rest})"
            for _ in range(5):
                await conn.execute(call)
            return "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE) {call}"))
    finally:
        await conn.close()


async def test_maintain_creates_uses_and_drops_partial_indexes(maint_db: tuple[str, str]) -> None:
    owner_dsn, app_dsn = maint_db
    conn = await asyncpg.connect(owner_dsn)
    await register_vector(conn)
    try:
        big = await _org_with_rows(conn, "maint-big", 60, seed=1)
        small = await _org_with_rows(conn, "maint-small", 10, seed=2)

        planned = await maintenance.maintain(conn, threshold=THRESHOLD, dry_run=True)
        assert [(a.kind, a.org_id) for a in planned] == [("create", big)]
        assert await _partial(conn) == {}  # dry run changed nothing

        done = await maintenance.maintain(conn, threshold=THRESHOLD)
        assert [(a.kind, a.index) for a in done] == [("create", maintenance.index_name(big))]
        assert await _partial(conn) == {maintenance.index_name(big): True}
        predicate = await conn.fetchval("SELECT pg_get_expr(indpred, indrelid) FROM pg_index "
                                        "WHERE indexrelid = $1::regclass", maintenance.index_name(big))
        assert str(big) in predicate
        assert await maintenance.maintain(conn, threshold=THRESHOLD) == []  # idempotent

        # The service's own query (custom plan on the 6th execution) uses the big org's graph,
        # and the small org's query cannot (the predicate does not hold for it).
        assert maintenance.index_name(big) in await _semantic_plan(app_dsn, big)
        assert maintenance.index_name(big) not in await _semantic_plan(app_dsn, small)

        # Hysteresis: shrinking to 25 rows (>= 40 * 0.5) keeps the index; 15 rows drops it.
        await conn.execute("DELETE FROM memories WHERE id IN (SELECT id FROM memories WHERE org_id = $1 LIMIT 35)", big)
        assert await maintenance.maintain(conn, threshold=THRESHOLD) == []
        await conn.execute("DELETE FROM memories WHERE id IN (SELECT id FROM memories WHERE org_id = $1 LIMIT 10)", big)
        dropped = await maintenance.maintain(conn, threshold=THRESHOLD)
        assert [(a.kind, a.index) for a in dropped] == [("drop", maintenance.index_name(big))]
        assert await _partial(conn) == {}

        # An INVALID leftover (a failed concurrent build) is dropped and rebuilt.
        await conn.execute(f"CREATE INDEX {maintenance.index_name(small)} ON memories "
                           f"USING hnsw (embedding vector_cosine_ops) WHERE org_id = '{small}'::uuid")
        await conn.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = $1::regclass",
                           maintenance.index_name(small))
        await conn.executemany("INSERT INTO memories (org_id, text, embedding) VALUES ($1, $2, $3)",
                               [(small, f"more {i}", Vector(np.full(384, 0.1 + i, dtype=np.float32)))
                                for i in range(40)])
        redone = await maintenance.maintain(conn, threshold=THRESHOLD)
        assert [a.kind for a in redone] == ["drop", "create"]
        assert await _partial(conn) == {maintenance.index_name(small): True}
    finally:
        await conn.close()


def test_maintain_cli(maint_db: tuple[str, str]) -> None:
    owner_dsn, _app = maint_db

    async def setup() -> UUID:
        conn = await asyncpg.connect(owner_dsn)
        await register_vector(conn)
        try:
            return await _org_with_rows(conn, "maint-cli", 8, seed=3)
        finally:
            await conn.close()

    org = asyncio.run(setup())
    env = clean_env(PGCONTEXT_DATABASE_URL=owner_dsn)
    out = run(env, "maintain", "--threshold", "1000000", "--dry-run").stdout
    assert "nothing to do" in out or "would drop" in out
    out = run(env, "maintain", "--threshold", "5").stdout
    assert f"create {maintenance.index_name(org)}" in out
    assert run(env, "maintain", "--threshold", "5").stdout.strip() == "nothing to do"


def test_index_names_round_trip() -> None:
    org = UUID("0191d2a4-7b7e-7c3e-9f00-0123456789ab")
    name = maintenance.index_name(org)
    assert len(name) <= 63 and maintenance.org_of(name) == org
    assert maintenance.org_of("memories_embedding_hnsw") is None
    assert maintenance.org_of(maintenance.INDEX_PREFIX + "zz") is None

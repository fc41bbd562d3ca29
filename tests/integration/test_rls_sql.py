"""Row-level security at the SQL level, as the service role: isolation does not depend on handlers."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from tests.conftest import Tenant

TENANT_TABLES = ["orgs", "memories", "directives", "idempotency_keys"]
"""Tables the service role may read (api_keys it may not read at all)."""


@pytest.fixture
async def populated(client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant,
                    owner_dsn: str) -> tuple[Tenant, Tenant]:
    """Both orgs hold a memory (with an idempotency key) and a directive."""
    for t in (tenant, other_tenant):
        r = await client.post("/v1/memories", json={"text": f"{t.name} data"},
                              headers={**t.headers, "Idempotency-Key": "rls"})
        assert r.status_code == 201
        r = await client.put("/v1/agents/a/directive", json={"content": "hi"}, headers=t.headers)
        assert r.status_code == 200
    owner = await asyncpg.connect(owner_dsn)
    try:
        for table in TENANT_TABLES:  # the rows really are there
            assert await owner.fetchval(f"SELECT count(*) FROM {table}") >= 2
    finally:
        await owner.close()
    return tenant, other_tenant


async def _scoped(conn: asyncpg.Connection, org_id: UUID) -> None:
    await conn.execute("SELECT set_config('pgcontext.org_id', $1, true)", str(org_id))


@pytest.mark.parametrize("table", TENANT_TABLES)
async def test_no_org_set_sees_nothing(app_conn: asyncpg.Connection, populated: tuple[Tenant, Tenant],
                                       table: str) -> None:
    assert await app_conn.fetchval(f"SELECT count(*) FROM {table}") == 0
    async with app_conn.transaction():  # an empty setting is the same as none
        await app_conn.execute("SELECT set_config('pgcontext.org_id', '', true)")
        assert await app_conn.fetchval(f"SELECT count(*) FROM {table}") == 0


async def test_org_set_sees_only_its_rows(app_conn: asyncpg.Connection, populated: tuple[Tenant, Tenant]) -> None:
    a, b = populated
    async with app_conn.transaction():
        await _scoped(app_conn, a.org_id)
        for table in ("memories", "directives", "idempotency_keys"):
            orgs = {r[0] for r in await app_conn.fetch(f"SELECT DISTINCT org_id FROM {table}")}
            assert orgs == {a.org_id}, table
        assert [r["id"] for r in await app_conn.fetch("SELECT id FROM orgs")] == [a.org_id]
        # Even naming the other org explicitly finds nothing.
        assert await app_conn.fetchval("SELECT count(*) FROM memories WHERE org_id = $1", b.org_id) == 0


async def test_cross_org_writes_are_rejected(app_conn: asyncpg.Connection, populated: tuple[Tenant, Tenant]) -> None:
    a, b = populated
    for sql, args in [
        ("INSERT INTO memories (org_id, text) VALUES ($1, 'smuggled')", (b.org_id,)),
        ("INSERT INTO directives (org_id, agent_id, content) VALUES ($1, 'x', 'smuggled')", (b.org_id,)),
        ("UPDATE memories SET org_id = $1", (b.org_id,)),
    ]:
        with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
            async with app_conn.transaction():
                await _scoped(app_conn, a.org_id)
                await app_conn.execute(sql, *args)
    async with app_conn.transaction():  # updates and deletes of B's rows silently match nothing
        await _scoped(app_conn, a.org_id)
        assert await app_conn.execute("UPDATE memories SET text = 'x' WHERE org_id = $1", b.org_id) == "UPDATE 0"
        assert await app_conn.execute("DELETE FROM memories WHERE org_id = $1", b.org_id) == "DELETE 0"
    with pytest.raises(asyncpg.InsufficientPrivilegeError):  # no org at all: no insert either
        await app_conn.execute("INSERT INTO memories (org_id, text) VALUES ($1, 'unscoped')", a.org_id)


@pytest.mark.parametrize("sql", [
    "ALTER TABLE memories DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE memories NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY tenant_isolation ON memories",
    "CREATE POLICY open_door ON memories USING (true)",
    "SET ROLE postgres",
    "SET SESSION AUTHORIZATION postgres",
    "ALTER ROLE pgcontext_app BYPASSRLS",
    "GRANT SELECT ON api_keys TO pgcontext_app",
    "CREATE TABLE sneaky (id int)",
])
async def test_service_role_cannot_escape_rls(app_conn: asyncpg.Connection, sql: str) -> None:
    with pytest.raises(asyncpg.PostgresError) as info:
        await app_conn.execute(sql)
    assert info.value.sqlstate == "42501"  # insufficient_privilege


async def test_row_security_off_errors_instead_of_showing_rows(app_conn: asyncpg.Connection,
                                                               populated: tuple[Tenant, Tenant]) -> None:
    await app_conn.execute("SET row_security = off")
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="row-level security"):
        await app_conn.fetch("SELECT * FROM memories")


async def test_service_role_attributes(app_conn: asyncpg.Connection) -> None:
    role = await app_conn.fetchrow(
        "SELECT rolname, rolsuper, rolbypassrls, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user")
    assert role is not None and role["rolname"] == "pgcontext_app"
    assert not role["rolsuper"] and not role["rolbypassrls"] and not role["rolcreaterole"] and not role["rolcreatedb"]
    owned = await app_conn.fetchval(
        "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)")
    assert owned == 0
    owned_functions = await app_conn.fetchval(
        "SELECT count(*) FROM pg_proc WHERE proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)")
    assert owned_functions == 0
    # Not a member of any role it could SET ROLE to.
    assert await app_conn.fetchval(
        "SELECT count(*) FROM pg_auth_members WHERE member = (SELECT oid FROM pg_roles WHERE rolname = current_user)"
    ) == 0


async def test_every_tenant_table_forces_rls(app_conn: asyncpg.Connection) -> None:
    rows = await app_conn.fetch(
        "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
        "WHERE relname = ANY($1::text[]) AND relkind = 'r'", [*TENANT_TABLES, "api_keys"])
    assert {r["relname"] for r in rows} == {*TENANT_TABLES, "api_keys"}
    assert all(r["relrowsecurity"] and r["relforcerowsecurity"] for r in rows)


async def test_every_table_with_an_org_id_forces_rls(app_conn: asyncpg.Connection) -> None:
    rows = await app_conn.fetch(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public' "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'org_id' AND NOT a.attisdropped "
        "WHERE c.relkind IN ('r', 'p')")
    names = {r["relname"] for r in rows}
    assert {*TENANT_TABLES, "memory_access", "memory_postings", "documents", "cache_epochs"} - {"orgs"} <= names
    assert [r["relname"] for r in rows if not (r["relrowsecurity"] and r["relforcerowsecurity"])] == []


async def test_access_statistics_rows_are_org_scoped(app_conn: asyncpg.Connection,
                                                     populated: tuple[Tenant, Tenant]) -> None:
    a, b = populated
    async with app_conn.transaction():
        await _scoped(app_conn, a.org_id)
        mine = await app_conn.fetchval("SELECT id FROM memories LIMIT 1")
        await app_conn.execute("INSERT INTO memory_access (org_id, memory_id, access_count, last_accessed_at) "
                               "VALUES ($1, $2, 3, now())", a.org_id, mine)
    async with app_conn.transaction():
        await _scoped(app_conn, b.org_id)
        assert await app_conn.fetchval("SELECT count(*) FROM memory_access") == 0
        assert await app_conn.fetchval("UPDATE memory_access SET access_count = 0 RETURNING 1") is None
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # WITH CHECK: not in another org's name
            await app_conn.execute("INSERT INTO memory_access (org_id, memory_id, access_count, last_accessed_at) "
                                   "VALUES ($1, $2, 1, now())", a.org_id, mine)
    async with app_conn.transaction():
        await _scoped(app_conn, a.org_id)
        assert await app_conn.fetchval("SELECT access_count FROM memory_access WHERE memory_id = $1", mine) == 3


async def test_cannot_read_api_keys(app_conn: asyncpg.Connection, populated: tuple[Tenant, Tenant]) -> None:
    a, _ = populated
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await app_conn.fetch("SELECT * FROM api_keys")
    async with app_conn.transaction():  # not even its own org's keys
        await _scoped(app_conn, a.org_id)
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await app_conn.fetch("SELECT key_hash FROM api_keys")

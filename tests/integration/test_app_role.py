"""What the service's role (``pgcontext_app``) may do beyond its grants on pgcontext's tables: nothing a
tenant's request could use against another. No temporary objects in the database, and no view of other
sessions' statements in ``pg_stat_activity`` (every org's requests run as this one role, so by default
each session could read the others' query text)."""

from __future__ import annotations

import asyncpg
import pytest

SECRET = "SELECT 'statement of another session' AS marker"


async def test_no_temporary_tables(app_conn: asyncpg.Connection) -> None:
    assert await app_conn.fetchval(
        "SELECT has_database_privilege('pgcontext_app', current_database(), 'TEMPORARY')") is False
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await app_conn.execute("CREATE TEMP TABLE scratch (x int)")


async def test_other_sessions_statements_are_not_visible(app_conn: asyncpg.Connection, app_dsn: str,
                                                         owner_dsn: str) -> None:
    sessions = [await asyncpg.connect(app_dsn), await asyncpg.connect(owner_dsn)]
    try:
        for other in sessions:
            await other.execute(SECRET)  # stays as each session's last statement while it idles
        for probe in ("SELECT query FROM pg_stat_activity",
                      "SELECT pg_stat_get_backend_activity(s) FROM pg_stat_get_backend_idset() AS s"):
            try:
                texts = [r[0] for r in await app_conn.fetch(probe)]
            except asyncpg.InsufficientPrivilegeError:
                continue
            assert not [t for t in texts if t and "another session" in t], (probe, texts)
        # What a monitoring role is granted for this (pg_read_all_stats, in pg_monitor) still reads them.
        owner = sessions[1]
        texts = [r[0] for r in await owner.fetch("SELECT query FROM pg_stat_activity")]
        assert SECRET in texts
    finally:
        for other in sessions:
            await other.close()


async def test_the_grants_are_what_the_migration_says(owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        for function in ("pg_stat_get_activity(integer)", "pg_stat_get_backend_activity(integer)"):
            assert await conn.fetchval("SELECT has_function_privilege('pgcontext_app', $1, 'EXECUTE')",
                                       f"pg_catalog.{function}") is False
            assert await conn.fetchval("SELECT has_function_privilege('pg_read_all_stats', $1, 'EXECUTE')",
                                       f"pg_catalog.{function}") is True
        assert await conn.fetchval("SELECT pg_has_role('pgcontext_app', 'pg_read_all_stats', 'MEMBER')") is False
    finally:
        await conn.close()

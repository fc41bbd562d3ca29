"""``Database.tenant``: BEGIN and the org scope in one round trip, and nothing of a transaction survives
into the next use of its pooled connection — not after an error, not after a cancelled query."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import UUID, uuid4

import asyncpg
import pytest

from service.db import Database, create_pool
from service.errors import ServiceUnavailable
from tests.conftest import Tenant


@pytest.fixture
async def one_connection(app_dsn: str) -> AsyncIterator[tuple[Database, asyncpg.Pool]]:
    pool = await create_pool(app_dsn, min_size=1, max_size=1)  # every use gets the same connection
    try:
        yield Database(pool, statement_timeout_ms=5000), pool
    finally:
        await pool.close()


async def _clean(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        assert not conn.is_in_transaction()
        assert await conn.fetchval("SELECT current_setting('pgcontext.org_id', true)") in (None, "")
        assert await conn.fetchval("SHOW statement_timeout") != "50ms"


async def test_scope_timeout_and_read_only(one_connection: tuple[Database, asyncpg.Pool], tenant: Tenant) -> None:
    db, pool = one_connection
    async with db.tenant(tenant.org_id, timeout_ms=50, readonly=True) as tx:
        assert UUID(await tx.conn.fetchval("SELECT current_setting('pgcontext.org_id')")) == tenant.org_id
        assert await tx.conn.fetchval("SHOW statement_timeout") == "50ms"
        assert await tx.conn.fetchval("SHOW transaction_read_only") == "on"
    await _clean(pool)
    with pytest.raises(ServiceUnavailable) as caught:  # the timeout is Postgres's own
        async with db.tenant(tenant.org_id, timeout_ms=50) as tx:
            await tx.conn.execute("SELECT pg_sleep(2)")
    assert caught.value.code == "query_timeout"
    await _clean(pool)


async def test_an_error_inside_rolls_back(one_connection: tuple[Database, asyncpg.Pool], tenant: Tenant) -> None:
    db, pool = one_connection
    with pytest.raises(RuntimeError):
        async with db.tenant(tenant.org_id) as tx:
            await tx.conn.execute("INSERT INTO directives (org_id, agent_id, content) VALUES ($1, 'tx-test', 'x')",
                                  tenant.org_id)
            raise RuntimeError("the caller failed")
    await _clean(pool)
    async with db.tenant(tenant.org_id) as tx:
        assert await tx.conn.fetchval("SELECT count(*) FROM directives WHERE agent_id = 'tx-test'") == 0


async def test_a_cancelled_query_leaves_nothing_behind(one_connection: tuple[Database, asyncpg.Pool],
                                                       tenant: Tenant) -> None:
    db, pool = one_connection

    async def slow() -> None:
        async with db.tenant(tenant.org_id) as tx:
            await tx.conn.execute("SELECT pg_sleep(5)")

    task = asyncio.ensure_future(slow())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _clean(pool)
    async with db.tenant(uuid4()) as tx:  # the next tenant on the same connection sees only itself
        assert await tx.conn.fetchval("SELECT count(*) FROM memories") == 0


async def test_settings_begin_with_the_transaction_and_end_with_it(one_connection: tuple[Database, asyncpg.Pool],
                                                                   tenant: Tenant) -> None:
    db, pool = one_connection
    settings = {"hnsw.ef_search": "77", "plan_cache_mode": "force_generic_plan", "application_name": "o'brien; x"}
    async with db.tenant(tenant.org_id, settings=settings) as tx:
        assert await tx.conn.fetchval("SHOW hnsw.ef_search") == "77"
        assert await tx.conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
        assert await tx.conn.fetchval("SHOW application_name") == "o'brien; x"  # a value, quoted as a literal
        await tx.set_local({"hnsw.ef_search": "77", "hnsw.iterative_scan": "strict_order"})  # only the new one is sent
        assert await tx.conn.fetchval("SHOW hnsw.iterative_scan") == "strict_order"
    await _clean(pool)
    async with pool.acquire() as conn:
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"  # the pool's session default
    with pytest.raises(ValueError, match="not a setting name"):
        async with db.tenant(tenant.org_id, settings={"statement_timeout', '0', true); --": "1"}):
            pass
    await _clean(pool)


async def test_the_connection_goes_back_after_the_block_without_the_caller_waiting(
        app_dsn: str, tenant: Tenant) -> None:
    pool = await create_pool(app_dsn, min_size=1, max_size=1)
    db = Database(pool, statement_timeout_ms=5000)
    try:
        async with db.tenant(tenant.org_id, readonly=True) as tx:
            await tx.conn.fetchval("SELECT 1")
        # The caller goes on at once; the release (asyncpg's shielded task) is still under way.
        assert pool.get_idle_size() == 0
        async with db.tenant(tenant.org_id, readonly=True) as tx:  # the one connection comes back for it
            assert UUID(await tx.conn.fetchval("SELECT current_setting('pgcontext.org_id')")) == tenant.org_id
    finally:
        await db.close()  # waits for the release in flight, then closes the pool
    assert pool.is_closing()

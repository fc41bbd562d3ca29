"""``Database.tenant``: BEGIN and the org scope in one round trip, and nothing of a transaction survives
into the next use of its pooled connection — not after an error, not after a cancelled query."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
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


async def test_a_read_only_block_returns_before_its_transaction_ends(
        one_connection: tuple[Database, asyncpg.Pool], tenant: Tenant) -> None:
    """A read has nothing to commit: the caller goes on with its rows at once, and the background
    release ends the transaction before the connection is pooled again (a write still waits for
    its COMMIT)."""
    db, pool = one_connection
    async with db.tenant(tenant.org_id, readonly=True) as tx:
        conn = tx.conn
        assert await tx.conn.fetchval("SELECT 1") == 1
    assert conn.is_in_transaction()  # not yet ended: no COMMIT round trip was awaited
    await _clean(pool)  # ... and ended before anyone else got the connection
    async with db.tenant(tenant.org_id) as tx:
        conn = tx.conn
        await tx.conn.fetchval("SELECT 1")
    assert not conn.is_in_transaction()  # a write's COMMIT is awaited


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


async def test_the_next_org_on_a_pooled_connection_sees_nothing_of_the_last(
        one_connection: tuple[Database, asyncpg.Pool], tenant: Tenant, other_tenant: Tenant) -> None:
    """One connection serving two orgs in turn: each read sees only its own org, by id or at all."""
    db, pool = one_connection
    async with db.tenant(tenant.org_id) as tx:
        await tx.conn.execute("INSERT INTO directives (org_id, agent_id, content) VALUES ($1, 'pooled', 'mine')",
                              tenant.org_id)
    for _ in range(3):
        async with db.tenant(tenant.org_id, readonly=True, timeout_ms=50) as tx:
            assert await tx.conn.fetchval("SELECT content FROM directives WHERE agent_id = 'pooled'") == "mine"
        await _clean(pool)
        async with db.tenant(other_tenant.org_id, readonly=True) as tx:
            assert await tx.conn.fetchval("SELECT count(*) FROM directives WHERE agent_id = 'pooled'") == 0
            assert await tx.conn.fetchval("SELECT count(*) FROM directives WHERE org_id = $1", tenant.org_id) == 0
    async with db.tenant(tenant.org_id) as tx:
        await tx.conn.execute("DELETE FROM directives WHERE agent_id = 'pooled'")


# -- a server that stops answering ------------------------------------------------------------------


async def backend_pid(pool: asyncpg.Pool) -> int:
    async with pool.acquire() as conn:
        return int(conn.get_server_pid())


@contextlib.asynccontextmanager
async def backend_stopped(pid: int, safety_s: float = 4.0) -> AsyncIterator[Callable[[], None]]:
    """SIGSTOP the server process ``pid`` (the backend of a pool's only connection: a hung server for
    that connection alone, the rest of the shared test cluster runs on). Yields ``resume``; resumed
    after ``safety_s`` at the latest (so a regression fails the test instead of hanging it) and on exit."""
    os.kill(pid, signal.SIGSTOP)

    def resume() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    safety = asyncio.get_running_loop().call_later(safety_s, resume)
    try:
        yield resume
    finally:
        safety.cancel()
        resume()


async def _returned(db: Database, pool: asyncpg.Pool, timeout_s: float = 10) -> None:
    """Wait until the background clean-up has given the connection back (or terminated it)."""
    deadline = time.monotonic() + timeout_s
    while db._releasing or pool.get_idle_size() < 1:
        assert time.monotonic() < deadline, "the connection did not come back to the pool"
        await asyncio.sleep(0.02)


def _resetting(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "Resetting connection with an active" in r.getMessage()]


async def test_a_task_cancelled_while_begin_is_in_flight_leaves_no_open_transaction(
        app_dsn: str, tenant: Tenant, caplog: pytest.LogCaptureFixture) -> None:
    """A branch's timeout that cancels its task while BEGIN is in flight: the connection used to go
    back to the pool inside the transaction, and asyncpg logged "Resetting connection with an active
    transaction". The server is paused so BEGIN is surely in flight when the task is cancelled."""
    pool = await create_pool(app_dsn, min_size=1, max_size=1)
    db = Database(pool, statement_timeout_ms=5000, cleanup_timeout_ms=3000)
    try:
        async with backend_stopped(await backend_pid(pool)) as resume:
            async def work() -> None:
                async with db.tenant(tenant.org_id) as tx:
                    await tx.fetchval("directives.get", tenant.org_id, "x")

            task = asyncio.ensure_future(work())
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 1.0)  # the caller is not held by the clean-up
            resume()
            await _returned(db, pool)
        await _clean(pool)
        await asyncio.sleep(0.1)
        assert not _resetting(caplog)
    finally:
        await db.close()


async def test_a_hung_server_answers_503_within_the_client_bounds(app_dsn: str, tenant: Tenant,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """With the server stopped, acquire + BEGIN, a statement, the API-key lookup and the
    readiness ping each end within their client-side bound with 503 database_unavailable."""
    pool = await create_pool(app_dsn, min_size=1, max_size=1)
    db = Database(pool, statement_timeout_ms=300, acquire_timeout_ms=300, client_grace_ms=200,
                  cleanup_timeout_ms=3000)
    try:
        async with db.tenant(tenant.org_id) as tx:  # warm: the connection exists
            await tx.fetchval("directives.get", tenant.org_id, "x")
        await _returned(db, pool)
        async with backend_stopped(await backend_pid(pool)):
            started = time.monotonic()
            with pytest.raises(ServiceUnavailable) as caught:
                async with db.tenant(tenant.org_id) as tx:
                    await tx.fetchval("directives.get", tenant.org_id, "x")
            assert caught.value.code == "database_unavailable" and caught.value.details.get("timed_out")
            assert time.monotonic() - started < 0.3 + 0.4  # the acquire bound (BEGIN never answered)
            for probe in (db.resolve_api_key(b"\x00" * 32, 0.2), db.ping(0.2)):
                started = time.monotonic()
                with pytest.raises(ServiceUnavailable):
                    await probe  # the only connection is still being cleaned up, or the server is stopped
                assert time.monotonic() - started < 0.2 + 0.4
        await _returned(db, pool)
        async with db.tenant(tenant.org_id) as tx:  # recovered, no restart
            assert await tx.fetchval("directives.get", tenant.org_id, "x") is None
        await _clean(pool)
        assert await db.ping(1.0)

        # A statement begun on a live server, which then stops: statement_timeout + grace, then 503.
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as caught:
            async with db.tenant(tenant.org_id) as tx, backend_stopped(tx.conn.get_server_pid()):
                started = time.monotonic()
                await tx.fetchval("directives.get", tenant.org_id, "x")
        assert caught.value.code == "database_unavailable"
        assert 0.3 + 0.2 - 0.05 < time.monotonic() - started < 0.3 + 0.2 + 0.4
        await _returned(db, pool)
        await _clean(pool)
        assert not _resetting(caplog)
    finally:
        await db.close()


async def test_asyncpg_client_state_errors_are_503(one_connection: tuple[Database, asyncpg.Pool],
                                                   tenant: Tenant) -> None:
    """asyncpg's own state errors after the server died mid-statement (seen at COMMIT:
    "cannot switch to state 15; another operation (2) is in progress") are 503, not 500."""
    db, pool = one_connection
    for error in (asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress"),
                  asyncpg.InterfaceError("connection was closed in the middle of operation"),
                  asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
                  ConnectionResetError("reset by peer")):
        with pytest.raises(ServiceUnavailable) as caught:
            async with db.tenant(tenant.org_id) as tx:
                await tx.fetchval("directives.get", tenant.org_id, "x")
                raise error
        assert caught.value.code == "database_unavailable", error
    await _returned(db, pool)
    await _clean(pool)

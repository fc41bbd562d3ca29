"""The one way to run tenant work: a transaction with the org set.

``Database`` does not expose its pool. Handlers and repositories get a :class:`TenantTx` from
``db.tenant(org_id)``; it runs named queries inside a transaction in which
``pgcontext.org_id`` is set (``set_config(..., is_local => true)``), so row-level security scopes
every statement. A query that forgets the org is not an isolation bug: it sees nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

import asyncpg
import asyncpg.pool
import structlog

from service.db.errors import translate
from service.db.queries import query

if TYPE_CHECKING:
    from service.db.replicas import ReplicaSet

T = TypeVar("T")

log = structlog.get_logger(__name__)
_GUC_NAME = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _begin(org_id: UUID, timeout_ms: int, readonly: bool, settings: Mapping[str, str]) -> str:
    """BEGIN and the transaction-local settings in one simple-query round trip (instead of two or three).

    Inlined: a UUID re-rendered from its 128 bits (hex and dashes), an int, GUC names checked against
    ``_GUC_NAME`` and values quoted as SQL literals.
    """
    pairs = [("pgcontext.org_id", str(UUID(int=org_id.int))), ("statement_timeout", str(int(timeout_ms))),
             *settings.items()]
    for name, _ in pairs:
        if not _GUC_NAME.match(name):
            raise ValueError(f"not a setting name: {name!r}")
    calls = ", ".join(f"set_config({_literal(name)}, {_literal(value)}, true)" for name, value in pairs)
    return f"BEGIN{' READ ONLY' if readonly else ''}; SELECT {calls}"


async def _rollback(conn: asyncpg.Connection) -> None:
    # Best effort: if it cannot run (the connection broke, or a cancelled query is still unwinding),
    # the pool's release rolls the open transaction back before the connection is reused.
    with contextlib.suppress(Exception):
        if not conn.is_closed() and conn.is_in_transaction():
            await conn.execute("ROLLBACK")


class TenantTx:
    """A connection inside an org-scoped transaction; runs named queries from ``sql/``."""

    __slots__ = ("conn", "org_id", "preset")

    def __init__(self, conn: asyncpg.Connection, org_id: UUID, preset: Mapping[str, str] | None = None) -> None:
        self.conn = conn
        self.org_id = org_id
        self.preset = dict(preset or {})
        """Settings already applied when the transaction began (``Database.tenant(settings=...)``)."""

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self.conn.fetch(query(name), *args))

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        return await self.conn.fetchrow(query(name), *args)

    async def fetchval(self, name: str, *args: Any) -> Any:
        return await self.conn.fetchval(query(name), *args)

    async def execute(self, name: str, *args: Any) -> str:
        return str(await self.conn.execute(query(name), *args))

    async def executemany(self, name: str, args: Iterable[Sequence[Any]]) -> None:
        await self.conn.executemany(query(name), args)

    async def set_local(self, settings: Mapping[str, str]) -> None:
        """Set planner/executor GUCs for this transaction only (``{"hnsw.ef_search": "100"}``), in one
        round trip. Settings the transaction began with (same value) cost nothing; if all are, there
        is no round trip."""
        wanted = {name: value for name, value in settings.items() if self.preset.get(name) != value}
        if not wanted:
            return
        calls = ", ".join(f"set_config(${2 * i + 1}, ${2 * i + 2}, true)" for i in range(len(wanted)))
        args = [part for name, value in wanted.items() for part in (name, value)]
        await self.conn.execute(f"SELECT {calls}", *args)
        self.preset.update(wanted)


class Database:
    def __init__(self, pool: asyncpg.Pool, *, statement_timeout_ms: int, replicas: ReplicaSet | None = None) -> None:
        self._pool = pool
        self.statement_timeout_ms = statement_timeout_ms
        self.replicas = replicas
        """Read replicas (``PGCONTEXT_READ_DATABASE_URLS``); None: every read runs on the primary."""
        self._releasing: set[asyncio.Future[None]] = set()

    def _release_soon(self, pool: asyncpg.Pool, conn: asyncpg.pool.PoolConnectionProxy) -> None:
        """Give ``conn`` back to ``pool`` without making the caller wait for it.

        asyncpg's ``release`` runs in a shielded task of its own; awaiting it costs the caller two
        event-loop turns, each behind every other ready callback (milliseconds under load), for
        bookkeeping that normally needs no round trip here (the transaction has ended and ``reset``
        is a no-op, see ``service.db.pool``). If a rollback after an error could not run, ``release``
        rolls back itself; if the connection broke, it terminates it."""
        releasing = asyncio.ensure_future(pool.release(conn))
        self._releasing.add(releasing)
        releasing.add_done_callback(self._released)

    def _released(self, releasing: asyncio.Future[None]) -> None:
        self._releasing.discard(releasing)
        if not releasing.cancelled() and releasing.exception() is not None:
            log.warning("pool_release_failed", error=repr(releasing.exception())[:300])

    @contextlib.asynccontextmanager
    async def tenant(self, org_id: UUID, *, timeout_ms: int | None = None, readonly: bool = False,
                     settings: Mapping[str, str] | None = None) -> AsyncIterator[TenantTx]:
        """Yield a TenantTx for ``org_id`` on the primary; commits on success, rolls back on error.

        ``timeout_ms`` becomes the transaction's ``statement_timeout`` so Postgres stops working
        when a caller's branch deadline passes, not only the client. ``settings``: more GUCs set
        LOCAL in the same round trip as BEGIN (e.g. ``{"hnsw.ef_search": "100"}``). With read
        replicas configured, a write transaction records the org's WAL position after its commit
        (see ``service.db.replicas``); reads that may use a replica go through :meth:`read`.
        """
        try:
            async with self._transaction(self._pool, org_id, timeout_ms, readonly, settings) as tx:
                yield tx
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            raise mapped from exc

    @contextlib.asynccontextmanager
    async def _transaction(self, pool: asyncpg.Pool, org_id: UUID, timeout_ms: int | None, readonly: bool,
                           settings: Mapping[str, str] | None) -> AsyncIterator[TenantTx]:
        begin = _begin(org_id, timeout_ms if timeout_ms is not None else self.statement_timeout_ms, readonly,
                       settings or {})
        conn = await pool.acquire()
        try:
            await conn.execute(begin)
            try:
                yield TenantTx(conn, org_id, settings)
            except BaseException:
                await _rollback(conn)
                raise
            await conn.execute("COMMIT")
            if not readonly and self.replicas is not None and pool is self._pool:
                from service.db.replicas import WRITE_LSN

                await self.replicas.note_write(org_id, int(await conn.fetchval(WRITE_LSN)))
        finally:
            self._release_soon(pool, conn)

    async def read(self, org_id: UUID, work: Callable[[TenantTx], Awaitable[T]], *, timeout_ms: int | None = None,
                   settings: Mapping[str, str] | None = None) -> T:
        """``work`` in a read-only tenant transaction: on a read replica that has replayed the org's
        last write (see ``service.db.replicas``), else on the primary. ``work`` may run twice: when
        the replica fails under it, it runs again on the primary."""
        if self.replicas is not None:
            from service.db.replicas import READS, SKIPS, is_lost

            replica = await self.replicas.route(org_id)
            if replica is not None and replica.pool is not None:
                try:
                    async with self._transaction(replica.pool, org_id, timeout_ms, True, settings) as tx:
                        result = await work(tx)
                    READS.labels("replica").inc()
                    return result
                except Exception as exc:
                    if not is_lost(exc):
                        mapped = translate(exc)
                        if mapped is None:
                            raise
                        raise mapped from exc
                    log.warning("read_replica_failed", replica=replica.index, error=repr(exc)[:300])
                    replica.mark_down()
                    SKIPS.labels("failed").inc()
            READS.labels("primary").inc()
        async with self.tenant(org_id, timeout_ms=timeout_ms, readonly=True, settings=settings) as tx:
            return await work(tx)

    async def resolve_api_key(self, key_hash: bytes) -> UUID | None:
        """Map a key hash to its org, through the SECURITY DEFINER lookup (no tenant scope yet)."""
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(query("auth.resolve_key"), key_hash)
        return None if row is None else UUID(str(row["org_id"]))

    async def ping(self) -> bool:
        async with self._pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT 1"))

    async def close(self) -> None:
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)
        if self.replicas is not None:
            await self.replicas.aclose()
        await self._pool.close()

"""The one way to run tenant work: a transaction with the org set.

``Database`` does not expose its pool. Handlers and repositories get a :class:`TenantTx` from
``db.tenant(org_id)``; it runs named queries inside a transaction in which
``pgcontext.org_id`` is set (``set_config(..., is_local => true)``), so row-level security scopes
every statement. A query that forgets the org is not an isolation bug: it sees nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any
from uuid import UUID

import asyncpg

from service.db.errors import translate
from service.db.queries import query


def _begin(org_id: UUID, timeout_ms: int, readonly: bool) -> str:
    """BEGIN and the transaction-local scope in one simple-query round trip (instead of two).

    Only values we produce are inlined: a UUID re-rendered from its 128 bits (hex and dashes) and an int.
    """
    return (f"BEGIN{' READ ONLY' if readonly else ''}; "
            f"SELECT set_config('pgcontext.org_id', '{UUID(int=org_id.int)}', true), "
            f"set_config('statement_timeout', '{int(timeout_ms)}', true)")


async def _rollback(conn: asyncpg.Connection) -> None:
    # Best effort: if it cannot run (the connection broke, or a cancelled query is still unwinding),
    # the pool's release rolls the open transaction back before the connection is reused.
    with contextlib.suppress(Exception):
        if not conn.is_closed() and conn.is_in_transaction():
            await conn.execute("ROLLBACK")


class TenantTx:
    """A connection inside an org-scoped transaction; runs named queries from ``sql/``."""

    __slots__ = ("conn", "org_id")

    def __init__(self, conn: asyncpg.Connection, org_id: UUID) -> None:
        self.conn = conn
        self.org_id = org_id

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

    async def set_local(self, **settings: str) -> None:
        """Set planner/executor GUCs for this transaction only, in one round trip.

        Keyword names use ``__`` for the dot: ``set_local(hnsw__ef_search="100")``."""
        calls = ", ".join(f"set_config(${2 * i + 1}, ${2 * i + 2}, true)" for i in range(len(settings)))
        args = [part for name, value in settings.items() for part in (name.replace("__", "."), value)]
        await self.conn.execute(f"SELECT {calls}", *args)


class Database:
    def __init__(self, pool: asyncpg.Pool, *, statement_timeout_ms: int) -> None:
        self._pool = pool
        self.statement_timeout_ms = statement_timeout_ms

    @contextlib.asynccontextmanager
    async def tenant(self, org_id: UUID, *, timeout_ms: int | None = None,
                     readonly: bool = False) -> AsyncIterator[TenantTx]:
        """Yield a TenantTx for ``org_id``; commits on success, rolls back on error.

        ``timeout_ms`` becomes the transaction's ``statement_timeout`` so Postgres stops working
        when a caller's branch deadline passes, not only the client.
        """
        begin = _begin(org_id, timeout_ms if timeout_ms is not None else self.statement_timeout_ms, readonly)
        try:
            async with self._pool.acquire() as conn:
                await conn.execute(begin)
                try:
                    yield TenantTx(conn, org_id)
                except BaseException:
                    await _rollback(conn)
                    raise
                await conn.execute("COMMIT")
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            raise mapped from exc

    async def resolve_api_key(self, key_hash: bytes) -> UUID | None:
        """Map a key hash to its org, through the SECURITY DEFINER lookup (no tenant scope yet)."""
        async with self._pool.acquire() as conn:
            row = await conn.fetchrow(query("auth.resolve_key"), key_hash)
        return None if row is None else UUID(str(row["org_id"]))

    async def ping(self) -> bool:
        async with self._pool.acquire() as conn:
            return bool(await conn.fetchval("SELECT 1"))

    async def close(self) -> None:
        await self._pool.close()

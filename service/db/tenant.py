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
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import asyncpg.pool
import structlog

from service.db.errors import translate
from service.db.queries import query
from service.db.replicas import READS, SKIPS, WRITE_LSN, ReplicaSet, is_lost

log = structlog.get_logger(__name__)
T = TypeVar("T")
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


class TenantTx:
    """A connection inside an org-scoped transaction; runs named queries from ``sql/``.

    Every statement also has a client-side timeout (``timeout_s``: the transaction's
    ``statement_timeout`` plus ``DatabaseSettings.client_grace_ms``). Postgres normally ends a slow
    statement itself; the client-side bound is for a server that does not answer at all (stopped,
    hung, cut off), where ``statement_timeout`` never fires."""

    __slots__ = ("conn", "org_id", "preset", "timeout_s")

    def __init__(self, conn: asyncpg.Connection, org_id: UUID, preset: Mapping[str, str] | None = None,
                 timeout_s: float | None = None) -> None:
        self.conn = conn
        self.org_id = org_id
        self.preset = dict(preset or {})
        """Settings already applied when the transaction began (``Database.tenant(settings=...)``)."""
        self.timeout_s = timeout_s

    async def fetch(self, name: str, *args: Any) -> list[asyncpg.Record]:
        return list(await self.conn.fetch(query(name), *args, timeout=self.timeout_s))

    async def fetchrow(self, name: str, *args: Any) -> asyncpg.Record | None:
        return await self.conn.fetchrow(query(name), *args, timeout=self.timeout_s)

    async def fetchval(self, name: str, *args: Any) -> Any:
        return await self.conn.fetchval(query(name), *args, timeout=self.timeout_s)

    async def execute(self, name: str, *args: Any) -> str:
        return str(await self.conn.execute(query(name), *args, timeout=self.timeout_s))

    async def executemany(self, name: str, args: Iterable[Sequence[Any]]) -> None:
        await self.conn.executemany(query(name), args, timeout=self.timeout_s)

    async def set_local(self, settings: Mapping[str, str]) -> None:
        """Set planner/executor GUCs for this transaction only (``{"hnsw.ef_search": "100"}``), in one
        round trip. Settings the transaction began with (same value) cost nothing; if all are, there
        is no round trip."""
        wanted = {name: value for name, value in settings.items() if self.preset.get(name) != value}
        if not wanted:
            return
        calls = ", ".join(f"set_config(${2 * i + 1}, ${2 * i + 2}, true)" for i in range(len(wanted)))
        args = [part for name, value in wanted.items() for part in (name, value)]
        await self.conn.execute(f"SELECT {calls}", *args, timeout=self.timeout_s)
        self.preset.update(wanted)


class Database:
    """The pool behind one door: org-scoped transactions, the API-key lookup and the readiness ping.

    Nothing here waits on Postgres without a bound: getting a connection and BEGIN together take at
    most ``acquire_timeout_ms``, every statement at most its ``statement_timeout`` plus
    ``client_grace_ms`` (a stopped or unreachable server never answers, so Postgres's own timeout
    cannot fire); past either the caller gets 503 ``database_unavailable``. A connection whose
    transaction did not end cleanly (an error, a timeout, a cancelled task) is handed to a background
    task that waits for asyncpg's cancellation of the running statement, rolls back and returns it to
    the pool, or terminates it when that cannot finish within ``cleanup_timeout_ms``: the caller never
    waits for the clean-up (with a hung server it would wait for the whole outage), and the pool never
    receives a connection still inside a transaction (asyncpg logs "Resetting connection with an
    active transaction" when it does).
    """

    def __init__(self, pool: asyncpg.Pool, *, statement_timeout_ms: int, acquire_timeout_ms: int = 2000,
                 client_grace_ms: int = 1000, cleanup_timeout_ms: int = 5000,
                 replicas: ReplicaSet | None = None) -> None:
        self._pool = pool
        self.statement_timeout_ms = statement_timeout_ms
        self.replicas = replicas
        """Read replicas (``PGCONTEXT_READ_DATABASE_URLS``); None: every read runs on the primary."""
        self.acquire_timeout_ms = acquire_timeout_ms
        self.client_grace_ms = client_grace_ms
        self.cleanup_timeout_ms = cleanup_timeout_ms
        self._releasing: set[asyncio.Future[None]] = set()

    def _release_soon(self, conn: asyncpg.pool.PoolConnectionProxy, *, clean: bool = True,
                      pool: asyncpg.Pool | None = None) -> None:
        """Give ``conn`` back to its pool (``pool``, default the primary's) without making the caller wait.

        asyncpg's ``release`` runs in a shielded task of its own; awaiting it costs the caller two
        event-loop turns, each behind every other ready callback (milliseconds under load), for
        bookkeeping that normally needs no round trip here (the transaction has ended and ``reset``
        is a no-op, see ``service.db.pool``). ``clean=False``: the transaction (or a statement) may
        still be open (always, after a read-only one), see :meth:`_end_and_release`."""
        owner = pool or self._pool
        work = owner.release(conn, timeout=self.cleanup_timeout_ms / 1000) if clean \
            else self._end_and_release(conn, owner)
        releasing = asyncio.ensure_future(work)
        self._releasing.add(releasing)
        releasing.add_done_callback(self._released)

    async def _end_and_release(self, conn: asyncpg.pool.PoolConnectionProxy, pool: asyncpg.Pool) -> None:
        """Roll back what a failed or cancelled transaction left open (or end a read-only one, which
        has nothing to commit), then release; terminate the connection if that does not finish in
        time. asyncpg's next statement first waits for the cancellation of one a timeout or a task
        cancel interrupted (bounded here by the timeout)."""
        timeout_s = self.cleanup_timeout_ms / 1000
        try:
            if not conn.is_closed():
                await conn.execute("ROLLBACK", timeout=timeout_s)  # a no-op warning outside a transaction
        except (Exception, asyncio.CancelledError):
            if not conn.is_closed():
                conn.terminate()  # release() then hands the slot back without touching the socket
        await pool.release(conn, timeout=timeout_s)

    def _released(self, releasing: asyncio.Future[None]) -> None:
        self._releasing.discard(releasing)
        if not releasing.cancelled() and releasing.exception() is not None:
            log.warning("pool_release_failed", error=repr(releasing.exception())[:300])

    async def _acquire(self, timeout_s: float, pool: asyncpg.Pool | None = None) -> asyncpg.pool.PoolConnectionProxy:
        return await (pool or self._pool).acquire(timeout=timeout_s)

    @contextlib.asynccontextmanager
    async def tenant(self, org_id: UUID, *, timeout_ms: int | None = None, readonly: bool = False,
                     settings: Mapping[str, str] | None = None) -> AsyncIterator[TenantTx]:
        """Yield a TenantTx for ``org_id``; commits on success, rolls back on error.

        ``timeout_ms`` becomes the transaction's ``statement_timeout`` so Postgres stops working
        when a caller's branch deadline passes, not only the client. ``settings``: more GUCs set
        LOCAL in the same round trip as BEGIN (e.g. ``{"hnsw.ef_search": "100"}``).
        """
        with _translated():
            async with self._transaction(self._pool, org_id, timeout_ms, readonly, settings) as tx:
                yield tx

    @contextlib.asynccontextmanager
    async def _transaction(self, pool: asyncpg.Pool, org_id: UUID, timeout_ms: int | None, readonly: bool,
                           settings: Mapping[str, str] | None) -> AsyncIterator[TenantTx]:
        """The bounded transaction on ``pool`` (the primary's or a replica's); errors untranslated.
        A write on the primary records the org's WAL position for read-your-writes on replicas."""
        statement_ms = timeout_ms if timeout_ms is not None else self.statement_timeout_ms
        begin = _begin(org_id, statement_ms, readonly, settings or {})
        statement_s = (statement_ms + self.client_grace_ms) / 1000
        started = time.monotonic()
        conn = await self._acquire(self.acquire_timeout_ms / 1000, pool)
        clean = False
        try:
            # BEGIN is the first round trip on a connection that may have sat idle in the pool:
            # it shares the acquire bound (a hung server is found out here, within it).
            left_s = max(0.001, self.acquire_timeout_ms / 1000 - (time.monotonic() - started))
            await conn.execute(begin, timeout=left_s)
            yield TenantTx(conn, org_id, settings, statement_s)
            if readonly:
                # A read-only transaction has nothing to commit: the background release ends it
                # (ROLLBACK, see _end_and_release), and the caller has its rows a round trip sooner.
                return
            await conn.execute("COMMIT", timeout=statement_s)
            clean = True
            if self.replicas is not None and pool is self._pool:
                await self.replicas.note_write(org_id, int(await conn.fetchval(WRITE_LSN, timeout=statement_s)))
        finally:
            self._release_soon(conn, clean=clean, pool=pool)

    async def read(self, org_id: UUID, work: Callable[[TenantTx], Awaitable[T]], *, timeout_ms: int | None = None,
                   settings: Mapping[str, str] | None = None) -> T:
        """``work`` in a read-only tenant transaction: on a read replica that has replayed the org's
        last write (see ``service.db.replicas``), else on the primary. ``work`` may run twice: when
        the replica fails under it, it runs again on the primary."""
        if self.replicas is not None:
            replica = await self.replicas.route(org_id)
            if replica is not None and replica.pool is not None:
                try:
                    async with self._transaction(replica.pool, org_id, timeout_ms, True, settings) as tx:
                        result = await work(tx)
                    READS.labels("replica").inc()
                    return result
                except Exception as exc:
                    if not is_lost(exc):
                        with _translated():
                            raise
                    log.warning("read_replica_failed", replica=replica.index, error=repr(exc)[:300])
                    replica.mark_down()
                    SKIPS.labels("failed").inc()
            READS.labels("primary").inc()
        async with self.tenant(org_id, timeout_ms=timeout_ms, readonly=True, settings=settings) as tx:
            return await work(tx)

    async def resolve_api_key(self, key_hash: bytes, timeout_s: float | None = None) -> UUID | None:
        """Map a key hash to its org, through the SECURITY DEFINER lookup (no tenant scope yet).

        Bounded by ``timeout_s`` (default ``acquire_timeout_ms``) in all: connection and query."""
        budget_s = self.acquire_timeout_ms / 1000 if timeout_s is None else timeout_s
        row = await self._run(lambda conn, left_s: conn.fetchrow(query("auth.resolve_key"), key_hash,
                                                                   timeout=left_s), budget_s)
        return None if row is None else UUID(str(row["org_id"]))

    def pool_size(self) -> int:
        """Connections the primary's pool holds now."""
        return int(self._pool.get_size())
    async def due_consolidation_orgs(self, limit: int, timeout_s: float = 5.0) -> list[UUID]:
        """Orgs with model-consolidation jobs due, through the SECURITY DEFINER lookup (no tenant scope:
        org ids only; each org's jobs are then read in its own transaction)."""
        rows = await self._run(lambda conn, left_s: conn.fetch(query("facts.due_orgs"), limit, timeout=left_s),
                               timeout_s)
        return [UUID(str(r["org_id"])) for r in rows]

    async def ping(self, timeout_s: float = 1.0) -> bool:
        return bool(await self._run(lambda conn, left_s: conn.fetchval("SELECT 1", timeout=left_s), timeout_s))

    async def _run(self, work: Callable[[asyncpg.pool.PoolConnectionProxy, float], Awaitable[T]],
                   budget_s: float) -> T:
        """One statement outside a tenant transaction, connection included, within ``budget_s``."""
        started = time.monotonic()
        with _translated():
            conn = await self._acquire(budget_s)
            try:
                return await work(conn, max(0.001, budget_s - (time.monotonic() - started)))
            finally:
                # No transaction to end: the pool's release waits (bounded) for the cancellation of a
                # statement cut short, or terminates the connection.
                self._release_soon(conn)

    async def released(self) -> None:
        """Wait until the connections being given back in the background are back in their pool."""
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)

    async def close(self) -> None:
        await self.released()
        if self.replicas is not None:
            await self.replicas.aclose()
        await self._pool.close()


_CLIENT_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError)
"""What talking to Postgres can raise, translated by :func:`service.db.errors.translate` (``TimeoutError``:
a client-side bound; ``InternalClientError``: asyncpg's protocol state after the server died mid-way,
e.g. "cannot switch to state 15; another operation (2) is in progress" at COMMIT)."""


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """Database errors raised inside become domain errors (503 for an unavailable server, ...)."""
    try:
        yield
    except _CLIENT_ERRORS as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        try:
            raise mapped from exc
        finally:
            del mapped  # this frame, in the traceback of ``exc``, must not hold the error: a cycle

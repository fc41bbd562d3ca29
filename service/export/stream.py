"""The NDJSON lines of an agent's (or a whole org's) export, read through an org-scoped transaction and a
server-side cursor.

One read-only ``Database.tenant`` transaction holds the whole export, so row-level security scopes
every line to the caller's org, and every row after the header comes from one statement
(``export.lines``), so from one snapshot: a write committed while a client reads is wholly in the
export or wholly out of it (a memory and its history, a file and its chunks). Rows come through a
cursor ``_PREFETCH`` at a time (the documents, which carry their files' content, ``_PREFETCH_DOCUMENTS``
at a time) and leave in chunks of about ``_CHUNK_BYTES``, so memory stays flat however many rows the
agent has. Postgres renders each line (``to_jsonb``): the service only joins
them, escaping the line boundaries JSON leaves raw (``_unbroken``).

Without an agent, the whole org: every agent's rows and the org-wide ones (agent null).

Lines, in order: ``export`` (org, agent, time), ``settings`` (the org's defaults, in a whole-org export
of an org that set them), ``directive`` (each, if any), each ``document`` (with its ``content``: its L2
chunks joined, null when they no longer give back its ``content_hash``), each ``conversation``
(its owner, message count and times: ahead of its messages, so an import creates it first), each
``memory`` (with its key, valid time and supersession), each ``chunk``, each history ``event``, and
last ``end`` with the counts. A stream without its ``end`` line is
incomplete: if reading fails part-way, an ``error`` line is the last one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Final
from uuid import UUID

import msgspec
import structlog

from service.db import Database, query
from service.errors import AppError, ServiceUnavailable

log = structlog.get_logger(__name__)

MEDIA_TYPE = "application/x-ndjson"
_PREFETCH = 500
_PREFETCH_DOCUMENTS = 8
"""Rows per fetch until the documents are read: each holds a file's content (up to
``PGCONTEXT_DOCUMENTS_MAX_FILE_BYTES``), so a fetch holds a few files, not ``_PREFETCH``."""
_DOCUMENTS_PART = 2
"""The part of ``export.lines`` that holds the documents (the parts before it are a few rows)."""
_CHUNK_BYTES = 256 * 1024
IDLE_TIMEOUT_MS = 60_000
"""A client that stops reading this long ends the export (Postgres closes the idle transaction)."""
STATEMENT_TIMEOUT_MS = 60_000
"""Per statement (each cursor fetch is one): an agent's chunks are sorted before the first one leaves."""


class ExportInProgress(AppError):
    status = 429
    code = "export_in_progress"


class ExportSlots:
    """An export holds a pooled connection for as long as its client reads, so at most one per org
    and ``limit`` per process run at once: one tenant's exports cannot take the pool from others."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.orgs: set[UUID] = set()

    def claim(self, org_id: UUID) -> None:
        if org_id in self.orgs:
            raise ExportInProgress("an export for this org is already running; retry when it ends",
                                   retry_after_s=RETRY_AFTER_S)
        if len(self.orgs) >= self.limit:
            raise ServiceUnavailable("too many exports are running; retry shortly", code="overloaded",
                                     retry_after_s=RETRY_AFTER_S)
        self.orgs.add(org_id)

    def release(self, org_id: UUID) -> None:
        self.orgs.discard(org_id)


RETRY_AFTER_S = 5
SLOTS = ExportSlots(limit=4)


class _Counts(msgspec.Struct):
    directive: int = 0
    document: int = 0
    conversation: int = 0
    memory: int = 0
    chunk: int = 0
    event: int = 0


class _Trailer(msgspec.Struct, tag_field="type", tag="end"):
    counts: _Counts


class _ErrorLine(msgspec.Struct, tag_field="type", tag="error"):
    code: str
    message: str


_LINE_BREAKS: Final = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
"""The line boundaries JSON leaves unescaped (Postgres escapes the control characters below U+0020): a
reader that splits lines as ``str.splitlines`` does (Python's ``httpx`` ``iter_lines``, for one) would cut a
line at them. They can only stand inside a JSON string, where the escape means the same character."""


def _unbroken(text: str) -> str:
    """``text`` (NDJSON) with the line boundaries other than ``\\n`` escaped: one line per object for any reader."""
    return text.translate(_LINE_BREAKS)


async def export_lines(db: Database, org_id: UUID, agent_id: str | None) -> AsyncGenerator[bytes, None]:
    """Yield the export as NDJSON byte chunks; the first chunk (the header line) comes once the
    transaction is open, so a caller can await it before answering 200 (or the error shape)."""
    SLOTS.claim(org_id)
    try:
        async with contextlib.aclosing(_lines(db, org_id, agent_id)) as lines:
            async for chunk in lines:
                yield chunk
    finally:
        SLOTS.release(org_id)


async def _lines(db: Database, org_id: UUID, agent_id: str | None) -> AsyncGenerator[bytes, None]:
    counts = {"directive": 0, "document": 0, "conversation": 0, "memory": 0, "chunk": 0, "event": 0}
    settings = {"idle_in_transaction_session_timeout": str(IDLE_TIMEOUT_MS)}
    started = False
    try:
        async with db.tenant(org_id, readonly=True, timeout_ms=STATEMENT_TIMEOUT_MS, settings=settings) as tx:
            header: str = await tx.fetchval("export.header", org_id, agent_id)
            started = True
            yield header.encode() + b"\n"
            buffer: list[str] = []
            size = last = 0
            cursor = await tx.conn.cursor(query("export.lines"), org_id, agent_id)
            while rows := await cursor.fetch(min(_PREFETCH_DOCUMENTS, _PREFETCH) if last <= _DOCUMENTS_PART
                                             else _PREFETCH):
                for row in rows:
                    if row["part"] < last:  # never expected: one part's rows after the next part's began
                        raise RuntimeError("export rows came out of order")
                    last = row["part"]
                    if row["kind"] in counts:
                        counts[row["kind"]] += 1
                    line: str = row["line"]
                    buffer.append(line)
                    size += len(line)
                    if size >= _CHUNK_BYTES:
                        yield _unbroken("\n".join(buffer) + "\n").encode()
                        buffer, size = [], 0
        # Sent only after the transaction committed: an ``end`` line means every row was read.
        trailer = msgspec.json.encode(_Trailer(_Counts(**counts))).decode()
        yield _unbroken("\n".join([*buffer, trailer]) + "\n").encode()
    except Exception as exc:
        if not started:
            raise  # nothing sent yet: the handler answers in the error shape
        # The 200 is already on its way: say so in the stream, then stop.
        log.warning("export_failed", agent_id=agent_id, error=repr(exc)[:300])
        error = _ErrorLine(code="export_failed", message="the export stopped part-way; retry it")
        yield msgspec.json.encode(error) + b"\n"

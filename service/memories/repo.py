"""Memory rows in Postgres: every function takes an org-scoped TenantTx."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import msgspec
import numpy as np
from pgvector import Vector

from service.db import TenantTx
from service.errors import BadRequest
from service.memories.facts.types import is_current
from service.memories.types import MemoryIn, MemoryOut, MemoryPatch, MessageRef, holds_in_utc


def message_ref(row: asyncpg.Record) -> MessageRef | None:
    """A row's place in its conversation (None for memories that are not messages)."""
    if row["conversation_id"] is None:
        return None
    return MessageRef(conversation_id=row["conversation_id"], position=int(row["position"]),
                      session_id=row["session_id"], speaker=row["speaker"], role=row["role"],
                      message_id=row["message_id"])


def to_out(row: asyncpg.Record) -> MemoryOut:
    return MemoryOut(
        id=row["id"], agent_id=row["agent_id"], kind=row["kind"], text=row["text"], metadata=row["metadata"],
        importance=row["importance"], usefulness=row["usefulness"], pinned=row["pinned"],
        created_at=row["created_at"], updated_at=row["updated_at"], occurred_at=row["occurred_at"],
        search_context=row["search_context"], last_accessed_at=row["last_accessed_at"],
        access_count=row["access_count"], expires_at=row["expires_at"], source_path=row["source_path"],
        line_start=row["line_start"], line_end=row["line_end"], section_title=row["section_title"],
        breadcrumb=row["breadcrumb"], level=row["level"],
        key=row["key"], valid_from=row["occurred_at"], valid_until=row["valid_until"],
        current=is_current(row["superseded_by"], row["valid_until"]), superseded_by=row["superseded_by"],
        superseded_at=row["superseded_at"],
        seen_count=row["seen_count"], last_seen_at=row["last_seen_at"] or row["created_at"],
        first_occurred_at=row["first_occurred_at"] or row["occurred_at"],
        last_occurred_at=row["last_occurred_at"] or row["occurred_at"], message=message_ref(row),
    )


async def insert_batch(tx: TenantTx, items: Sequence[MemoryIn], embeddings: np.ndarray, ids: Sequence[UUID],
                       hashes: Sequence[bytes | None], superseded_by: Sequence[UUID | None],
                       occurred: Sequence[datetime | None] | None = None) -> list[UUID]:
    """Insert ``items`` with their pre-assigned ``ids``; ``superseded_by``: a late value of a key,
    written already retired (else None); ``occurred``: event times resolved by the caller (else the
    items' own, null meaning the write time)."""
    rows = await tx.fetch(
        "memories.insert_batch",
        tx.org_id,
        [m.agent_id for m in items],
        [m.kind for m in items],
        [m.text for m in items],
        [Vector(v) for v in embeddings],
        [m.metadata for m in items],
        [m.importance for m in items],
        [m.pinned for m in items],
        [m.expires_at for m in items],
        list(occurred) if occurred is not None else [m.occurred_at for m in items],
        [m.search_context for m in items],
        list(ids),
        list(hashes),
        [m.key for m in items],
        [m.valid_until for m in items],
        list(superseded_by),
    )
    return [r["id"] for r in rows]


async def get(tx: TenantTx, memory_id: UUID) -> asyncpg.Record | None:
    return await tx.fetchrow("memories.get", tx.org_id, memory_id)


def encode_cursor(created_at: datetime, memory_id: UUID) -> str:
    return base64.urlsafe_b64encode(f"{created_at.isoformat()}|{memory_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, _, ident = raw.partition("|")
        return cursor_time(stamp), UUID(ident)
    except ValueError as exc:
        raise BadRequest("cursor is not one this service issued", code="bad_cursor") from exc


def cursor_time(stamp: str) -> datetime:
    """The time of a ``<created_at>|<id>`` cursor: RFC 3339 with its offset, and in UTC a time
    PostgreSQL and Python can both hold (years 1-9999; ``0001-01-01T00:00:00+14:00`` is not); else
    ValueError. Every ``created_at`` this service issues is one."""
    at = datetime.fromisoformat(stamp)
    if at.tzinfo is None:
        raise ValueError(f"{stamp!r} has no offset")
    if not holds_in_utc(at):
        raise ValueError(f"{stamp!r} is out of range")
    return at


async def list_page(
    tx: TenantTx, *, agent_id: str | None, kind: str | None, metadata: dict[str, Any] | None,
    created_after: datetime | None, created_before: datetime | None, cursor: str | None, limit: int,
    occurred_after: datetime | None = None, occurred_before: datetime | None = None,
    as_of: datetime | None = None, include_superseded: bool = False,
) -> tuple[list[MemoryOut], str | None]:
    after_ts, after_id = decode_cursor(cursor) if cursor else (None, None)
    rows = await tx.fetch("memories.list", tx.org_id, agent_id, kind, metadata, created_after, created_before,
                          after_ts, after_id, limit + 1, occurred_after, occurred_before, as_of, include_superseded)
    items = [to_out(r) for r in rows[:limit]]
    more = len(rows) > limit
    return items, (encode_cursor(items[-1].created_at, items[-1].id) if more and items else None)


async def update(tx: TenantTx, memory_id: UUID, patch: MemoryPatch,
                 embedding: np.ndarray | None, text_hash: bytes | None = None) -> asyncpg.Record | None:
    def flag(value: object) -> tuple[bool, Any]:
        return (value is not msgspec.UNSET, None if value is msgspec.UNSET else value)

    text_set, text = flag(patch.text)
    agent_set, agent = flag(patch.agent_id)
    kind_set, kind = flag(patch.kind)
    meta_set, meta = flag(patch.metadata)
    imp_set, imp = flag(patch.importance)
    pin_set, pin = flag(patch.pinned)
    exp_set, exp = flag(patch.expires_at)
    occ_set, occ = flag(patch.occurred_at)
    ctx_set, ctx = flag(patch.search_context)
    valid_set, valid = flag(patch.valid_until)
    return await tx.fetchrow(
        "memories.update", tx.org_id, memory_id, text_set, text, embedding, agent_set, agent, kind_set, kind,
        meta_set, meta, imp_set, imp, pin_set, pin, exp_set, exp, occ_set, occ, ctx_set, ctx, text_hash,
        valid_set, valid,
    )


async def current(tx: TenantTx, memory_id: UUID) -> asyncpg.Record | None:
    """The memory's agent, kind, key, currency and times, row-locked until the transaction ends."""
    return await tx.fetchrow("memories.current", tx.org_id, memory_id)


async def delete(tx: TenantTx, memory_id: UUID) -> tuple[bool, str | None]:
    row = await tx.fetchrow("memories.delete", tx.org_id, memory_id)
    return (row is not None, None if row is None else row["agent_id"])


async def delete_agent_batch(tx: TenantTx, agent_id: str, limit: int) -> list[UUID]:
    """Delete up to ``limit`` of the agent's memories (not its document chunks); returns their ids."""
    return [r["id"] for r in await tx.fetch("memories.delete_agent", tx.org_id, agent_id, limit)]


async def agent_of(tx: TenantTx, memory_id: UUID) -> tuple[bool, str | None]:
    """Whether the memory exists and its agent, read without a lock: the scope to lock before its row."""
    row = await tx.fetchrow("memories.agent", tx.org_id, memory_id)
    return (row is not None, None if row is None else row["agent_id"])

"""PATCH and DELETE of a memory, as the fact lifecycle sees them: duplicate checks on a new text, history."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import asyncpg
import msgspec
import numpy as np

from service.db import TenantTx
from service.errors import Conflict, Unprocessable
from service.memories import repo
from service.memories.facts import dedup
from service.memories.facts.history import Events
from service.memories.facts.normalize import hash_words, tokens
from service.memories.facts.types import MESSAGE_KIND, is_current
from service.memories.facts.write import DEFAULT_POLICY, merge_into, org_policy
from service.memories.types import MemoryIn, MemoryPatch
from service.settings import FactSettings


def _unset_or(value: Any, default: Any) -> Any:
    return default if value is msgspec.UNSET else value


async def update(tx: TenantTx, settings: FactSettings, memory_id: UUID, before: asyncpg.Record,
                 change: MemoryPatch, embedding: np.ndarray | None) -> tuple[asyncpg.Record | None,
                                                                             Literal["updated", "merged"]]:
    """Apply ``change`` to the (locked) memory ``before``; the caller holds the scope locks of its agent
    (and of a new one), taken before the row's. A new text that duplicates another current memory of
    the same agent, kind and key is merged into it (``merge``, the answer then being that memory),
    refused (``reject``: 409) or kept (``keep``); a memory that is not current itself is merged into
    nothing. A change that changes nothing writes and records nothing."""
    changes = _changes(change, before)
    if not changes:
        return await repo.get(tx, memory_id), "updated"
    kind = _unset_or(change.kind, before["kind"])
    agent = _unset_or(change.agent_id, before["agent_id"])
    words = tokens(change.text) if isinstance(change.text, str) and kind != MESSAGE_KIND else None
    events = Events()
    current = is_current(before["superseded_by"], _unset_or(change.valid_until, before["valid_until"]))
    if words is not None and embedding is not None and "text" in changes and current:
        policy = change.on_duplicate if isinstance(change.on_duplicate, str) else None
        policy = policy or await org_policy(tx) or DEFAULT_POLICY
        if policy != "keep":
            probe = MemoryIn(text=str(change.text), agent_id=agent, kind=kind, key=before["key"])
            found = (await dedup.find(tx, [probe], embedding[None, :], [words], [True], settings,
                                      exclude=(memory_id,))).matches[0]
            if found is not None and policy == "reject":
                raise Conflict("the new text duplicates a current memory (on_duplicate=reject)", code="duplicate",
                               details={"duplicate_of": str(found.target), "similarity": round(found.cosine, 4)})
            if found is not None and found.target is not None:
                row = await repo.update(tx, memory_id, change, embedding, hash_words(words))
                assert row is not None
                events.add(memory_id, row["agent_id"], "updated", changes=changes)
                await tx.execute("memories.delete", tx.org_id, memory_id)
                await merge_into(tx, found.target, as_item(row), memory_id, row["occurred_at"], found, events,
                                 decided_by="rules")
                events.add(memory_id, row["agent_id"], "merged", related=found.target, into=found.target)
                await events.record(tx)
                return await repo.get(tx, found.target), "merged"
    text_hash = hash_words(words) if words is not None else None
    row = await repo.update(tx, memory_id, change, embedding, text_hash)
    if row is not None:
        events.add(memory_id, row["agent_id"], "updated", changes=changes)
        if row["agent_id"] != before["agent_id"]:  # moved: the timeline it left goes on without it
            await left_timeline(tx, memory_id, before, events)
        await events.record(tx)
    return row, "updated"


async def check_order(tx: TenantTx, memory_id: UUID, before: asyncpg.Record, change: MemoryPatch) -> None:
    """422 ``supersedes_newer`` for a new ``occurred_at`` before that of a memory this one superseded: as at
    write time, an older fact does not retire a newer one. (A retired memory moved past its successor's
    start is refused already: its ``valid_until`` would not follow its ``occurred_at``.)"""
    if not isinstance(change.occurred_at, datetime) or change.occurred_at >= before["occurred_at"]:
        return
    newer = await tx.fetchrow("facts.retired_after", tx.org_id, memory_id, change.occurred_at)
    if newer is not None:
        raise Unprocessable(f"memory {newer['id']}, which this one superseded, happened after {change.occurred_at}"
                            ": an older fact does not retire a newer one", code="supersedes_newer",
                            details={"field": "occurred_at", "id": str(newer["id"])})


def _changes(change: MemoryPatch, before: asyncpg.Record) -> dict[str, Any]:
    """The fields ``change`` sets to a value other than the memory's own (as JSON), ``on_duplicate`` aside."""
    out: dict[str, Any] = msgspec.to_builtins(change)
    out.pop("on_duplicate", None)
    return {name: value for name, value in out.items() if getattr(change, name) != before[name]}


def as_item(row: asyncpg.Record) -> MemoryIn:
    """A stored memory as the item a merge records (so an undo writes it back as it was)."""
    return MemoryIn(text=row["text"], agent_id=row["agent_id"], kind=row["kind"], metadata=row["metadata"],
                    importance=row["importance"], pinned=row["pinned"], expires_at=row["expires_at"],
                    occurred_at=row["occurred_at"], search_context=row["search_context"], key=row["key"],
                    valid_until=row["valid_until"])


async def deleted(tx: TenantTx, memory_id: UUID, before: asyncpg.Record, *, erase: bool) -> None:
    """After a delete of ``before``: its key's timeline closes the gap; the history records the deletion, or
    (``erase``) goes too."""
    events = Events()
    await left_timeline(tx, memory_id, before, events)
    if erase:
        await tx.fetchval("facts.erase_history", tx.org_id, [memory_id], None)
    else:
        events.add(memory_id, before["agent_id"], "deleted")
    await events.record(tx)


async def left_timeline(tx: TenantTx, memory_id: UUID, before: asyncpg.Record, events: Events) -> None:
    """A keyed value (as ``before`` held it) left its key's timeline in its agent scope: deleted, or moved to
    another agent. The value it retired there is followed by what followed it, or, when it was the current
    value, is current again: the newest value left holds, as if the one gone had never been written."""
    if before["key"] is None:
        return
    for row in await tx.fetch("facts.unlink_value", tx.org_id, memory_id, before["superseded_by"],
                              before["occurred_at"], before["key"], before["agent_id"], before["valid_until"]):
        events.add(row["id"], row["agent_id"], "updated", related=memory_id, reason="key", key=before["key"],
                   changes={"superseded_by": row["superseded_by"], "valid_until": row["valid_until"]})

"""The append-only history of memories: events collected during a write, recorded in one statement."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from service.db import TenantTx
from service.errors import BadRequest
from service.memories.facts.types import EventName, HistoryEvent, HistoryPage
from service.memories.types import MemoryIn


@dataclass(slots=True)
class Events:
    """Events of one transaction, in the order they happened."""

    rows: list[tuple[UUID, str | None, str, UUID | None, UUID | None, dict[str, Any]]] = field(default_factory=list)

    def add(self, memory_id: UUID, agent_id: str | None, event: EventName, /, *, related: UUID | None = None,
            undoes: UUID | None = None, **detail: Any) -> None:
        self.rows.append((memory_id, agent_id, event, related, undoes, msgspec.to_builtins(detail)))

    async def record(self, tx: TenantTx) -> list[UUID]:
        if not self.rows:
            return []
        columns = list(zip(*self.rows, strict=True))
        rows = await tx.fetch("facts.record_events", tx.org_id, *[list(c) for c in columns])
        self.rows.clear()
        return [r["id"] for r in rows]


def snapshot(item: MemoryIn, occurred_at: datetime) -> dict[str, Any]:
    """What a ``created`` event (and a merge, for its undo) keeps of a written item: everything but the
    vector, which an undo computes again."""
    return {"text": item.text, "agent_id": item.agent_id, "kind": item.kind, "metadata": item.metadata,
            "importance": item.importance, "pinned": item.pinned, "expires_at": item.expires_at,
            "occurred_at": occurred_at, "search_context": item.search_context, "key": item.key,
            "valid_until": item.valid_until}


def item_from(snap: dict[str, Any]) -> MemoryIn:
    return msgspec.convert({k: v for k, v in snap.items() if v is not None and k != "id"}, MemoryIn, strict=False)


def _cursor(event_id: UUID) -> str:
    return base64.urlsafe_b64encode(event_id.bytes).decode().rstrip("=")


def _after(cursor: str) -> UUID:
    try:
        return UUID(bytes=base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except ValueError as exc:
        raise BadRequest("cursor is not one this service issued", code="bad_cursor") from exc


async def page(tx: TenantTx, memory_id: UUID, cursor: str | None, limit: int) -> HistoryPage:
    rows = await tx.fetch("facts.history", tx.org_id, memory_id, _after(cursor) if cursor else None, limit + 1)
    items = [HistoryEvent(id=r["id"], memory_id=r["memory_id"], agent_id=r["agent_id"], event=r["event"], at=r["at"],
                          related_id=r["related_id"], undoes=r["undoes"], undone_by=r["undone_by"],
                          detail=r["detail"]) for r in rows[:limit]]
    more = len(rows) > limit
    return HistoryPage(items=items, next_cursor=_cursor(items[-1].id) if more and items else None)

"""Undo a merge or a model's decision, from the history of the memory it changed."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from service.embeddings.lanes import lanes_of
from service.errors import AppError, Conflict, NotFound, Unprocessable
from service.memories import repo
from service.memories.facts import write as facts
from service.memories.facts.history import Events, item_from
from service.memories.facts.types import UNDOABLE, UndoResult
from service.memories.facts.write import scope_key
from service.memories.types import MemoryIn, holds_in_utc
from service.memories.write import check_item
from service.runtime import Services
from service.settings import LimitSettings


def _not_undone(event: Any, event_id: UUID) -> None:
    if event["undone_by"] is not None:
        raise Conflict(f"event {event_id} was already undone by {event['undone_by']}", code="already_undone")


Retired = list[tuple[UUID, datetime | None]]
"""Memories a model's decision retired, each with the end of its valid time before (None: open)."""


Merged = tuple[UUID, MemoryIn, dict[str, Any], dict[str, list[str | None]]]
"""A merge to undo: the absorbed item's id, the item, the metadata keys it added, the ends it moved."""


def _plan(event: Any, limits: LimitSettings) -> tuple[Merged | None, Retired]:
    """What undoing ``event`` takes: the item a merge absorbed (a rule's merge, or a model's ``merge``
    decision: its id, the item, the metadata keys the merge added to the kept memory, the ends it moved) and
    the memories a model's decision retired, with their ends before (``retired_until``; a decision recorded
    without it reopens them). An event's detail is checked as a write checks a memory: one an import wrote can hold
    anything (422 ``not_undoable``, not a failure of the service)."""
    detail = event["detail"] if isinstance(event["detail"], dict) else {}

    def refused(why: str) -> Unprocessable:
        return Unprocessable(f"event {event['id']} cannot be undone: {why}", code="not_undoable")

    merged = None
    raw = detail.get("item")
    if isinstance(raw, dict):
        added = detail.get("added_metadata", {})
        try:
            ident, item = UUID(str(raw.get("id"))), item_from(raw)
            check_item(item, limits, "detail.item.")
        except (ValueError, msgspec.ValidationError) as exc:
            raise refused(f"its merged item is not a memory a write could make ({exc})") from exc
        except AppError as exc:
            raise refused(f"its merged item is not a memory a write could make ({exc.message})") from exc
        if not isinstance(added, dict):
            raise refused("its added_metadata is not an object")
        merged = ident, item, added, _extended(detail.get("extended", {}), refused)
    retired: Retired = []
    if event["event"] == "consolidated":
        names, ends = detail.get("retired", []), detail.get("retired_until", {})
        if not isinstance(names, list) or not isinstance(ends, dict):
            raise refused("its retired memories are not a list, or their ends not an object")
        try:
            retired = [(UUID(str(i)), _end(ends.get(str(i)))) for i in names]
        except ValueError as exc:
            raise refused(f"its retired memories are not memory ids with their ends ({exc})") from exc
    return merged, retired


def _extended(raw: object, refused: Callable[[str], Unprocessable]) -> dict[str, list[str | None]]:
    """The ends a merge moved (``{"valid_until" | "expires_at": [before, after]}``), checked, as RFC 3339 strings."""
    if not isinstance(raw, dict) or not set(raw) <= {"valid_until", "expires_at"}:
        raise refused("its extended ends are not an object of valid_until / expires_at")
    out: dict[str, list[str | None]] = {}
    for name, pair in raw.items():
        try:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError(f"{name} is not a pair")
            out[name] = [None if (end := _end(v)) is None else end.isoformat() for v in pair]
        except ValueError as exc:
            raise refused(f"its extended ends are not times ({exc})") from exc
    return out


def _end(value: object) -> datetime | None:
    """A recorded end of valid time (an RFC 3339 string with its offset), or None; else ValueError."""
    if value is None:
        return None
    end = datetime.fromisoformat(str(value))
    if end.tzinfo is None or not holds_in_utc(end):
        raise ValueError(f"{value!r} is not a time with its offset in the years 1-9999")
    return end


async def undo(services: Services, org_id: UUID, memory_id: UUID, event_id: UUID, *,
               reason: str | None = None) -> UndoResult:
    """Revert event ``event_id`` of memory ``memory_id``: a merge writes the absorbed item back as a
    memory of its own (its recorded id, its own key placement) and takes its sighting and the metadata
    keys it added off the kept memory; a model's supersede makes the retired memories current again.
    An event is undone at most once (409 ``already_undone``)."""
    async with services.db.tenant(org_id, readonly=True) as tx:
        event = await tx.fetchrow("facts.event", org_id, memory_id, event_id)
    if event is None:
        raise NotFound(f"event {event_id} of memory {memory_id} not found")
    merged, retired = _plan(event, services.settings.limits) if event["event"] in UNDOABLE else (None, [])
    if merged is None and not retired:
        raise Unprocessable(f"a {event['event']!r} event cannot be undone (merges and model decisions that "
                            "changed memories can; a merged-away memory is restored from the history of the "
                            "memory it was merged into)", code="not_undoable")
    _not_undone(event, event_id)
    embedding = None
    if merged is not None:
        embedding = await lanes_of(services).embed_bulk(org_id, [merged[1].text])
    touched: set[str | None] = {event["agent_id"]}
    async with services.db.tenant(org_id) as tx:
        # scopes first (sorted), then rows, as every fact path; then the event again, under those locks:
        # a concurrent undo of it has committed or waits until this one has
        agents = [event["agent_id"], *([merged[1].agent_id] if merged is not None else [])]
        for ident in (memory_id, *(rid for rid, _ in retired)):
            agents.append((await repo.agent_of(tx, ident))[1])
        await tx.fetchval("facts.lock_scopes", str(org_id), sorted({scope_key(a) for a in agents}))
        again = await tx.fetchrow("facts.event", org_id, memory_id, event_id)
        if again is None:
            raise NotFound(f"event {event_id} of memory {memory_id} not found")
        _not_undone(again, event_id)
        events = Events()
        restored = None
        if merged is not None and embedding is not None:
            ident, item, added, extended = merged
            agent = await tx.fetchval("facts.unreinforce", org_id, memory_id, added, extended)
            written, changed = await facts.write(tx, services.settings.facts, [item], embedding, "keep",
                                                 ids=[ident], decided_by="undo")
            restored = written[0].id
            touched |= changed | {agent}
        for rid, until in retired:
            row = await tx.fetchrow("facts.unretire", org_id, rid, until)
            if row is not None:
                touched.add(row["agent_id"])
                events.add(rid, row["agent_id"], "undone", undoes=None, related=memory_id, reinstated=True)
        events.add(memory_id, event["agent_id"], "undone", undoes=event_id, related=restored,
                   undone_event=event["event"], reason=reason)
        recorded = await events.record(tx)
    await services.memories_changed(org_id, touched)
    return UndoResult(undone=event_id, event=recorded[-1], restored=restored, reinstated=[rid for rid, _ in retired])

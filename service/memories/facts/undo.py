"""Undo a merge or a model's decision, from the history of the memory it changed."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from service.embeddings.lanes import lanes_of
from service.errors import Conflict, NotFound, Unprocessable
from service.memories import repo
from service.memories.facts import write as facts
from service.memories.facts.history import Events, item_from
from service.memories.facts.types import UNDOABLE, UndoResult
from service.memories.facts.write import scope_key
from service.runtime import Services


def _not_undone(event: Any, event_id: UUID) -> None:
    if event["undone_by"] is not None:
        raise Conflict(f"event {event_id} was already undone by {event['undone_by']}", code="already_undone")


def _restorable(event: Any) -> dict[str, Any] | None:
    """The item a merge absorbed (a rule's merge, or a model's ``merge`` decision)."""
    item = event["detail"].get("item")
    return item if isinstance(item, dict) else None


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
    item = _restorable(event)
    retired = [UUID(i) for i in event["detail"].get("retired", [])] if event["event"] == "consolidated" else []
    if event["event"] not in UNDOABLE or (item is None and not retired):
        raise Unprocessable(f"a {event['event']!r} event cannot be undone (merges and model decisions that "
                            "changed memories can; a merged-away memory is restored from the history of the "
                            "memory it was merged into)", code="not_undoable")
    _not_undone(event, event_id)
    embedding = None
    if item is not None:
        embedding = await lanes_of(services).embed_bulk(org_id, [item["text"]])
    touched: set[str | None] = {event["agent_id"]}
    async with services.db.tenant(org_id) as tx:
        # scopes first (sorted), then rows, as every fact path; then the event again, under those locks:
        # a concurrent undo of it has committed or waits until this one has
        agents = [event["agent_id"], *([item.get("agent_id")] if item is not None else [])]
        for ident in (memory_id, *retired):
            agents.append((await repo.agent_of(tx, ident))[1])
        await tx.fetchval("facts.lock_scopes", str(org_id), sorted({scope_key(a) for a in agents}))
        again = await tx.fetchrow("facts.event", org_id, memory_id, event_id)
        if again is None:
            raise NotFound(f"event {event_id} of memory {memory_id} not found")
        _not_undone(again, event_id)
        events = Events()
        restored = None
        if item is not None and embedding is not None:
            agent = await tx.fetchval("facts.unreinforce", org_id, memory_id, event["detail"].get("added_metadata", {}))
            written, changed = await facts.write(tx, services.settings.facts, [item_from(item)], embedding, "keep",
                                                 ids=[UUID(item["id"])], decided_by="undo")
            restored = written[0].id
            touched |= changed | {agent}
        for rid in retired:
            row = await tx.fetchrow("facts.unretire", org_id, rid, None)
            if row is not None:
                touched.add(row["agent_id"])
                events.add(rid, row["agent_id"], "undone", undoes=None, related=memory_id, reinstated=True)
        events.add(memory_id, event["agent_id"], "undone", undoes=event_id, related=restored,
                   undone_event=event["event"], reason=reason)
        recorded = await events.record(tx)
    await services.memories_changed(org_id, touched)
    return UndoResult(undone=event_id, event=recorded[-1], restored=restored, reinstated=retired)

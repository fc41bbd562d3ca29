"""Writing facts in one transaction: duplicates merged, keys and ``supersedes`` retiring older values,
every change recorded in the history, ambiguous cases queued for the model.

Order inside the transaction: lock the agent scopes written (so duplicate and key checks see every
committed write of the scope), find duplicates, then per item -- keyed items one at a time (a key's
current value is retired *before* the new one is inserted: ``memories_current_key`` allows one) --
insert, reinforce merge targets, append the history and the consolidation jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
import numpy as np

from service.db import TenantTx
from service.errors import Conflict, Unprocessable
from service.memories import repo
from service.memories.facts import dedup
from service.memories.facts.history import Events, snapshot
from service.memories.facts.normalize import hash_words, tokens
from service.memories.facts.types import MESSAGE_KIND, OnDuplicate, WrittenItem, is_current
from service.memories.types import MemoryIn
from service.settings import FactSettings

DEFAULT_POLICY: OnDuplicate = "merge"


@dataclass(slots=True)
class Plan:
    """One item's fate, decided before anything is written."""

    index: int
    id: UUID
    occurred_at: datetime
    policy: OnDuplicate
    match: dedup.Match | None = None
    merged_into: UUID | None = None


def scope_key(agent_id: str | None) -> str:
    return agent_id or ""


async def org_policy(tx: TenantTx) -> OnDuplicate:
    value = await tx.fetchval("facts.org_policy", tx.org_id)
    return value if value is not None else DEFAULT_POLICY


async def purge_expired_values(tx: TenantTx, keys: Iterable[tuple[str | None, str]]) -> None:
    """Purge the expired values of ``keys`` (agent, key) before their timelines are read: an expired value
    is forgotten, so a change finds each key as it would after the periodic purge. The caller holds the
    scope locks of those agents."""
    for agent_id, key in sorted(keys, key=lambda k: (scope_key(k[0]), k[1])):
        await tx.execute("facts.purge_expired_values", tx.org_id, agent_id, key)


def check_items(items: Sequence[MemoryIn]) -> None:
    """422 for what the schema cannot say: keys and ``supersedes`` are for facts, not messages."""
    seen: dict[UUID, int] = {}
    for index, item in enumerate(items):
        where = "" if len(items) == 1 else f"memories[{index}]."
        if item.kind == MESSAGE_KIND and (item.key is not None or item.supersedes):
            raise Unprocessable("messages are events: they take no key and supersede nothing",
                                code="validation_error", details={"field": f"{where}key"})
        for target in item.supersedes:
            if target in seen:
                raise Unprocessable(f"memory {target} is superseded twice in one request",
                                    code="validation_error", details={"field": f"{where}supersedes"})
            seen[target] = index
        if item.valid_until is not None and item.occurred_at is not None and item.valid_until <= item.occurred_at:
            raise Unprocessable("valid_until must be after occurred_at", code="validation_error",
                                details={"field": f"{where}valid_until"})


async def write(tx: TenantTx, settings: FactSettings, items: list[MemoryIn], embeddings: np.ndarray,
                default_policy: OnDuplicate | None, *, ids: Sequence[UUID] | None = None,
                decided_by: str = "rules") -> tuple[list[WrittenItem], set[str | None]]:
    """Write ``items`` (embedded: one L2-normalised row each) in ``tx``; returns what happened to each
    and the agents whose memories changed (hot sets to refresh)."""
    fresh = await tx.fetch("facts.new_ids", len(items))
    now: datetime = fresh[0]["now"]
    new_ids = list(ids) if ids is not None else [r["id"] for r in fresh]
    words = [tokens(m.text) if m.kind != MESSAGE_KIND else () for m in items]
    if default_policy is None and any(m.on_duplicate is None and dedup.is_fact(m) for m in items):
        default_policy = await org_policy(tx)
    plans = [Plan(i, new_ids[i], m.occurred_at or now, m.on_duplicate or default_policy or DEFAULT_POLICY)
             for i, m in enumerate(items)]
    _check_valid_time(items, plans)
    check = [dedup.is_fact(m) and plans[i].policy != "keep" for i, m in enumerate(items)]
    scopes = sorted({scope_key(m.agent_id) for i, m in enumerate(items)
                     if check[i] or m.key is not None or m.supersedes})
    if scopes:
        await tx.fetchval("facts.lock_scopes", str(tx.org_id), scopes)
    await purge_expired_values(tx, {(m.agent_id, m.key) for m in items if m.key is not None})
    findings = await dedup.find(tx, items, embeddings, words, check, settings)
    for i, found in enumerate(findings.matches):  # what an item retires is not what it reinforces
        if found is not None and found.target is not None and found.target in items[i].supersedes:
            findings.matches[i] = None
    retired_before: set[UUID] = set()  # named in supersedes by the items before this one
    for plan in plans:
        found = findings.matches[plan.index]
        if found is not None:
            target = found.target if found.batch_index is None \
                else (plans[found.batch_index].merged_into or plans[found.batch_index].id)
            if target not in retired_before:  # a memory an earlier item retires takes no merge: this one is written
                plan.match, plan.merged_into = found, target
        retired_before.update(items[plan.index].supersedes)

    events = Events()
    outcomes: dict[int, WrittenItem] = {}
    targets = await _supersede_targets(tx, items, plans)
    plain: list[Plan] = []
    for plan in plans:
        item = items[plan.index]
        if item.key is not None and plan.merged_into is not None:
            await _still_current(tx, item, plan, words[plan.index])
        if plan.merged_into is not None:
            continue
        if item.key is not None:  # one at a time: each may retire the one before
            outcomes[plan.index] = await _write_keyed(tx, item, plan, embeddings, words, targets, events)
        else:
            plain.append(plan)
    _reject(plans, findings)
    if plain:
        retired = await _retire_named(tx, items, plain, targets, events)
        await repo.insert_batch(tx, [items[p.index] for p in plain], embeddings[[p.index for p in plain]],
                                [p.id for p in plain], [_hash(words[p.index], items[p.index]) for p in plain],
                                [None] * len(plain), occurred=[p.occurred_at for p in plain])
        for plan in plain:
            gone = retired.get(plan.index, [])
            outcomes[plan.index] = WrittenItem(id=plan.id, status="superseded" if gone else "created", superseded=gone,
                                               current=is_current(None, items[plan.index].valid_until))
    for plan in plans:
        item = items[plan.index]
        if plan.merged_into is None:
            written = outcomes[plan.index]
            events.add(plan.id, item.agent_id, "created", **snapshot(item, plan.occurred_at),
                       supersedes=written.superseded, superseded_by=written.superseded_by, decided_by=decided_by)
    for plan in plans:
        if plan.merged_into is not None and plan.match is not None:
            # the memory kept holds the item's fact now: it retires what the item names
            named = [t for t in items[plan.index].supersedes if t in targets]
            gone = await _retire(tx, named, plan.merged_into, plan.occurred_at, events, reason="supersedes")
            outcomes[plan.index] = await merge_into(tx, plan.merged_into, items[plan.index], plan.id,
                                                    plan.occurred_at, plan.match, events, decided_by=decided_by,
                                                    superseded=gone)
    touched = {row[1] for row in events.rows}
    await events.record(tx)
    if settings.consolidation_enabled:
        await _queue_for_model(tx, items, plans, findings, settings)
    return [outcomes[i] for i in range(len(items))], touched


def _reject(plans: list[Plan], findings: dedup.Findings) -> None:
    """409 for the items of policy ``reject`` that ``merge`` would merge; one that ``merge`` writes as a memory
    of its own (a repeat dated before the key's current value began, or of a value an earlier item retired)
    is written under ``reject`` too. Raised inside the transaction: nothing of the request is kept."""
    rejected = [p.index for p in plans if p.policy == "reject" and p.merged_into is not None]
    if rejected:
        raise Conflict("the text duplicates a current memory (on_duplicate=reject)", code="duplicate",
                       details={"items": [_duplicate_detail(i, findings.matches[i], plans) for i in rejected]})


def _check_valid_time(items: list[MemoryIn], plans: list[Plan]) -> None:
    """422 for a ``valid_until`` not after the item's event time, the write time when it gives none."""
    for plan in plans:
        until = items[plan.index].valid_until
        if until is not None and until <= plan.occurred_at:
            where = "" if len(items) == 1 else f"memories[{plan.index}]."
            raise Unprocessable("valid_until must be after occurred_at (which is the write time when not given)",
                                code="validation_error", details={"field": f"{where}valid_until"})


def _hash(words: tuple[str, ...], item: MemoryIn) -> bytes | None:
    return hash_words(words) if item.kind != MESSAGE_KIND else None


def _duplicate_detail(index: int, found: dedup.Match | None, plans: list[Plan]) -> dict[str, Any]:
    assert found is not None
    target = found.target if found.batch_index is None else plans[found.batch_index].id
    return {"index": index, "duplicate_of": str(target) if found.batch_index is None else None,
            "duplicate_of_index": found.batch_index, "similarity": round(found.cosine, 4), "reason": found.reason}


async def merge_into(tx: TenantTx, target: UUID, item: MemoryIn, item_id: UUID, occurred_at: datetime,
                     found: dedup.Match, events: Events, *, decided_by: str,
                     superseded: list[UUID] | None = None) -> WrittenItem:
    """Reinforce ``target`` with a duplicate ``item`` (not written) and record the merge, with all an
    undo needs: the item as written, its would-be id, the metadata keys it added, the state before, the
    ends it moved (``extended``: the later ``valid_until`` / ``expires_at`` the item asked for).
    ``superseded``: what the item named in ``supersedes``, retired by ``target`` (an undo leaves them so)."""
    before = await tx.fetchrow("facts.reinforce", tx.org_id, target, occurred_at, item.metadata, item.valid_until,
                               item.expires_at)
    if before is None:
        raise Conflict(f"memory {target} changed during the write; retry", code="write_conflict")
    added = {k: v for k, v in item.metadata.items() if k not in before["metadata"]}
    extended = {name: [before[name], before[f"{name}_after"]] for name in ("valid_until", "expires_at")
                if before[name] != before[f"{name}_after"]}
    events.add(target, before["agent_id"], "merged", related=item_id,
               item={"id": item_id, **snapshot(item, occurred_at)},
               similarity={"cosine": round(found.cosine, 6), "lexical": round(found.lexical, 6),
                           "rule": found.reason},
               added_metadata=added, before={"seen_count": before["seen_count"],
                                             "last_seen_at": before["last_seen_at"],
                                             "first_occurred_at": before["first_occurred_at"],
                                             "last_occurred_at": before["last_occurred_at"]},
               decided_by=decided_by, **_present(extended=extended, superseded=superseded))
    return WrittenItem(id=target, status="merged", similarity=round(found.cosine, 6), superseded=superseded or [])


def _present(**fields: Any) -> dict[str, Any]:
    """The history detail fields that hold something (an event records no empty ones)."""
    return {name: value for name, value in fields.items() if value}


async def _supersede_targets(tx: TenantTx, items: list[MemoryIn], plans: list[Plan]) -> dict[UUID, Any]:
    """The memories named in ``supersedes`` (merged items' included: the memory kept retires them), locked
    and checked: they exist here, are facts, are current and are not newer than what retires them."""
    named = [t for m in items for t in m.supersedes]
    if not named:
        return {}
    rows = {r["id"]: r for r in await tx.fetch("facts.supersede_targets", tx.org_id, named)}
    for plan in plans:
        for target in items[plan.index].supersedes:
            row = rows.get(target)
            where = "supersedes" if len(items) == 1 else f"memories[{plan.index}].supersedes"
            if row is None or row["kind"] in (MESSAGE_KIND, "document_chunk"):
                raise Unprocessable(f"supersedes names {target}, which is not a fact memory of this org",
                                    code="unknown_memory", details={"field": where, "id": str(target)})
            if row["superseded_by"] is not None:
                raise Conflict(f"memory {target} is already superseded by {row['superseded_by']}",
                               code="already_superseded", details={"field": where, "id": str(target)})
            if row["occurred_at"] > plan.occurred_at:
                raise Unprocessable(f"memory {target} happened after this one (occurred_at): an older fact does "
                                    "not retire a newer one", code="supersedes_newer",
                                    details={"field": where, "id": str(target)})
    return rows


async def _retire(tx: TenantTx, ids: list[UUID], by: UUID, valid_until: datetime, events: Events,
                  **detail: Any) -> list[UUID]:
    if not ids:
        return []
    rows = await tx.fetch("facts.retire", tx.org_id, ids, by, valid_until)
    for row in rows:
        events.add(row["id"], row["agent_id"], "superseded", related=by, valid_until=row["valid_until"], **detail)
    return [row["id"] for row in rows]


async def _retire_named(tx: TenantTx, items: list[MemoryIn], plans: list[Plan], targets: dict[UUID, Any],
                        events: Events) -> dict[int, list[UUID]]:
    out: dict[int, list[UUID]] = {}
    for plan in plans:
        named = [t for t in items[plan.index].supersedes if t in targets]
        if named:
            out[plan.index] = await _retire(tx, named, plan.id, plan.occurred_at, events, reason="supersedes")
    return out


async def _write_keyed(tx: TenantTx, item: MemoryIn, plan: Plan, embeddings: np.ndarray,
                       words: list[tuple[str, ...]], targets: dict[UUID, Any], events: Events) -> WrittenItem:
    """A value of ``item.key``: the newest by event time is the current one. A newer value retires the
    current (valid until the new one's start); one arriving late is stored retired, between its
    neighbours on the key's timeline, and retires nothing current."""
    retired = (await _retire_named(tx, [item], [Plan(0, plan.id, plan.occurred_at, plan.policy)], targets,
                                   events)).get(0, [])
    current = await tx.fetchrow("facts.key_current", tx.org_id, item.agent_id, item.key)
    successor: Any = None
    if current is not None and current["occurred_at"] <= plan.occurred_at:
        retired += await _retire(tx, [current["id"]], plan.id, plan.occurred_at, events, reason="key", key=item.key)
    else:  # a late value, or a key whose current value expired: placed among the values held
        neighbours = {r["side"]: r for r in await tx.fetch(
            "facts.key_neighbours", tx.org_id, item.agent_id, item.key, plan.occurred_at)}
        successor = neighbours.get("after")
        before = neighbours.get("before")
        if before is not None:  # its timeline now continues with this value (an earlier own end stays)
            ended = await tx.fetchval("facts.set_chain", tx.org_id, before["id"], plan.id, plan.occurred_at)
            events.add(before["id"], item.agent_id, "superseded", related=plan.id, valid_until=ended,
                       reason="key", key=item.key, **_present(late_arrival=successor is not None))
    valid_until = item.valid_until
    if successor is not None and (valid_until is None or valid_until > successor["occurred_at"]):
        valid_until = successor["occurred_at"]
    row = item if valid_until == item.valid_until else _with_valid_until(item, valid_until)
    await repo.insert_batch(tx, [row], embeddings[[plan.index]], [plan.id], [_hash(words[plan.index], item)],
                            [None if successor is None else successor["id"]], occurred=[plan.occurred_at])
    if successor is not None:
        return WrittenItem(id=plan.id, status="superseded" if retired else "created", superseded=retired,
                           current=False, superseded_by=successor["id"])
    return WrittenItem(id=plan.id, status="superseded" if retired else "created", superseded=retired,
                       current=is_current(None, valid_until))


async def _still_current(tx: TenantTx, item: MemoryIn, plan: Plan, words: tuple[str, ...]) -> None:
    """A keyed item found a duplicate before the batch was written; an earlier value of the batch may have
    retired it since (Paris, then Lisbon, then Paris again). As written one at a time, the item merges into
    the key's current value if that is the duplicate (or holds the same words) and began no later than the
    item; else it is a value of its own (one that happened before the current value is history on the key's
    timeline, which ``as_of`` answers with)."""
    holder = await tx.fetchrow("facts.key_current", tx.org_id, item.agent_id, item.key)
    if holder is not None and holder["occurred_at"] <= plan.occurred_at and (
            holder["id"] == plan.merged_into or (
                holder["kind"] == item.kind and holder["text_hash"] is not None
                and bytes(holder["text_hash"]) == _hash(words, item) and is_current(None, holder["valid_until"]))):
        plan.merged_into = holder["id"]
        return
    plan.merged_into = plan.match = None


def _with_valid_until(item: MemoryIn, valid_until: datetime | None) -> MemoryIn:
    return msgspec.structs.replace(item, valid_until=valid_until)


async def _queue_for_model(tx: TenantTx, items: list[MemoryIn], plans: list[Plan], findings: dedup.Findings,
                           settings: FactSettings) -> None:
    jobs: list[tuple[UUID, list[dict[str, Any]]]] = []
    for plan in plans:
        if plan.merged_into is not None or items[plan.index].key is not None or not findings.near[plan.index]:
            continue
        close = dedup.for_consolidation(items[plan.index], findings.near[plan.index], settings)
        if close:
            jobs.append((plan.id, [{"id": str(c.id), "cosine": round(c.cosine, 6), "lexical": round(c.lexical, 6),
                                    "rule": c.reason} for c in close]))
    if jobs:
        await tx.execute("facts.enqueue", tx.org_id, [j[0] for j in jobs],
                         [msgspec.json.encode(j[1]).decode() for j in jobs])

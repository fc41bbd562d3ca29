"""Each LangGraph store operation as a plan: a generator that yields the pgcontext calls it needs and
receives their answers, so the sync and the async store run the same code (``pgcontext_client.plans``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from pgcontext_client import Memory, NotFound, SearchFilters, endpoints
from pgcontext_client.plans import Plan
from pgcontext_client.types import MemoryPage, SearchResponse

from pgcontext_langgraph import mapping

PAGE: Final = 200
"""Memories per list page (the service's maximum)."""
MAX_CANDIDATES: Final = 200
"""At most this many search hits are read (the service's maximum): a query's page when the service runs
the whole filter, else the best this many, filtered here (operators such as ``$gt``, exact floats, nulls,
lists and objects)."""
DUPLICATES: Final = 20
"""How many memories of one item a write looks at: the item is one memory, but one written twice at once
before the store kept a key per item may be several, which a put or delete then makes one or none."""


def plan(op: Op, fields: Sequence[str] | None) -> Plan[Result]:
    """The plan for one op; ``fields``: the store's default index fields (None: the whole value)."""
    validate_op_namespace(op)
    if isinstance(op, GetOp):
        return get(op)
    if isinstance(op, PutOp):
        return put(op, fields)
    if isinstance(op, SearchOp):
        return search(op)
    if isinstance(op, ListNamespacesOp):
        return list_namespaces(op)
    raise TypeError(f"unknown store operation {op!r}")


def _find_all(namespace: Sequence[str], key: str, limit: int = DUPLICATES,
              retired: bool = False) -> Plan[list[Memory]]:
    """The item's memories, newest first (one, or none); ``retired``: with the values its key retired, which
    a delete of the current one would make current again."""
    page: MemoryPage = yield endpoints.list_memories(
        agent_id=mapping.agent_of(namespace), metadata=mapping.containment(namespace, key), limit=limit,
        include_superseded=retired or None)
    return list(page.items)


def _find(namespace: Sequence[str], key: str) -> Plan[Memory | None]:
    found = yield from _find_all(namespace, key, limit=1)
    return found[0] if found else None


def _delete(memory_id: Any) -> Plan[None]:
    with contextlib.suppress(NotFound):  # deleted meanwhile (a racing delete or put of None): gone all the same
        yield endpoints.delete_memory(memory_id)


def _item(memory_id: Any, metadata: dict[str, Any], score: float | None = None,
          with_score: bool = False) -> Item:
    meta = metadata[mapping.META]
    fields = {"namespace": tuple(meta["namespace"].split(".")), "key": meta["key"], "value": meta["value"],
              "created_at": datetime.fromisoformat(meta["created_at"]),
              "updated_at": datetime.fromisoformat(meta["updated_at"])}
    return SearchItem(**fields, score=score) if with_score else Item(**fields)


def _refresh(memory_id: Any, metadata: dict[str, Any]) -> Plan[None]:
    """A read restarts an item's TTL (when it has one)."""
    ttl = metadata[mapping.META].get("ttl")
    if ttl is not None:
        yield endpoints.update_memory(memory_id, expires_at=mapping.expiry(ttl))


def get(op: GetOp) -> Plan[Item | None]:
    memory = yield from _find(op.namespace, op.key)
    if memory is None:
        return None
    if op.refresh_ttl:
        yield from _refresh(memory.id, memory.metadata)
    return _item(memory.id, memory.metadata)


def put(op: PutOp, fields: Sequence[str] | None) -> Plan[None]:
    if op.value is None:
        gone = yield from _find_all(op.namespace, op.key, retired=True)
        for stale in sorted(gone, key=lambda m: m.current):  # retired values first: none comes back meanwhile
            yield from _delete(stale.id)
        return None
    found = yield from _find_all(op.namespace, op.key)
    memory, extra = (found[0], found[1:]) if found else (None, [])
    for stale in extra:
        yield from _delete(stale.id)
    now = datetime.now(UTC)
    metadata = mapping.item_metadata(op.namespace, op.key, op.value, op.ttl)
    stamps = metadata[mapping.META]
    stamps["created_at"] = now.isoformat() if memory is None else memory.metadata[mapping.META]["created_at"]
    stamps["updated_at"] = now.isoformat()
    kind = mapping.UNINDEXED_KIND if op.index is False else mapping.KIND
    text = mapping.item_text(op.key, op.value, fields if op.index is None or op.index is False else op.index)
    expires = mapping.expiry(op.ttl, now)
    if memory is not None:
        try:
            yield endpoints.update_memory(memory.id, text=text, kind=kind, metadata=metadata, expires_at=expires,
                                          on_duplicate="keep")
            return None
        except NotFound:  # deleted meanwhile: written anew
            pass
    # keyed: of puts racing to create the item, the last one's memory is the only current one
    yield endpoints.create_memory(text, agent_id=mapping.agent_of(op.namespace), kind=kind, metadata=metadata,
                                  expires_at=expires, key=mapping.fact_key(op.namespace, op.key), on_duplicate="keep")
    return None


def search(op: SearchOp) -> Plan[list[SearchItem]]:
    agent = mapping.agent_of(op.namespace_prefix) if op.namespace_prefix else None
    contains = mapping.containment(op.namespace_prefix, filter=op.filter)
    wanted = op.offset + op.limit
    found: list[tuple[Any, dict[str, Any], float | None]] = []
    if op.query:
        limit = min(MAX_CANDIDATES, wanted) if mapping.fully_contained(op.filter) else MAX_CANDIDATES
        answer: SearchResponse = yield endpoints.search(
            op.query, limit=max(1, limit),
            filters=SearchFilters(agent_id=agent, kinds=[mapping.KIND], metadata=contains))
        found = [(r.id, r.metadata, r.score) for r in answer.results]
    else:
        cursor: str | None = None
        while True:
            page: MemoryPage = yield endpoints.list_memories(agent_id=agent, metadata=contains, limit=PAGE,
                                                             cursor=cursor)
            found += [(m.id, m.metadata, None) for m in page.items]
            kept = [f for f in found if mapping.matches(f[1][mapping.META]["value"], op.filter)]
            cursor = page.next_cursor
            if cursor is None or len(kept) >= wanted:
                break
    kept = [f for f in found if mapping.matches(f[1][mapping.META]["value"], op.filter)][op.offset:wanted]
    if op.refresh_ttl:
        for memory_id, metadata, _ in kept:
            yield from _refresh(memory_id, metadata)
    return [_item(memory_id, metadata, score, with_score=True)  # type: ignore[misc]
            for memory_id, metadata, score in kept]


def list_namespaces(op: ListNamespacesOp) -> Plan[list[tuple[str, ...]]]:
    prefix = mapping.fixed_prefix(op.match_conditions)
    try:
        agent = mapping.agent_of(prefix) if prefix else None
    except InvalidNamespaceError:
        return []  # no item can live under a namespace that names no agent
    contains = mapping.containment(prefix)
    namespaces: set[tuple[str, ...]] = set()
    cursor: str | None = None
    while True:
        page: MemoryPage = yield endpoints.list_memories(agent_id=agent, metadata=contains, limit=PAGE, cursor=cursor)
        namespaces |= {tuple(m.metadata[mapping.META]["namespace"].split(".")) for m in page.items}
        cursor = page.next_cursor
        if cursor is None:
            break
    return mapping.list_namespaces(namespaces, op.match_conditions, op.max_depth, op.limit, op.offset)

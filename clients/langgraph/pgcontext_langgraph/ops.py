"""Each LangGraph store operation as a plan: a generator that yields the pgcontext calls it needs and
receives their answers, so the sync and the async store run the same code (``pgcontext_client.plans``)."""

from __future__ import annotations

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
from pgcontext_client import Memory, SearchFilters, endpoints
from pgcontext_client.plans import Plan
from pgcontext_client.types import MemoryPage, SearchResponse

from pgcontext_langgraph import mapping

PAGE: Final = 200
"""Memories per list page (the service's maximum)."""
MAX_CANDIDATES: Final = 200
"""At most this many search hits are read to fill a page when the filter has operators the service
cannot run (``$gt``, ``$ne``, ...); those are checked here."""


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


def _find(namespace: Sequence[str], key: str) -> Plan[Memory | None]:
    page: MemoryPage = yield endpoints.list_memories(
        agent_id=mapping.agent_of(namespace), metadata=mapping.containment(namespace, key), limit=1)
    return page.items[0] if page.items else None


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
    memory = yield from _find(op.namespace, op.key)
    if op.value is None:
        if memory is not None:
            yield endpoints.delete_memory(memory.id)
        return None
    now = datetime.now(UTC)
    metadata = mapping.item_metadata(op.namespace, op.key, op.value, op.ttl)
    stamps = metadata[mapping.META]
    stamps["created_at"] = now.isoformat() if memory is None else memory.metadata[mapping.META]["created_at"]
    stamps["updated_at"] = now.isoformat()
    kind = mapping.UNINDEXED_KIND if op.index is False else mapping.KIND
    text = mapping.item_text(op.key, op.value, fields if op.index is None or op.index is False else op.index)
    expires = mapping.expiry(op.ttl, now)
    if memory is None:
        yield endpoints.create_memory(text, agent_id=mapping.agent_of(op.namespace), kind=kind, metadata=metadata,
                                      expires_at=expires, on_duplicate="keep")
    else:
        yield endpoints.update_memory(memory.id, text=text, kind=kind, metadata=metadata, expires_at=expires,
                                      on_duplicate="keep")
    return None


def search(op: SearchOp) -> Plan[list[SearchItem]]:
    agent = mapping.agent_of(op.namespace_prefix) if op.namespace_prefix else None
    contains = mapping.containment(op.namespace_prefix, filter=op.filter)
    wanted = op.offset + op.limit
    found: list[tuple[Any, dict[str, Any], float | None]] = []
    if op.query:
        operators = any(isinstance(v, dict) for v in (op.filter or {}).values())
        limit = min(MAX_CANDIDATES, wanted * 4) if operators else wanted
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

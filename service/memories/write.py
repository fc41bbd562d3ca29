"""The memory write path: validate, embed server-side (batched), insert, honour Idempotency-Key."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
import numpy as np

from service.db import TenantTx
from service.embeddings import EmbeddingError
from service.embeddings.lanes import lanes_of
from service.errors import (
    BadRequest,
    Conflict,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    Unprocessable,
    malformed_json,
)
from service.memories import idempotency, repo
from service.memories.facts import patch as fact_patch
from service.memories.facts import write as facts
from service.memories.facts.types import OnDuplicate
from service.memories.types import (
    DOCUMENT_CHUNK_KIND,
    CreatedMemories,
    MemoryBatchIn,
    MemoryIn,
    MemoryPatch,
    PatchedMemory,
)
from service.memories.validation import (
    check_embedding,
    check_kind,
    check_metadata,
    check_occurred_at,
    check_text,
    check_text_limits,
)
from service.runtime import Services
from service.settings import LimitSettings

_PURGE_EVERY = 50  # on average one write in this many also removes a few expired rows of the org
_DELETE_AGENT_BATCH = 1000


def parse_create_body(body: bytes, limits: LimitSettings) -> tuple[list[MemoryIn], OnDuplicate | None]:
    """A body is one memory object or ``{"memories": [...]}``; both decode strictly. Returns the items
    and the batch's ``on_duplicate`` (None: not given)."""
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise malformed_json(exc) from exc
    if not isinstance(raw, dict):
        raise BadRequest("the body must be a JSON object", code="validation_error")
    policy: OnDuplicate | None = None
    try:
        if "memories" in raw:
            batch = msgspec.convert(raw, MemoryBatchIn)
            items, policy = batch.memories, batch.on_duplicate
        else:
            items = [msgspec.convert(raw, MemoryIn)]
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid memory: {exc}", code="validation_error") from exc
    if not items:
        raise BadRequest("memories must not be empty", code="validation_error")
    if len(items) > limits.max_batch:
        raise PayloadTooLarge(f"a batch holds at most {limits.max_batch} memories, got {len(items)}",
                              code="batch_too_large", details={"limit": limits.max_batch})
    for index, item in enumerate(items):
        check_item(item, limits, "" if len(items) == 1 else f"memories[{index}].")
    facts.check_items(items)
    return items, policy


def check_item(item: MemoryIn, limits: LimitSettings, where: str = "") -> None:
    """What a write checks of one memory beyond its schema; ``where`` prefixes the field names."""
    check_text(item.text, limits, field=f"{where}text")
    check_text_limits(item.search_context, limits, field=f"{where}search_context")
    check_kind(item.kind)
    check_metadata(item.metadata, limits)
    for name, value in (("occurred_at", item.occurred_at), ("expires_at", item.expires_at),
                        ("valid_until", item.valid_until)):
        if value is not None:
            check_occurred_at(value, field=f"{where}{name}")


async def embed_texts(services: Services, org_id: UUID, texts: list[str]) -> np.ndarray:
    """Write-path embedding: the bulk lane (sub-batches, orgs in turn, after query embeddings)."""
    try:
        return await lanes_of(services).embed_bulk(org_id, texts)
    except EmbeddingError as exc:
        raise ServiceUnavailable(f"the embedding provider failed: {exc}", code="embedding_unavailable") from exc


async def _embeddings_for(services: Services, org_id: UUID, items: list[MemoryIn]) -> np.ndarray:
    dim = services.settings.embedding.dim
    out = np.zeros((len(items), dim), dtype=np.float32)
    missing = [i for i, m in enumerate(items) if m.embedding is None]
    for i, m in enumerate(items):
        if m.embedding is not None:
            check_embedding(m.embedding, dim)
            vec = np.asarray(m.embedding, dtype=np.float32)
            norm = float(np.linalg.norm(vec))
            out[i] = vec / norm if norm > 0 else vec
    if missing:
        out[missing] = await embed_texts(services, org_id, [items[i].text for i in missing])
    return out


async def create(services: Services, org_id: UUID, body: bytes, idempotency_key: str | None) -> tuple[
        CreatedMemories, bool]:
    """Create the memories in ``body``; returns (result, replayed)."""
    idempotency.check_key(idempotency_key)
    items, policy = parse_create_body(body, services.settings.limits)
    request_hash = idempotency.request_hash(body) if idempotency_key is not None else b""
    if idempotency_key is not None:  # cheap early answer for retries: no embedding work
        first = await idempotency.earlier(services, org_id, idempotency_key, request_hash, CreatedMemories)
        if first is not None:
            return first, True
    embeddings = await _embeddings_for(services, org_id, items)
    # The tenant default timeout: the BM25 counter rows this batch writes are on a shard no other
    # open transaction of the org holds (memory_lex_shard(), migration 0008), so a concurrent
    # document ingest does not make it wait.
    async with services.db.tenant(org_id) as tx:
        if idempotency_key is not None:
            first = await idempotency.claim(tx, idempotency_key, request_hash, CreatedMemories)
            if first is not None:
                return first, True
        written, touched = await facts.write(tx, services.settings.facts, items, embeddings, policy)
        result = CreatedMemories(ids=[w.id for w in written], items=written)
        if idempotency_key is not None:
            await idempotency.remember(tx, idempotency_key, result)
        if random.randrange(_PURGE_EVERY) == 0:
            await tx.execute("memories.purge_expired", org_id, 100)
    await services.memories_changed(org_id, touched | {m.agent_id for m in items})
    return result, False


async def patch(services: Services, org_id: UUID, memory_id: UUID, change: MemoryPatch) -> PatchedMemory:
    limits = services.settings.limits
    if isinstance(change.kind, str):
        check_kind(change.kind)
    embedding = None
    if change.text is not msgspec.UNSET:
        check_text(change.text, limits)
        embedding = (await embed_texts(services, org_id, [change.text]))[0]
    if change.metadata is not msgspec.UNSET:
        check_metadata(change.metadata, limits)
    if change.occurred_at is not msgspec.UNSET:
        check_occurred_at(change.occurred_at)
    for name in ("expires_at", "valid_until"):
        value = getattr(change, name)
        if isinstance(value, datetime):
            check_occurred_at(value, field=name)
    if isinstance(change.search_context, str):
        check_text_limits(change.search_context, limits)
    async with services.db.tenant(org_id) as tx:
        before = await _locked(tx, memory_id, change)
        _check_valid_time(before, change)
        await fact_patch.check_order(tx, memory_id, before, change)
        await _check_key_move(tx, before, change)
        row, status = await fact_patch.update(tx, services.settings.facts, memory_id, before, change, embedding)
    if row is None:
        raise NotFound(f"memory {memory_id} not found")
    await services.memories_changed(org_id, {before["agent_id"], row["agent_id"]})
    return PatchedMemory(**msgspec.structs.asdict(repo.to_out(row)), status=status)


async def _locked(tx: TenantTx, memory_id: UUID, change: MemoryPatch) -> Any:
    """The memory to change, row-locked after the scope locks of its agent (and of the agent it moves
    to): every fact path takes scope locks first, in sorted order, then rows, so none waits in a cycle."""
    found, agent = await repo.agent_of(tx, memory_id)
    if not found:
        raise NotFound(f"memory {memory_id} not found")
    scopes = {facts.scope_key(agent)}
    if change.agent_id is not msgspec.UNSET:
        scopes.add(facts.scope_key(change.agent_id))
    await tx.fetchval("facts.lock_scopes", str(tx.org_id), sorted(scopes))
    before = _changeable(_live(await repo.current(tx, memory_id)), memory_id)
    if before["agent_id"] != agent:  # moved by a PATCH that committed before these locks
        raise Conflict(f"memory {memory_id} changed during the request; retry", code="write_conflict")
    return before


def _check_valid_time(before: Any, change: MemoryPatch) -> None:
    occurred = before["occurred_at"] if change.occurred_at is msgspec.UNSET else change.occurred_at
    until = before["valid_until"] if change.valid_until is msgspec.UNSET else change.valid_until
    if before["key"] is not None:
        _check_keyed_time(before, change, until)
    if until is not None and until <= occurred:
        raise Unprocessable("valid_until must be after occurred_at", code="validation_error",
                            details={"field": "valid_until"})


def _check_keyed_time(before: Any, change: MemoryPatch, until: datetime | None) -> None:
    # A keyed value's time is its place on the key's timeline: moving its start, or a retired value's end
    # past where it ended, would make two values valid at once. The current value may end (or reopen).
    keyed = "a keyed value's time is its place on its key's timeline: write a new value of the key instead"
    if change.occurred_at is not msgspec.UNSET and change.occurred_at != before["occurred_at"]:
        raise Unprocessable(f"occurred_at cannot change: {keyed}", code="validation_error",
                            details={"field": "occurred_at"})
    if before["superseded_by"] is not None and change.valid_until is not msgspec.UNSET and (
            until is None or (before["valid_until"] is not None and until > before["valid_until"])):
        raise Unprocessable(f"valid_until of a retired value can only move earlier: {keyed}",
                            code="validation_error", details={"field": "valid_until"})


async def _check_key_move(tx: TenantTx, before: Any, change: MemoryPatch) -> None:
    """409 ``key_taken`` when the current value of a key moves to an agent (scope) whose value of that
    key is current already: a key has one current value per scope; supersede that one instead. A retired
    value stays with the agent whose timeline retired it (422)."""
    if before["key"] is None or change.agent_id is msgspec.UNSET or change.agent_id == before["agent_id"]:
        return
    if before["superseded_by"] is not None:
        raise Unprocessable("agent_id of a retired value cannot change: it is a past value on its agent's "
                            "timeline of the key", code="validation_error", details={"field": "agent_id"})
    await facts.purge_expired_values(tx, [(change.agent_id, before["key"])])  # as any write of the key
    holder = await tx.fetchrow("facts.key_current", tx.org_id, change.agent_id, before["key"])
    if holder is not None:
        raise Conflict(f"agent {change.agent_id!r} already has a current value of key {before['key']!r}",
                       code="key_taken", details={"field": "agent_id", "key": before["key"],
                                                  "id": str(holder["id"])})


async def delete(services: Services, org_id: UUID, memory_id: UUID, *, erase: bool = False) -> None:
    """Delete a memory; its history records the deletion, or with ``erase`` goes with it. ``erase`` of a
    memory deleted before removes the history it left (404 when there is none either)."""
    async with services.db.tenant(org_id) as tx:
        found, agent = await repo.agent_of(tx, memory_id)
        if found:  # the scope before the row, as every fact path (its history may name merges to take back)
            await tx.fetchval("facts.lock_scopes", str(tx.org_id), [facts.scope_key(agent)])
        row = await repo.current(tx, memory_id)
        if row is not None and row["expired"]:  # gone already, as after its purge; erasing it purges it now
            if erase:
                await repo.delete(tx, memory_id)
            row = None
        if row is None and erase and await tx.fetchval("facts.erase_history", tx.org_id, [memory_id], None):
            return
        before = _changeable(row, memory_id)
        found, agent_id = await repo.delete(tx, memory_id)
        if found:
            await fact_patch.deleted(tx, memory_id, before, erase=erase)
    if not found:
        raise NotFound(f"memory {memory_id} not found")
    await services.memories_changed(org_id, {agent_id})


async def delete_agent(services: Services, org_id: UUID, agent_id: str) -> int:
    """Delete every memory of the agent in the org (data-subject erasure); returns how many.

    In batches, each its own transaction, so an agent with 100K memories neither holds locks on all
    of them nor runs into the statement timeout; a failure part-way leaves fewer rows and a retry
    finishes the job. The agent's hot set is invalidated even then."""
    deleted = 0
    try:
        while True:
            async with services.db.tenant(org_id) as tx:
                gone = await repo.delete_agent_batch(tx, agent_id, _DELETE_AGENT_BATCH)
                last = len(gone) < _DELETE_AGENT_BATCH  # the last batch: the history recorded under it goes too
                # each memory's whole history, whatever agent its events were recorded under
                await tx.fetchval("facts.erase_history", org_id, gone, agent_id if last else None)
            deleted += len(gone)
            if last:
                break
        async with services.db.tenant(org_id) as tx:  # its conversations, emptied above
            await tx.execute("conversations.delete_agent", org_id, agent_id)
        return deleted
    finally:
        if deleted:
            await services.memories_changed(org_id, {agent_id})


def _live(row: Any) -> Any:
    """``row`` unless it has expired: an expired memory is gone to every read and change (its row waits
    for the purge, which changes no answer)."""
    return None if row is None or row["expired"] else row


def _changeable(row: Any, memory_id: UUID) -> Any:
    """A memory the memories API may change: it exists here, is not a document chunk (those move
    with their file through /v1/documents, which keeps line spans and the index summary exact) and
    not a conversation's message (never rewritten; it goes with its conversation)."""
    if row is None:
        raise NotFound(f"memory {memory_id} not found")
    if row["conversation_id"] is not None:
        raise Conflict("a conversation's messages are never rewritten or removed one by one: delete the "
                       "conversation with DELETE /v1/conversations/{conversation_id}",
                       code="managed_by_conversations", details={"conversation_id": row["conversation_id"]})
    if row["kind"] == DOCUMENT_CHUNK_KIND:
        raise Conflict("document chunks change only through /v1/documents (re-ingest or delete the file)",
                       code="managed_by_documents")
    return row

"""Every endpoint of the pgcontext API, once: each function builds the ``Call`` for one request.

``Client`` and ``AsyncClient`` expose these as methods of the same name and signature (see
``client.Endpoint``): ``client.get_memory(id)`` returns a ``Memory``, ``await aclient.get_memory(id)`` too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote
from uuid import UUID

import msgspec

from pgcontext_client import types as t
from pgcontext_client._http import Call
from pgcontext_client.errors import ValidationError

Id = str | UUID
UNSET: Any = msgspec.UNSET


def _query(**values: object) -> list[tuple[str, str]]:
    """Query parameters, leaving out the unset ones (datetimes as RFC 3339, dicts as JSON)."""
    params: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, datetime):
            text = value.isoformat()
        elif isinstance(value, dict):
            text = json.dumps(value, separators=(",", ":"))
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        params.append((name, text))
    return params


def _seg(value: Id) -> str:
    """``value`` as one path segment. One of dots only ("." or "..") would be resolved away by URL
    normalisation (httpx's too): its dots go escaped, so the request reaches the server, which refuses it.
    An empty one would send the request to another endpoint (``delete_memory("")`` to the agent erasure's
    ``DELETE /v1/memories``): it is refused here, and nothing is sent."""
    if str(value) == "":
        raise ValidationError("an id in the path is empty, which would send the request to another endpoint; "
                              "nothing was sent", code="validation_error")
    seg = quote(str(value), safe="")
    return seg.replace(".", "%2E") if seg and not seg.strip(".") else seg


# --- memories -------------------------------------------------------------------------------------


def create_memory(text: str, *, agent_id: str | None = None, kind: str | None = None,
                  metadata: dict[str, Any] | None = None, importance: float | None = None,
                  pinned: bool | None = None, expires_at: datetime | None = None,
                  occurred_at: datetime | None = None, search_context: str | None = None,
                  embedding: list[float] | None = None, key: str | None = None,
                  supersedes: Sequence[Id] | None = None, valid_until: datetime | None = None,
                  on_duplicate: str | None = None,
                  idempotency_key: str | None = None) -> Call[t.CreatedMemory]:
    """Store one memory (embedded server-side unless ``embedding`` is given); returns its ``id`` and
    ``status`` (``created``, ``merged`` into a duplicate, or ``superseded`` older values).
    ``search_context`` is searched but never packed into a context (e.g. the turn it replies to)."""
    body = t.MemoryIn(text=text, agent_id=agent_id, kind=kind, metadata=metadata, importance=importance,
                      pinned=pinned, expires_at=expires_at, occurred_at=occurred_at,
                      search_context=search_context, embedding=embedding, key=key,
                      supersedes=None if supersedes is None else [UUID(str(i)) for i in supersedes],
                      valid_until=valid_until, on_duplicate=on_duplicate)
    return Call("POST", "/v1/memories", t.CreatedMemory, body=body, idempotency_key=idempotency_key,
                repeatable=True)


def create_memories(memories: Sequence[t.MemoryIn], *, on_duplicate: str | None = None,
                    idempotency_key: str | None = None) -> Call[t.CreatedMemories]:
    """Store a batch (at most the service's ``PGCONTEXT_MAX_BATCH``, default 256) in one transaction."""
    body = t.MemoryBatchIn(memories=list(memories), on_duplicate=on_duplicate)
    return Call("POST", "/v1/memories", t.CreatedMemories, body=body,
                idempotency_key=idempotency_key, repeatable=True)


def get_memory(memory_id: Id) -> Call[t.Memory]:
    """One memory by id (``NotFound`` when it is not your org's)."""
    return Call("GET", f"/v1/memories/{_seg(memory_id)}", t.Memory, repeatable=True)


def list_memories(*, agent_id: str | None = None, kind: str | None = None, metadata: dict[str, Any] | None = None,
                  created_after: datetime | None = None, created_before: datetime | None = None,
                  occurred_after: datetime | None = None, occurred_before: datetime | None = None,
                  as_of: datetime | None = None, include_superseded: bool | None = None,
                  limit: int | None = None, cursor: str | None = None) -> Call[t.MemoryPage]:
    """A page of memories, newest first; pass ``next_cursor`` back as ``cursor`` for the next page.
    Current memories only, unless ``as_of`` (what was valid then) or ``include_superseded``."""
    params = _query(agent_id=agent_id, kind=kind, metadata=metadata, created_after=created_after,
                    created_before=created_before, occurred_after=occurred_after,
                    occurred_before=occurred_before, as_of=as_of, include_superseded=include_superseded,
                    limit=limit, cursor=cursor)
    return Call("GET", "/v1/memories", t.MemoryPage, params=params, repeatable=True)


def update_memory(memory_id: Id, *, text: str = UNSET, agent_id: str | None = UNSET, kind: str = UNSET,
                  metadata: dict[str, Any] = UNSET, importance: float = UNSET, pinned: bool = UNSET,
                  expires_at: datetime | None = UNSET, occurred_at: datetime = UNSET,
                  search_context: str | None = UNSET, valid_until: datetime | None = UNSET,
                  on_duplicate: str = UNSET, idempotency_key: str | None = None) -> Call[t.PatchedMemory]:
    """Change only the fields given (re-embeds when ``text`` changes); returns the memory as stored, or
    (``status`` ``merged``) the memory a new text duplicated, which this one was merged into."""
    body = t.MemoryPatch(text=text, agent_id=agent_id, kind=kind, metadata=metadata, importance=importance,
                         pinned=pinned, expires_at=expires_at, occurred_at=occurred_at,
                         search_context=search_context, valid_until=valid_until, on_duplicate=on_duplicate)
    return Call("PATCH", f"/v1/memories/{_seg(memory_id)}", t.PatchedMemory, body=body,
                idempotency_key=idempotency_key, repeatable=True)


def delete_memory(memory_id: Id, *, erase: bool | None = None, idempotency_key: str | None = None) -> Call[None]:
    """Delete one memory (``NotFound`` when there is none); ``erase`` removes its history too."""
    return Call("DELETE", f"/v1/memories/{_seg(memory_id)}", None, params=_query(erase=erase),
                idempotency_key=idempotency_key, repeatable=True)


def memory_history(memory_id: Id, *, limit: int | None = None, cursor: str | None = None) -> Call[t.HistoryPage]:
    """Every change to a memory, oldest first (append-only events)."""
    return Call("GET", f"/v1/memories/{_seg(memory_id)}/history", t.HistoryPage,
                params=_query(limit=limit, cursor=cursor), repeatable=True)


def undo_event(memory_id: Id, event_id: Id, *, reason: str | None = None) -> Call[t.UndoResult]:
    """Undo a merge (the duplicate comes back as a memory of its own) or a model's decision."""
    return Call("POST", f"/v1/memories/{_seg(memory_id)}/history/{_seg(event_id)}/undo", t.UndoResult,
                body=t.UndoIn(reason=reason))


def org_settings() -> Call[t.OrgSettings]:
    """The org's defaults (``on_duplicate``)."""
    return Call("GET", "/v1/org/settings", t.OrgSettings, repeatable=True)


def set_org_settings(*, on_duplicate: str | None = None) -> Call[t.OrgSettings]:
    """Change the org's defaults: ``on_duplicate`` = ``merge``, ``keep`` or ``reject``."""
    return Call("PATCH", "/v1/org/settings", t.OrgSettings, body=t.OrgSettingsIn(on_duplicate=on_duplicate),
                repeatable=True)


def import_lines(lines: Sequence[Mapping[str, Any]]) -> Call[t.ImportResult]:
    """Import lines of an export (``Client.export``) into your org: memories with their history and
    supersession, directives. Ids are kept, so a retry writes nothing twice; send a long export in
    several calls (at most PGCONTEXT_MAX_BATCH memories each)."""
    return Call("POST", "/v1/import", t.ImportResult, body=t.ImportIn(lines=[dict(line) for line in lines]),
                repeatable=True)


def erase_agent(agent_id: str, *, idempotency_key: str | None = None) -> Call[t.DeletedAgentMemories]:
    """Data-subject erasure: delete every memory of ``agent_id`` in your org (idempotent)."""
    return Call("DELETE", "/v1/memories", t.DeletedAgentMemories, params=_query(agent_id=agent_id),
                idempotency_key=idempotency_key, repeatable=True)


def hot_set(agent_id: str) -> Call[t.HotSet]:
    """The agent's hot set: pinned, most important and most recently used memories."""
    return Call("GET", "/v1/memories/hot", t.HotSet, params=_query(agent_id=agent_id), repeatable=True)


def feedback(helpful: Mapping[str, bool] | Mapping[UUID, bool] | Iterable[t.FeedbackItem], *,
             idempotency_key: str | None = None) -> Call[t.FeedbackOut]:
    """Report which memories helped: ``{memory_id: True/False}`` (or ``FeedbackItem``s); moves their usefulness."""
    if isinstance(helpful, Mapping):
        items = [t.FeedbackItem(id=UUID(str(k)), helpful=bool(v)) for k, v in helpful.items()]
    else:
        items = list(helpful)
    # Repeatable: a retry carries the call's Idempotency-Key, and the service answers it with the first
    # answer instead of moving usefulness again.
    return Call("POST", "/v1/memories/feedback", t.FeedbackOut, body=t.FeedbackIn(items=items),
                idempotency_key=idempotency_key, repeatable=True)


def search(query: str, *, strategy: t.Strategy | None = None, limit: int | None = None,
           filters: t.SearchFilters | None = None, tuning: t.SearchTuning | None = None,
           modes: list[t.Mode] | str | None = None, case_sensitive: bool | None = None) -> Call[t.SearchResponse]:
    """Hybrid retrieval over memories and document chunks; each result shows its lexical and semantic ranks."""
    body = t.SearchRequest(query=query, strategy=strategy, limit=limit, filters=filters, tuning=tuning,
                           modes=modes,  # type: ignore[arg-type]  # "all" or a list of modes
                           case_sensitive=case_sensitive)
    return Call("POST", "/v1/memories/search", t.SearchResponse, body=body, repeatable=True)


# --- context assembly -----------------------------------------------------------------------------


def assemble(agent_id: str, query: str, *, model: str = "gpt-4o",
             recent_messages: Sequence[t.Message | Mapping[str, str]] | None = None,
             max_context_tokens: int | None = None, selective: bool | None = None,
             reserve_tokens: int | None = None, retrieval: t.RetrievalOptions | None = None,
             encoding: str | None = None, explain: bool | None = None,
             conversation_id: str | None = None, history_turns: int | None = None,
             timeout_ms: int | None = None) -> Call[t.AssembledContext]:
    """The context for one model call: directive, hot and cold memories and history, packed into a token
    budget. Give ``max_context_tokens``, ``selective=True`` or both. ``encoding`` (``cl100k_base``,
    ``o200k_base``) counts with that tokenizer, trusted as exact; ``explain=True`` also returns each dropped
    candidate's text, origin and scores. With ``conversation_id``, that conversation's messages already in
    ``recent_messages`` (or among its last ``history_turns``) are not packed again. ``timeout_ms`` is your
    own deadline (``X-Timeout-Ms``), both ways: longer than the service's deadline (40 ms by default) it
    lengthens the service's wall, up to its ``PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS`` (1,000 by default), so
    the full planned retrieval runs when you can wait for it; past it the service answers 504
    (``DeadlineExceeded``), never partial context. The deadline holds for the whole call: a retry sends
    what is left of it, none starts past it, and a try with no answer a second past it raises
    ``TransportError``. ``result.complete`` / ``result.directive_missing`` say
    whether anything planned is missing (``degradation_reasons``)."""
    messages = None if recent_messages is None else [
        m if isinstance(m, t.Message) else t.Message(role=m["role"], content=m["content"]) for m in recent_messages]
    body = t.AssembleRequest(agent_id=agent_id, query=query, model=model, recent_messages=messages,
                             max_context_tokens=max_context_tokens, selective=selective,
                             reserve_tokens=reserve_tokens, retrieval=retrieval, encoding=encoding,
                             explain=explain, conversation_id=conversation_id, history_turns=history_turns)
    return Call("POST", "/v1/context/assemble", t.AssembledContext, body=body, repeatable=True,
                timeout_ms=timeout_ms)


# --- conversations --------------------------------------------------------------------------------


def append_messages(conversation_id: str, messages: Sequence[t.MessageIn | Mapping[str, Any]], *,
                    agent_id: str | None = UNSET, idempotency_key: str | None = None) -> Call[t.Appended]:
    """Append messages to a conversation, in order (the first append creates it, owned by ``agent_id``;
    left out: org-wide). Each is searchable as a memory of kind ``message``; one whose ``message_id`` is
    already in the conversation is not written again. A retry (the client's own, after a broken
    connection) resends the call's ``Idempotency-Key`` and is answered the first append's result."""
    items = [m if isinstance(m, t.MessageIn) else msgspec.convert(m, t.MessageIn) for m in messages]
    # Repeatable: the service answers a resent Idempotency-Key with the first append's result.
    return Call("POST", f"/v1/conversations/{_seg(conversation_id)}/messages", t.Appended,
                body=t.AppendIn(messages=items, agent_id=agent_id), idempotency_key=idempotency_key,
                repeatable=True)


def list_messages(conversation_id: str, *, session_id: str | None = None, limit: int | None = None,
                  cursor: str | None = None, order: Literal["asc", "desc"] | None = None) -> Call[t.MessagePage]:
    """A page of the conversation's messages in order (``order="desc"``: from the last back); pass
    ``next_cursor`` back as ``cursor``."""
    params = _query(session_id=session_id, limit=limit, cursor=cursor, order=order)
    return Call("GET", f"/v1/conversations/{_seg(conversation_id)}/messages", t.MessagePage, params=params,
                repeatable=True)


def get_conversation(conversation_id: str) -> Call[t.Conversation]:
    """One conversation: its agent and message count (``NotFound`` when it is not your org's)."""
    return Call("GET", f"/v1/conversations/{_seg(conversation_id)}", t.Conversation, repeatable=True)


def list_conversations(*, agent_id: str | None = None, limit: int | None = None,
                       cursor: str | None = None) -> Call[t.ConversationPage]:
    """A page of conversations, newest first (``agent_id``: only that agent's)."""
    return Call("GET", "/v1/conversations", t.ConversationPage,
                params=_query(agent_id=agent_id, limit=limit, cursor=cursor), repeatable=True)


def delete_conversation(conversation_id: str, *, agent_id: str | None = None, idempotency_key: str | None = None
                        ) -> Call[t.DeletedConversation]:
    """Delete a conversation and everything derived from its messages (``NotFound`` when there is none).
    ``agent_id``: only if the conversation is that agent's (else ``Conflict`` ``conversation_agent_mismatch``
    with the owner in ``details["agent_id"]``, nothing removed); None: whoever owns it."""
    return Call("DELETE", f"/v1/conversations/{_seg(conversation_id)}", t.DeletedConversation,
                params=_query(agent_id=agent_id), idempotency_key=idempotency_key, repeatable=True)


def truncate_conversation(conversation_id: str, from_position: int, *, message_count: int | None = None,
                          last_id: UUID | str | None = None, agent_id: str | None = None,
                          idempotency_key: str | None = None) -> Call[t.TruncatedConversation]:
    """Remove the conversation's messages at ``from_position`` and after (``NotFound`` when there is no such
    conversation). ``message_count``: only if it holds exactly that many (else ``Conflict``
    ``conversation_changed``, nothing removed): pass the count you read to remove nothing appended since;
    ``last_id``: only if that message (its ``id``) is still the last one, which also refuses a message
    appended in its place after another client removed it; ``agent_id``: only if the conversation is that
    agent's (else ``Conflict`` ``conversation_agent_mismatch``). A retry (the client's own, after a broken
    connection) resends the call's ``Idempotency-Key`` and is answered the first removal's result."""
    return Call("DELETE", f"/v1/conversations/{_seg(conversation_id)}/messages", t.TruncatedConversation,
                params=_query(from_position=from_position, message_count=message_count, last_id=last_id,
                              agent_id=agent_id),
                idempotency_key=idempotency_key, repeatable=True)


# --- directives -----------------------------------------------------------------------------------


def put_directive(agent_id: str, content: str, *, idempotency_key: str | None = None) -> Call[t.Directive]:
    """Create or replace the agent's directive (its standing instructions); the version increments."""
    return Call("PUT", f"/v1/agents/{_seg(agent_id)}/directive", t.Directive, body=t.DirectiveIn(content=content),
                idempotency_key=idempotency_key, repeatable=True)


def get_directive(agent_id: str) -> Call[t.Directive]:
    """The agent's directive (``NotFound`` when it has none)."""
    return Call("GET", f"/v1/agents/{_seg(agent_id)}/directive", t.Directive, repeatable=True)


def delete_directive(agent_id: str, *, idempotency_key: str | None = None) -> Call[None]:
    """Delete the agent's directive (``NotFound`` when it has none)."""
    return Call("DELETE", f"/v1/agents/{_seg(agent_id)}/directive", None, idempotency_key=idempotency_key,
                repeatable=True)


# --- documents ------------------------------------------------------------------------------------


def ingest_documents(files: Sequence[t.FileIn], *, collection: str | None = None, agent_id: str | None = None,
                     idempotency_key: str | None = None) -> Call[t.IngestResponse]:
    """Ingest files as line-anchored chunks; unchanged files are skipped, changed ones replaced."""
    body = t.IngestRequest(files=list(files), collection=collection, agent_id=agent_id)
    # Repeatable: the service skips a file whose content hash it already holds.
    return Call("POST", "/v1/documents", t.IngestResponse, body=body, idempotency_key=idempotency_key,
                repeatable=True)


def list_documents(*, collection: str | None = None, path_prefix: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> Call[t.DocumentPage]:
    """Ingested files (with content hashes, so you can send only what changed)."""
    params = _query(collection=collection, path_prefix=path_prefix, limit=limit, cursor=cursor)
    return Call("GET", "/v1/documents", t.DocumentPage, params=params, repeatable=True)


def delete_documents(paths: Sequence[str], *, collection: str | None = None, idempotency_key: str | None = None
                     ) -> Call[t.DeletedDocuments]:
    """Remove files and their chunks from a collection (``NotFound`` when none of the paths exists)."""
    params = [("path", p) for p in paths] + _query(collection=collection)
    return Call("DELETE", "/v1/documents", t.DeletedDocuments, params=params, idempotency_key=idempotency_key,
                repeatable=True)


def documents_index() -> Call[t.IndexSummary]:
    """The document index: revision, counts per level and language, semantic availability, dirty paths."""
    return Call("GET", "/v1/documents/index", t.IndexSummary, repeatable=True)


# --- health ---------------------------------------------------------------------------------------


def health() -> Call[t.Health]:
    """``/healthz``: the process is up."""
    return Call("GET", "/healthz", t.Health, repeatable=True)


def ready() -> Call[t.Health]:
    """``/readyz``: Postgres and Redis answer (``status`` is ``unavailable`` otherwise; never raised)."""
    return Call("GET", "/readyz", t.Health, repeatable=True, accept=frozenset({503}))


EXPORT_PATH = "/v1/export"

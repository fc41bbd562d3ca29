"""``POST /v1/import``: the lines of an export (``GET /v1/export``) written back into the caller's org.

Memories keep their ids (every key of the schema includes the org, so another org's ids never collide),
so what refers to a memory -- ``superseded_by``, a history event's ``memory_id``, ``related_id``,
``undoes`` and the ids inside its ``detail`` (a merge record's duplicate) -- stays right without
rewriting, and an export can be sent in several requests in any order. A memory or an event the org
already holds (the same id) is left as it is and counted ``existing``: a retried request writes nothing
twice. Everything else of a request is written in one transaction, or nothing is.

What comes back: a memory's columns as exported -- text, agent, kind, metadata, importance, usefulness
and feedback, pin, expiry, record time (``created_at``, ``updated_at``), valid time (``occurred_at``,
``valid_until``), its ``key`` and supersession (``superseded_by``, ``superseded_at``), reinforcement
(``seen_count``, ``last_seen_at``, the occurred-at range) and access statistics -- and every history
event. Vectors are not exported: the texts are embedded again by this service's embedder, and the
normalized-text hash (the exact-duplicate lookup) is computed again. Lines written before the lifecycle
fields existed import with their defaults (seen once, current, no key). A ``directive`` line replaces
the agent's directive when its text differs (with its exported version and times for an agent without
one, else at the next version, at least the exported one; the same text is counted ``existing``); a ``settings`` line
sets the org's defaults (``PATCH /v1/org/settings``). A ``document`` line with its content is ingested
again (:mod:`service.export.documents`: chunked and embedded as a mirrored file is; a line without it, from
an older export, is counted ``skipped``); ``chunk`` lines are counted ``skipped``, their file's content is
chunked again. A ``conversation`` line creates its conversation with its owner and times, or keeps the
one the org holds (:mod:`service.export.conversations`). An import
bypasses duplicate detection and supersession: it restores a state that was consistent when exported. It
still refuses what no other write could make (:mod:`service.export.collisions`): a second current memory
of one key, a message at a position or with a ``message_id`` its conversation already holds (409
``conflict``), a message of another agent than its conversation's (409 ``conversation_agent_mismatch``);
a conversation's message is checked as an append checks it (its ids, speaker and role), and every memory
line as a write checks a memory (its texts, times, ranges). A bad line anywhere: nothing written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Final
from uuid import UUID

import msgspec
from pgvector import Vector

from service.conversations.append import embedding_text
from service.conversations.checks import check_ident, clean_speaker
from service.conversations.types import Role, Speaker
from service.db import TenantTx
from service.directives.store import VERSION_MAX, DirectiveStore
from service.directives.types import DirectiveOut
from service.errors import BadRequest, Conflict, PayloadTooLarge, Unprocessable, malformed_json
from service.export.collisions import check_request, claim, one_line
from service.export.conversations import ConversationLine
from service.export.conversations import check as check_conversation
from service.export.documents import DocumentLine, Documents
from service.export.documents import write as write_documents
from service.export.fields import BIGINT_MAX, MAX_COUNT, has_nul, line_field, schema_field
from service.memories.facts.normalize import hash_words, tokens
from service.memories.facts.types import MESSAGE_KIND, EventName, FactKey, OnDuplicate
from service.memories.types import AgentId, AwareDatetime, Kind
from service.memories.validation import (
    check_kind,
    check_metadata,
    check_occurred_at,
    check_text,
    check_text_limits,
)
from service.memories.write import embed_texts
from service.runtime import Services
from service.settings import LimitSettings

FORMAT = 1
"""The export format this service writes (and the newest it reads)."""
MAX_EVENTS = 20_000
"""History events, and conversations, per request (memories: ``PGCONTEXT_MAX_BATCH``); a longer export goes
in several."""

_Object = dict[str, Any]


class ImportRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    lines: Annotated[list[_Object], msgspec.Meta(
        min_length=1, description="Lines of an export (`GET /v1/export`), in any order and as many requests "
                                  "as needed; `export` and `end` lines are optional.")]


class Counts(msgspec.Struct, kw_only=True):
    directive: int
    memory: int
    event: int
    settings: int = 0
    """The org's defaults (a ``settings`` line): 1 when set by this request (``existing``: already so)."""
    document: int = 0
    """Files (``document`` lines with their content) ingested again (``existing``: the org held them as they are)."""
    conversation: int = 0
    """Conversations of ``conversation`` lines created (``existing``: the org held them, same owner)."""


class Skipped(msgspec.Struct, kw_only=True):
    document: int
    """``document`` lines without their content (exports made before documents carried it)."""
    chunk: int
    """``chunk`` lines: a restored document is chunked again from its content."""


class ImportResult(msgspec.Struct, kw_only=True):
    imported: Counts
    """Rows written."""
    existing: Counts
    """Memories and events the org already held (same id), files it held as they are, and conversations it held
    under the same owner: left as they were."""
    skipped: Skipped
    """Lines this import does not write: chunks, and documents without their content."""


class _Header(msgspec.Struct, tag_field="type", tag="export"):
    format: int = 1


class _End(msgspec.Struct, tag_field="type", tag="end"):
    pass


class _Error(msgspec.Struct, tag_field="type", tag="error"):
    pass


class _Chunk(msgspec.Struct, tag_field="type", tag="chunk"):
    pass


class _Settings(msgspec.Struct, tag_field="type", tag="settings"):
    on_duplicate: OnDuplicate


class _Directive(msgspec.Struct, tag_field="type", tag="directive"):
    agent_id: AgentId
    content: str
    version: Annotated[int, msgspec.Meta(ge=1, le=VERSION_MAX - 1)] | None = None
    """At most one below the last there is: the agent's next directive takes the version after it."""
    created_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None


_TIMES: Final = ("created_at", "updated_at", "occurred_at", "valid_until", "expires_at", "superseded_at",
                 "last_seen_at", "first_occurred_at", "last_occurred_at", "last_accessed_at")
"""A memory line's times: each within the bounds a write's ``occurred_at`` has."""


class _Memory(msgspec.Struct, tag_field="type", tag="memory", kw_only=True):
    """What the import reads of a memory line, checked: every column it writes (anything else a line holds is
    ignored)."""

    id: UUID
    text: str
    agent_id: AgentId | None = None
    kind: Kind = "fact"
    key: FactKey | None = None
    metadata: _Object = msgspec.field(default_factory=dict)
    created_at: AwareDatetime | None = None
    occurred_at: AwareDatetime | None = None
    valid_until: AwareDatetime | None = None
    superseded_by: UUID | None = None
    superseded_at: AwareDatetime | None = None
    seen_count: Annotated[int, msgspec.Meta(ge=1, le=MAX_COUNT)] = 1
    access_count: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)] = 0
    last_accessed_at: AwareDatetime | None = None
    importance: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    usefulness: Annotated[float, msgspec.Meta(ge=-1, le=1)] = 0.0
    feedback_count: Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)] = 0
    pinned: bool = False
    updated_at: AwareDatetime | None = None
    expires_at: AwareDatetime | None = None
    last_seen_at: AwareDatetime | None = None
    first_occurred_at: AwareDatetime | None = None
    last_occurred_at: AwareDatetime | None = None
    search_context: str | None = None
    conversation_id: str | None = None
    """A message's (ids are checked by :func:`check_ident`, as an append's are)."""
    position: Annotated[int, msgspec.Meta(ge=1, le=BIGINT_MAX)] | None = None
    message_id: str | None = None
    session_id: str | None = None
    speaker: Speaker | None = None
    role: Role | None = None


_MESSAGE_FIELDS: Final = ("conversation_id", "position", "message_id", "session_id", "speaker", "role")
"""A message's own columns: no other memory has any of them."""


class _Event(msgspec.Struct, tag_field="type", tag="event", kw_only=True):
    id: UUID
    memory_id: UUID
    event: EventName
    at: AwareDatetime
    agent_id: AgentId | None = None
    related_id: UUID | None = None
    undoes: UUID | None = None
    detail: _Object = msgspec.field(default_factory=dict)


_Line = _Header | _End | _Error | DocumentLine | _Chunk | _Settings | _Directive | ConversationLine | _Memory | _Event


class _Parsed(msgspec.Struct):
    memories: list[tuple[int, _Memory, _Object]] = msgspec.field(default_factory=list)
    """Each memory line's place in ``lines``, the line as checked, and as Postgres reads it."""
    conversations: list[tuple[int, ConversationLine, _Object]] = msgspec.field(default_factory=list)
    events: list[_Object] = msgspec.field(default_factory=list)
    directives: dict[str, tuple[int, _Directive]] = msgspec.field(default_factory=dict)
    """Each agent's directive line and its place in ``lines`` (one line an agent)."""
    settings: _Settings | None = None
    documents: Documents = msgspec.field(default_factory=Documents)
    skipped: Skipped = msgspec.field(default_factory=lambda: Skipped(document=0, chunk=0))


def decode(body: bytes) -> ImportRequest:
    try:
        return msgspec.json.decode(body, type=ImportRequest)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid import body: {exc}", code="validation_error") from exc
    except msgspec.DecodeError as exc:
        raise malformed_json(exc) from exc


def parse(request: ImportRequest, services: Services) -> _Parsed:
    limits = services.settings.limits
    out = _Parsed()
    events: dict[Any, tuple[int, Any]] = {}  # each event's line (one line an id)
    for index, raw in enumerate(request.lines):
        try:
            line = msgspec.convert(raw, _Line, strict=False)
        except msgspec.ValidationError as exc:  # the body's schema holds any object: a line's own shape is 422
            raise Unprocessable(f"lines[{index}] is not an export line: {exc}", code="invalid_line",
                                details=line_field(index, schema_field(exc))) from exc
        if isinstance(line, _Header) and line.format > FORMAT:
            raise Unprocessable(f"lines[{index}]: export format {line.format} is newer than this service reads "
                                f"({FORMAT})", code="unsupported_format", details=line_field(index))
        if isinstance(line, _Error):
            raise Unprocessable(f"lines[{index}]: the export broke off (an error line); export again",
                                code="incomplete_export", details=line_field(index))
        if isinstance(line, DocumentLine) and line.content is not None:
            out.documents.add(line, index, services.settings)
        elif isinstance(line, DocumentLine | _Chunk):
            setattr(out.skipped, raw["type"], getattr(out.skipped, raw["type"]) + 1)
        elif isinstance(line, _Settings):
            out.settings = line
        elif isinstance(line, _Directive):
            if "\n" in line.agent_id:
                raise Unprocessable(f"lines[{index}]: the directive's agent_id is not valid", code="validation_error",
                                    details=line_field(index, "agent_id"))
            if not line.content.strip() or len(line.content) > limits.max_directive_chars or "\x00" in line.content:
                raise Unprocessable(f"lines[{index}]: the directive's content is empty, too long or holds a NUL "
                                    "character", code="validation_error", details=line_field(index, "content"))
            for name in ("created_at", "updated_at"):
                if (value := getattr(line, name)) is not None:
                    check_occurred_at(value, field=name)
            one_line(out.directives, line.agent_id, index, line, f"the directive of agent {line.agent_id!r}",
                     "agent_id")
        elif isinstance(line, ConversationLine):
            check_conversation(line, index)
            out.conversations.append((index, line, msgspec.to_builtins(line)))
        elif isinstance(line, _Memory):
            _check_memory(line, index, services.settings.limits)
            # Postgres reads the line as checked (msgspec's own rendering of each field), never as sent: a
            # column the import does not write, or a value only msgspec's lenient reading took, cannot fail there.
            out.memories.append((index, line, msgspec.to_builtins(line)))
        elif isinstance(line, _Event):
            try:
                check_occurred_at(line.at, field="at")
            except BadRequest as exc:
                raise Unprocessable(f"lines[{index}]: {exc.message}", code=exc.code,
                                    details=line_field(index, "at")) from exc
            if has_nul(line.detail):
                raise Unprocessable(f"lines[{index}]: detail must not contain NUL characters",
                                    code="validation_error", details=line_field(index, "detail"))
            one_line(events, line.id, index, line, f"event {line.id}", "id")
            out.events.append(msgspec.to_builtins(line))
    if len(out.memories) > limits.max_batch:
        raise PayloadTooLarge(f"{len(out.memories)} memories in one request; the limit is {limits.max_batch} "
                              "(PGCONTEXT_MAX_BATCH): send the export in several requests", code="batch_too_large")
    for name, lines in (("events", out.events), ("conversations", out.conversations)):
        if len(lines) > MAX_EVENTS:
            raise PayloadTooLarge(f"{len(lines)} {name} in one request; the limit is {MAX_EVENTS}: send the "
                                  "export in several requests", code="batch_too_large")
    out.documents.check_size(services.settings)
    check_request(out.memories, out.conversations)
    return out


def _check_memory(line: _Memory, index: int, limits: LimitSettings) -> None:
    """A memory line as a write checks a memory (text, search context, kind, metadata, times, valid time
    after the event), and what only an import can send (a memory superseded by itself); 422 naming
    ``lines[i].field``."""
    try:
        check_text(line.text, limits)
        check_text_limits(line.search_context, limits)
        if line.kind != MESSAGE_KIND:  # a conversation's message comes back as it was exported
            check_kind(line.kind)
        try:
            check_metadata(line.metadata, limits)
        except (BadRequest, PayloadTooLarge) as exc:
            exc.details.setdefault("field", "metadata")
            raise
        for name in _TIMES:
            if (value := getattr(line, name)) is not None:
                check_occurred_at(value, field=name)
        # A value superseded by one of the same occurred_at ends where it starts (facts.retire): exported so.
        ends = line.valid_until
        if ends is not None and line.occurred_at is not None and (
                ends < line.occurred_at or (ends == line.occurred_at and line.superseded_by is None)):
            raise Unprocessable("valid_until must be after occurred_at (a superseded memory's may equal it)",
                                code="validation_error", details={"field": "valid_until"})
        if line.superseded_by == line.id:
            raise Unprocessable("a memory cannot supersede itself", code="validation_error",
                                details={"field": "superseded_by"})
        _check_message(line)
    except (BadRequest, Unprocessable, PayloadTooLarge) as exc:
        raise Unprocessable(f"lines[{index}]: {exc.message}", code=exc.code,
                            details=line_field(index, str(exc.details.get("field", "")))) from exc
    if line.kind == MESSAGE_KIND and (line.superseded_by is not None or line.key is not None):
        raise Unprocessable(f"lines[{index}]: messages are events: they take no key and are never superseded",
                            code="validation_error", details=line_field(index))


def _check_message(line: _Memory) -> None:
    """A message's own columns as the database keeps them together (only on a message; a conversation
    and a position together; a message of no conversation, from before conversations, has none), and
    its ids and speaker as an append checks them (its role and the speaker's length: the type)."""
    given = [name for name in _MESSAGE_FIELDS if getattr(line, name) is not None]
    if line.kind != MESSAGE_KIND:
        if given:
            raise BadRequest(f"{given[0]} is a message's: only a line of kind {MESSAGE_KIND!r} belongs to a "
                             "conversation", code="validation_error", details={"field": given[0]})
        return
    if (line.conversation_id is None) != (line.position is None):
        missing = "conversation_id" if line.conversation_id is None else "position"
        raise BadRequest(f"{missing} is missing: a conversation's message has its conversation_id and its position",
                         code="validation_error", details={"field": missing})
    if line.conversation_id is None and given:
        raise BadRequest(f"{given[0]} is a conversation's: a message of no conversation has none",
                         code="validation_error", details={"field": given[0]})
    for name in ("conversation_id", "session_id", "message_id"):
        check_ident(getattr(line, name), name)
    if line.speaker is not None:
        clean_speaker(line.speaker, "speaker")  # checked, not trimmed: a message comes back as exported


async def restore(services: Services, org_id: UUID, request: ImportRequest) -> ImportResult:
    parsed = parse(request, services)
    memories = [m for _, m, _ in parsed.memories]
    # a message's vector from what an append embeds (its speaker's name before the words)
    texts = [embedding_text(m.text, m.speaker) if m.kind == MESSAGE_KIND else m.text for m in memories]
    vectors = await embed_texts(services, org_id, texts) if memories else None
    imported, existing = (Counts(directive=0, memory=0, event=0) for _ in range(2))
    agents: set[str | None] = set()
    store = services.extras["directives"]
    assert isinstance(store, DirectiveStore)
    epoch = await store.epochs.current(org_id) if parsed.directives else None  # read before writing, as a PUT
    async with services.db.tenant(org_id) as tx:
        directives = await _write_directives(tx, parsed.directives)
        imported.directive = len(directives)
        existing.directive = len(parsed.directives) - len(directives)
        if memories or parsed.conversations:
            created = await claim(tx, parsed.memories, parsed.conversations)
            imported.conversation = len(created)
            existing.conversation = len({c.id for _, c, _ in parsed.conversations}) - len(created)
        if memories:
            assert vectors is not None
            rows = await tx.fetch(
                "export.import_memories", org_id, [raw for _, _, raw in parsed.memories], [Vector(v) for v in vectors],
                [hash_words(tokens(m.text)) if m.kind != MESSAGE_KIND else None for m in memories])
            written = {r["id"] for r in rows}
            agents |= {r["agent_id"] for r in rows}
            accessed = [m for m in memories if m.id in written and m.last_accessed_at is not None]
            if accessed:
                await tx.execute("export.import_access", org_id, [m.id for m in accessed],
                                 [m.access_count for m in accessed], [m.last_accessed_at for m in accessed])
            imported.memory, existing.memory = len(written), len(memories) - len(written)
        if parsed.events:
            imported.event = len(await tx.fetch("export.import_events", org_id, parsed.events))
            existing.event = len(parsed.events) - imported.event
        if parsed.settings is not None:
            held = await tx.fetchrow("facts.org_settings_get", org_id)
            if held is not None and held["on_duplicate"] == parsed.settings.on_duplicate:
                existing.settings = 1  # a restore run again changes nothing
            else:
                await tx.fetchrow("facts.org_settings_upsert", org_id, parsed.settings.on_duplicate)
                imported.settings = 1
    await store.publish(org_id, directives, epoch)
    imported.document, existing.document = await write_documents(services, org_id, parsed.documents)
    if agents:
        await services.memories_changed(org_id, agents)
    return ImportResult(imported=imported, existing=existing, skipped=parsed.skipped)


async def _write_directives(tx: TenantTx, directives: dict[str, tuple[int, _Directive]]) -> list[DirectiveOut]:
    """Each directive line whose text is not the agent's, written in the request's transaction ahead of the
    rest (one that cannot be written fails the request: nothing of it is written); returns those written."""
    written: list[DirectiveOut] = []
    now = datetime.now(UTC)
    for agent_id, (index, line) in sorted(directives.items()):
        held = await tx.fetchrow("directives.get", tx.org_id, agent_id)
        if held is not None and held["content"] == line.content:  # a restore run again changes nothing
            continue
        if held is not None and held["version"] >= VERSION_MAX:
            raise Conflict(f"lines[{index}]: the directive of agent {agent_id!r} is at version {held['version']}, "
                           "the last there is: it cannot change", code="conflict",
                           details={**line_field(index, "version"), "version": held["version"]})
        written.append(await DirectiveStore.restore(tx, agent_id, line.content, line.version, line.created_at or now,
                                                    line.updated_at or now))
    return written

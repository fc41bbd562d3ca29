"""Request and response types of the memory API (msgspec: validated at the edge, typed inside)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec

from service.memories.facts.types import FactKey, OnDuplicate, WrittenItem

AGENT_ID_PATTERN = r"^(?!.*\n)[A-Za-z0-9_.:@-]+$"
"""1-200 letters, digits and ``_.:@-``. The lookahead changes nothing for JSON Schema's regexes, where
``$`` is the end of the string; msgspec (Python's ``re.search``) also takes ``$`` just before a final
newline, which it refuses."""
AGENT_ID_MAX_LENGTH = 200
AGENT_ID_RULE = "agent_id must be 1-200 characters of letters, digits and _.:@-"
AgentId = Annotated[str, msgspec.Meta(min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
                                      description="1-200 letters, digits and _.:@-")]
"""The one agent-id rule: every request field, query and path parameter and setting naming an agent."""


def is_agent_id(value: str) -> bool:
    """Whether ``value`` passes :data:`AgentId` (for ids that arrive outside a request body)."""
    try:
        msgspec.convert(value, AgentId)
    except msgspec.ValidationError:
        return False
    return True
KIND_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
Kind = Annotated[str, msgspec.Meta(pattern=KIND_PATTERN)]
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
"""An RFC 3339 timestamp with its timezone (``Z`` or an offset): a naive time would be ambiguous."""


def holds_in_utc(moment: datetime) -> bool:
    """Whether an aware time is one PostgreSQL and Python both hold: in UTC, within the years 1-9999
    (``0001-01-01T00:00:00+05:00`` is not)."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return False
    return True

DOCUMENT_CHUNK_KIND = "document_chunk"
"""Written only by the documents API, which keeps path, line span and the documents table consistent."""
MESSAGE_KIND = "message"
"""A conversation's messages: written only by the conversation API (position, speaker, session), never
merged or rewritten."""
RESERVED_KINDS = (DOCUMENT_CHUNK_KIND, MESSAGE_KIND)


class MemoryIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    text: str
    agent_id: AgentId | None = None
    kind: Kind = "fact"
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    importance: Unit = 0.5
    pinned: bool = False
    expires_at: datetime | None = None
    occurred_at: AwareDatetime | None = None
    """When the recorded thing happened or was said (e.g. the date of a conversation turn); default: now."""
    search_context: str | None = None
    """Text that helps *find* this memory but is never packed into a context: lexical search matches its
    words (weighted below the text's), e.g. the turn a reply answers, or a chunk's document title."""
    embedding: list[float] | None = None
    """Optional caller-computed vector (must match the service's dimension); embedded server-side if absent."""
    key: FactKey | None = None
    """A single-valued key (``user.city``): the newest value (by ``occurred_at``) per key and agent scope is
    the only current one; writing a newer value retires the current one, an older one arriving late is
    kept as history."""
    supersedes: list[UUID] = msgspec.field(default_factory=list)
    """Memories this one replaces: they are retired (``superseded_by`` this one) when it is written."""
    valid_until: AwareDatetime | None = None
    """When the fact stops being true (valid time; ``occurred_at`` is when it starts). Default: open."""
    on_duplicate: OnDuplicate | None = None
    """What to do when this text duplicates a current memory of the same agent, kind and key: ``merge``
    (reinforce it), ``keep`` (write it anyway) or ``reject`` (409). Default: the batch's, else the org's
    (``PATCH /v1/org/settings``), else ``merge``."""


class MemoryBatchIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    memories: list[MemoryIn]
    on_duplicate: OnDuplicate | None = None
    """The default ``on_duplicate`` of the batch's items."""


class MemoryPatch(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    text: str | msgspec.UnsetType = msgspec.UNSET
    agent_id: AgentId | msgspec.UnsetType | None = msgspec.UNSET
    kind: Kind | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    importance: Unit | msgspec.UnsetType = msgspec.UNSET
    pinned: bool | msgspec.UnsetType = msgspec.UNSET
    expires_at: datetime | msgspec.UnsetType | None = msgspec.UNSET
    occurred_at: AwareDatetime | msgspec.UnsetType = msgspec.UNSET
    search_context: str | msgspec.UnsetType | None = msgspec.UNSET
    valid_until: AwareDatetime | msgspec.UnsetType | None = msgspec.UNSET
    """When the fact stops being true; ``null`` opens it again."""
    on_duplicate: OnDuplicate | msgspec.UnsetType = msgspec.UNSET
    """When the new ``text`` duplicates another current memory: ``merge`` (this memory is merged into
    it, and the answer is that memory with ``status`` ``merged``), ``keep`` or ``reject`` (409)."""


class CreatedMemories(msgspec.Struct):
    ids: list[UUID]
    """Per item, in order: the memory holding it (for a merged item, the memory it was merged into)."""
    items: list[WrittenItem] = msgspec.field(default_factory=list)
    """Per item, in order: what the write did (``created``, ``merged`` or ``superseded``)."""


class DeletedAgentMemories(msgspec.Struct):
    agent_id: str
    deleted: int
    """Memories deleted by this request (0 when there were none left: the call is idempotent)."""


class MessageRef(msgspec.Struct, kw_only=True):
    """Where a conversation's message stands (a memory of kind ``message``: read, searched or packed)."""

    conversation_id: str
    position: int
    """1, 2, ... in the conversation's order: its neighbours are ``position - 1`` and ``position + 1``."""
    session_id: str | None
    speaker: str | None
    role: str | None
    message_id: str | None


class MemoryOut(msgspec.Struct):
    id: UUID
    agent_id: str | None
    kind: str
    text: str
    metadata: dict[str, Any]
    importance: float
    usefulness: float
    pinned: bool
    created_at: datetime
    updated_at: datetime
    occurred_at: datetime
    """When the recorded thing happened or was said (defaults to the write time)."""
    search_context: str | None
    """Searched (lexically) but never packed; null when none was given."""
    last_accessed_at: datetime | None
    access_count: int
    expires_at: datetime | None
    source_path: str | None
    line_start: int | None
    line_end: int | None
    section_title: str | None
    breadcrumb: str | None
    level: int | None
    key: str | None = None
    """The single-valued key this memory holds a value of (null: none)."""
    valid_from: datetime | None = None
    """Valid time's start: ``occurred_at``."""
    valid_until: datetime | None = None
    """Valid time's end (null: still true)."""
    current: bool = True
    """False once retired: superseded by a newer memory (record time ``superseded_at``), or its
    ``valid_until`` has passed."""
    superseded_by: UUID | None = None
    superseded_at: datetime | None = None
    seen_count: int = 1
    """How many writes this memory stands for (1 + duplicates merged into it)."""
    last_seen_at: datetime | None = None
    """When it was last written (its creation, or the latest duplicate merged into it)."""
    first_occurred_at: datetime | None = None
    last_occurred_at: datetime | None = None
    """The event-time range of every write it stands for (``occurred_at`` when nothing was merged)."""
    message: MessageRef | None = None
    """A conversation's message: its conversation, position, session, speaker and role."""


class PatchedMemory(MemoryOut, kw_only=True):
    status: Literal["updated", "merged"] = "updated"
    """``merged``: the new text duplicated another current memory, and this memory was merged into it
    (the answer is that memory)."""


class MemoryPage(msgspec.Struct):
    items: list[MemoryOut]
    next_cursor: str | None

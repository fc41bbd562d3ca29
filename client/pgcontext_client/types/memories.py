"""Memories (CRUD, hot set, feedback) and directives."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec

from pgcontext_client.types._base import In
from pgcontext_client.types.conversations import MessageRef


class MemoryIn(In):
    """One memory to store (``Client.create_memories`` takes a list of these)."""

    text: str
    agent_id: str | None = None
    """The agent it belongs to (1-200 letters, digits and ``_.:@-``); none: org-wide."""
    kind: str | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = None
    """0..1 (service default 0.5)."""
    pinned: bool | None = None
    expires_at: datetime | None = None
    occurred_at: datetime | None = None
    """When the recorded thing happened (timezone-aware); default: the write time."""
    search_context: str | None = None
    """Words that help find it but are never packed (e.g. the turn it replies to)."""
    embedding: list[float] | None = None
    key: str | None = None
    """A single-valued key (``user.city``): the newest value per key and agent is the only current one."""
    supersedes: list[UUID] | None = None
    """Memories this one replaces (retired when it is written)."""
    valid_until: datetime | None = None
    """When the fact stops being true (``occurred_at`` is when it starts)."""
    on_duplicate: str | None = None
    """``merge`` (service default), ``keep`` or ``reject``: what to do when it duplicates a current memory."""


class MemoryBatchIn(In):
    memories: list[MemoryIn]
    on_duplicate: str | None = None


class MemoryPatch(In):
    """A partial update: only the fields set are changed (``agent_id=None`` makes it org-wide)."""

    text: str | msgspec.UnsetType = msgspec.UNSET
    agent_id: str | msgspec.UnsetType | None = msgspec.UNSET
    kind: str | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    importance: float | msgspec.UnsetType = msgspec.UNSET
    pinned: bool | msgspec.UnsetType = msgspec.UNSET
    expires_at: datetime | msgspec.UnsetType | None = msgspec.UNSET
    occurred_at: datetime | msgspec.UnsetType = msgspec.UNSET
    search_context: str | msgspec.UnsetType | None = msgspec.UNSET
    valid_until: datetime | msgspec.UnsetType | None = msgspec.UNSET
    on_duplicate: str | msgspec.UnsetType = msgspec.UNSET


class WrittenItem(msgspec.Struct, kw_only=True):
    """What a write did with one item: ``created``, ``merged`` (``id``: the memory it merged into) or
    ``superseded`` (a new memory that retired ``superseded``)."""

    id: UUID
    status: str
    superseded: list[UUID] = msgspec.field(default_factory=list)
    current: bool = True
    superseded_by: UUID | None = None
    similarity: float | None = None


class CreatedMemories(msgspec.Struct, kw_only=True):
    ids: list[UUID]
    items: list[WrittenItem] = msgspec.field(default_factory=list)


class CreatedMemory(CreatedMemories, kw_only=True):
    """The answer to a single write (``Client.create_memory``): ``id`` and ``status`` of the one memory,
    with ``ids`` and ``items`` as a batch has them."""

    @property
    def id(self) -> UUID:
        """The memory holding the text: the new one, or the one it was merged into."""
        return self.ids[0]

    @property
    def status(self) -> str:
        """``created``, ``merged`` or ``superseded`` (see ``WrittenItem``)."""
        return self.items[0].status if self.items else "created"


class DeletedAgentMemories(msgspec.Struct, kw_only=True):
    agent_id: str
    deleted: int


class Memory(msgspec.Struct, kw_only=True):
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
    search_context: str | None
    """Searched but never packed; None when none was given."""
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
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    current: bool = True
    """False once superseded (or past ``valid_until``)."""
    superseded_by: UUID | None = None
    superseded_at: datetime | None = None
    seen_count: int = 1
    """How many writes it stands for (duplicates merged into it)."""
    last_seen_at: datetime | None = None
    first_occurred_at: datetime | None = None
    last_occurred_at: datetime | None = None
    message: MessageRef | None = None
    """A conversation's message: its conversation, position, session, speaker and role."""


class PatchedMemory(Memory, kw_only=True):
    status: str = "updated"
    """``merged``: the new text duplicated another current memory, this answer is that memory."""


class UndoIn(In):
    reason: str | None = None


class OrgSettingsIn(In):
    on_duplicate: str | None = None


class HistoryEvent(msgspec.Struct, kw_only=True):
    id: UUID
    memory_id: UUID
    agent_id: str | None
    event: str
    """created, updated, merged, superseded, undone, deleted or consolidated."""
    at: datetime
    related_id: UUID | None
    undoes: UUID | None
    undone_by: UUID | None
    detail: dict[str, Any]


class HistoryPage(msgspec.Struct, kw_only=True):
    items: list[HistoryEvent]
    next_cursor: str | None


class UndoResult(msgspec.Struct, kw_only=True):
    undone: UUID
    event: UUID
    restored: UUID | None = None
    reinstated: list[UUID] = msgspec.field(default_factory=list)


class ImportIn(In):
    lines: list[dict[str, Any]]


class ImportCounts(msgspec.Struct, kw_only=True):
    directive: int
    memory: int
    event: int
    settings: int = 0
    """The org's defaults (a ``settings`` line of a whole-org export): 1 when the request set them."""
    document: int = 0
    """Files (``document`` lines with their content) ingested again; ``existing``: held as they are."""
    conversation: int = 0
    """Conversations of ``conversation`` lines created; ``existing``: held already, under the same owner."""


class ImportSkipped(msgspec.Struct, kw_only=True):
    document: int
    chunk: int


class ImportResult(msgspec.Struct, kw_only=True):
    imported: ImportCounts
    existing: ImportCounts
    """Memories and events the org already held (same id), files it held as they are, and conversations it held
    under the same owner: left as they were."""
    skipped: ImportSkipped
    """Lines an import does not write: chunks (cut again from their document), and documents without their
    content (exports made before documents carried it)."""


class OrgSettings(msgspec.Struct, kw_only=True):
    on_duplicate: str
    updated_at: datetime | None


class MemoryPage(msgspec.Struct, kw_only=True):
    items: list[Memory]
    next_cursor: str | None


class HotMemory(msgspec.Struct, kw_only=True):
    id: UUID
    agent_id: str | None
    kind: str
    text: str
    importance: float
    usefulness: float
    pinned: bool
    created_at: datetime
    occurred_at: datetime
    last_accessed_at: datetime | None
    access_count: int


class HotSet(msgspec.Struct, kw_only=True):
    agent_id: str
    source: str
    built_at: datetime
    items: list[HotMemory]


class FeedbackItem(In):
    id: UUID
    helpful: bool


class FeedbackIn(In):
    items: list[FeedbackItem] | None = None
    memory_ids: list[UUID] | None = None
    helpful: bool | None = None


class FeedbackUpdated(msgspec.Struct, kw_only=True):
    id: UUID
    usefulness: float
    feedback_count: int


class FeedbackOut(msgspec.Struct, kw_only=True):
    updated: list[FeedbackUpdated]
    not_found: list[UUID]






class DirectiveIn(In):
    content: str


class Directive(msgspec.Struct, kw_only=True):
    agent_id: str
    content: str
    version: int
    updated_at: datetime

"""Request and response types of the memory API (msgspec: validated at the edge, typed inside)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec

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

DOCUMENT_CHUNK_KIND = "document_chunk"
"""Written only by the documents API, which keeps path, line span and the documents table consistent."""


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


class MemoryBatchIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    memories: list[MemoryIn]


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


class CreatedMemories(msgspec.Struct):
    ids: list[UUID]


class DeletedAgentMemories(msgspec.Struct):
    agent_id: str
    deleted: int
    """Memories deleted by this request (0 when there were none left: the call is idempotent)."""


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


class MemoryPage(msgspec.Struct):
    items: list[MemoryOut]
    next_cursor: str | None

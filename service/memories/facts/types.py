"""Types of the fact lifecycle: duplicate policy, what happened to each written item, history, org defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec

OnDuplicate = Literal["merge", "keep", "reject"]
"""What a write does with a duplicate of a current memory: ``merge`` into it (default), ``keep`` both,
``reject`` the request (409 ``duplicate``)."""
WriteStatus = Literal["created", "merged", "superseded"]
KEY_PATTERN = r"^[A-Za-z0-9_.:@/-]{1,200}$"
FactKey = Annotated[str, msgspec.Meta(pattern=KEY_PATTERN, min_length=1, max_length=200,
                                      description="A single-valued key (1-200 letters, digits and _.:@/-), e.g. "
                                                  "user.city: a newer value retires the current one.")]
MESSAGE_KIND = "message"
"""Conversation turns are events: never merged, never superseded."""
EventName = Literal["created", "updated", "merged", "superseded", "undone", "deleted", "consolidated"]
UNDOABLE: frozenset[str] = frozenset({"merged", "consolidated"})


def is_current(superseded_by: UUID | None, valid_until: datetime | None, now: datetime | None = None) -> bool:
    """Whether a memory holds now: not retired by a newer one and its valid time not ended."""
    return superseded_by is None and (valid_until is None or valid_until > (now or datetime.now(UTC)))


class WrittenItem(msgspec.Struct, kw_only=True):
    """What one item of a create request did."""

    id: UUID
    """The memory now holding the item: a new one (``created`` / ``superseded``) or, for ``merged``,
    the current memory it was merged into."""
    status: WriteStatus
    """``created``: a new memory; ``merged``: a duplicate of memory ``id``, which was reinforced (no new
    row; undo it from that memory's history); ``superseded``: a new memory that retired ``superseded``."""
    superseded: list[UUID] = msgspec.field(default_factory=list)
    """Memories this item retired (explicit ``supersedes`` or an older value of its ``key``)."""
    current: bool = True
    """False when the item arrived late (a newer value of its key already held, so it was stored as
    history, ``superseded_by`` that value, and retired nothing) or its ``valid_until`` has passed."""
    superseded_by: UUID | None = None
    similarity: float | None = None
    """``merged``: the embedding cosine to the memory it was merged into."""


class HistoryEvent(msgspec.Struct, kw_only=True):
    id: UUID
    memory_id: UUID
    agent_id: str | None
    event: EventName
    at: datetime
    related_id: UUID | None
    """The other memory involved: merged from / into, superseded by, restored as."""
    undoes: UUID | None
    """``undone``: the event it reverted."""
    undone_by: UUID | None
    """Set when this event was undone (by that ``undone`` event)."""
    detail: dict[str, Any]


class HistoryPage(msgspec.Struct, kw_only=True):
    items: list[HistoryEvent]
    next_cursor: str | None


class UndoIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    reason: Annotated[str, msgspec.Meta(max_length=1000)] | None = None
    """Why, kept in the ``undone`` event."""


class UndoResult(msgspec.Struct, kw_only=True):
    undone: UUID
    """The event reverted."""
    event: UUID
    """The ``undone`` event recorded for it."""
    restored: UUID | None = None
    """A merged-away item written again as a memory of its own (a merge's undo)."""
    reinstated: list[UUID] = msgspec.field(default_factory=list)
    """Memories current again (a consolidation's supersede undone)."""


class OrgSettingsIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    on_duplicate: OnDuplicate | None = None


class OrgSettingsOut(msgspec.Struct, kw_only=True):
    on_duplicate: OnDuplicate
    """The default for writes that do not say (``merge`` unless set)."""
    updated_at: datetime | None

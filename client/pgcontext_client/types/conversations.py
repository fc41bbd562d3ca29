"""Conversations: messages appended in order, searchable as memories of kind ``message``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

from pgcontext_client.types._base import In

Role = Literal["user", "assistant", "system", "tool"]


class MessageIn(In):
    """One message to append: the words as said, and who said them (``speaker``, a name, or ``role``)."""

    content: str
    speaker: str | None = None
    role: Role | None = None
    occurred_at: datetime | None = None
    """When it was said (timezone-aware); default: the write time."""
    session_id: str | None = None
    message_id: str | None = None
    """Your id for it, unique in the conversation: appending it again writes nothing (``created`` false)."""
    metadata: dict[str, Any] | None = None


class AppendIn(In):
    messages: list[MessageIn]
    agent_id: str | msgspec.UnsetType | None = msgspec.UNSET
    """The conversation's agent, set by its first append (null or left out there: org-wide)."""


class AppendedMessage(msgspec.Struct, kw_only=True):
    id: UUID
    """The message's memory id (search results and contexts refer to it)."""
    position: int
    message_id: str | None
    session_id: str | None
    created: bool


class Appended(msgspec.Struct, kw_only=True):
    conversation_id: str
    agent_id: str | None
    created: bool
    message_count: int
    messages: list[AppendedMessage]


class ConversationMessage(msgspec.Struct, kw_only=True):
    id: UUID
    conversation_id: str
    position: int
    message_id: str | None
    session_id: str | None
    speaker: str | None
    role: str | None
    content: str
    occurred_at: datetime
    created_at: datetime
    metadata: dict[str, Any]


class MessagePage(msgspec.Struct, kw_only=True):
    items: list[ConversationMessage]
    next_cursor: str | None


class Conversation(msgspec.Struct, kw_only=True):
    id: str
    agent_id: str | None
    message_count: int
    created_at: datetime
    updated_at: datetime


class ConversationPage(msgspec.Struct, kw_only=True):
    items: list[Conversation]
    next_cursor: str | None


class DeletedConversation(msgspec.Struct, kw_only=True):
    conversation_id: str
    messages_deleted: int


class TruncatedConversation(msgspec.Struct, kw_only=True):
    conversation_id: str
    messages_deleted: int
    """How many messages the call removed."""
    message_count: int
    """Messages left: the next append goes to position ``message_count + 1``."""


class MessageRef(msgspec.Struct, kw_only=True):
    """Where a message found by search (or packed into a context) stands in its conversation."""

    conversation_id: str
    position: int
    session_id: str | None
    speaker: str | None
    role: str | None
    message_id: str | None

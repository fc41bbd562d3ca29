"""Request and response types of the conversation API (msgspec: validated at the edge, typed inside)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal
from uuid import UUID

import msgspec

from service.memories.types import AgentId, AwareDatetime
from service.retrieval.types import ConversationId

ID_RULE: Final = "1-200 characters of letters, digits and _.:@-, not only dots"
"""How an error states the rule of conversation, session and message ids
(:data:`~service.retrieval.types.ConversationId`, which path and query parameters are checked against
too: :func:`service.conversations.checks.check_ident`)."""
Role = Literal["user", "assistant", "system", "tool"]
SPEAKER_MAX_LENGTH: Final = 200
Speaker = Annotated[str, msgspec.Meta(min_length=1, max_length=SPEAKER_MAX_LENGTH)]
"""A name on one line: no control, format (bidi, zero-width) or line/paragraph separator character,
not blank; surrounding whitespace is trimmed (checked in code, stated in the schema)."""


class MessageIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    content: str
    """The words as said (searchable, packed into contexts with the speaker's name before them)."""
    speaker: Speaker | None = None
    """Who said it, a name ("Melanie"): a query naming them ranks their messages higher."""
    role: Role | None = None
    """user, assistant, system or tool."""
    occurred_at: AwareDatetime | None = None
    """When it was said (RFC 3339 with timezone, 1900-2200); default: the write time."""
    session_id: ConversationId | None = None
    """The session it belongs to (a message's search context comes from its own session's turns)."""
    message_id: ConversationId | None = None
    """The caller's id for it, unique in the conversation: a message already there is not written again."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class AppendIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    messages: list[MessageIn]
    agent_id: AgentId | msgspec.UnsetType | None = msgspec.UNSET
    """The conversation's agent, set by its first append (absent or null there: org-wide). Later
    appends may leave it out; one naming another agent (or null for an agent's conversation) is a 409."""


class AppendedMessage(msgspec.Struct):
    id: UUID
    """The message's memory id (search results and assembled contexts refer to it)."""
    position: int
    """1, 2, ... in append order within the conversation."""
    message_id: str | None
    session_id: str | None
    created: bool
    """False when a message with this ``message_id`` was already in the conversation (nothing written)."""


class AppendOut(msgspec.Struct):
    conversation_id: str
    agent_id: str | None
    created: bool
    """Whether this append created the conversation."""
    message_count: int
    """Messages in the conversation after this append."""
    messages: list[AppendedMessage]
    """One per message sent, in the order sent."""


class MessageOut(msgspec.Struct):
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


class MessagePage(msgspec.Struct):
    items: list[MessageOut]
    next_cursor: str | None


class ConversationOut(msgspec.Struct):
    id: str
    agent_id: str | None
    message_count: int
    created_at: datetime
    updated_at: datetime
    """When its messages last changed: an append that wrote one, or a removal of its last ones (the
    creation time until then)."""


class ConversationPage(msgspec.Struct):
    items: list[ConversationOut]
    next_cursor: str | None


class DeletedConversation(msgspec.Struct):
    conversation_id: str
    messages_deleted: int


class TruncatedConversation(msgspec.Struct):
    conversation_id: str
    messages_deleted: int
    """How many messages this call removed (0 when the conversation held none from ``from_position``)."""
    message_count: int
    """Messages left: the next append goes to position ``message_count + 1``."""

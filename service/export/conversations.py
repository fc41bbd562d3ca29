"""The ``conversation`` lines of an import: each conversation an export holds (its owner, message count and
times), ahead of its messages, so one whose messages were all removed comes back with its owner, and every
one with its exported ``created_at`` and ``updated_at``.

A line creates the conversation, or keeps the one the org holds under the same owner (counted
``existing``; it keeps the earlier creation and the later change of the two); one the org holds under
another owner is refused as a message of it would be (409 ``conversation_agent_mismatch``,
:mod:`service.export.collisions`). The count is never taken from the line: a conversation counts up to
the last position of the messages it holds (0 for one of no message), and its messages raise it as they
arrive, in the line's request or a later one, so the next append lands right after the last message
there is, however the export was split or cut. An export made before these lines imports as it did:
its conversations are made from their messages (owner, last position, the messages' times).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from service.conversations.checks import check_ident
from service.errors import BadRequest, Unprocessable
from service.export.fields import BIGINT_MAX, line_field
from service.memories.types import AgentId, AwareDatetime
from service.memories.validation import check_occurred_at


class ConversationLine(msgspec.Struct, tag_field="type", tag="conversation", kw_only=True):
    """What the import reads of a conversation line (its ``org_id`` is ignored)."""

    id: str
    agent_id: AgentId | None = None
    message_count: Annotated[int, msgspec.Meta(ge=0, le=BIGINT_MAX)] = 0
    """What it held when exported: informative (its messages make the count)."""
    created_at: AwareDatetime | None = None
    updated_at: AwareDatetime | None = None


def check(line: ConversationLine, index: int) -> None:
    """Its id as an append checks it, its times as a memory line's (422 naming ``lines[i].field``; its agent
    and count: the type's)."""
    try:
        check_ident(line.id, "id")
        for name in ("created_at", "updated_at"):
            if (value := getattr(line, name)) is not None:
                check_occurred_at(value, field=name)
    except BadRequest as exc:
        raise Unprocessable(f"lines[{index}]: {exc.message}", code=exc.code,
                            details=line_field(index, str(exc.details.get("field", "")))) from exc

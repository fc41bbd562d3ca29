"""What an import checks before it writes memories, as the writers of the same rows do: a message
stays in its conversation's agent (an append's 409 ``conversation_agent_mismatch``), so does a
conversation line (:mod:`service.export.conversations`) of a conversation the org holds, and no line takes
a place another memory holds -- a position or a ``message_id`` in a conversation, the current value of
a key -- whether that memory is another line of the request or one the org holds (409 ``conflict``,
naming the line and what it collided with, never the database's constraint).

The checks against held rows run under the locks those writers take: each conversation's row (created
here for a new one, so a concurrent append or import waits) and the key scopes of fact writes
(``facts.lock_scopes``). A line whose id the org already holds is not written, so it collides with
nothing there, and makes or raises no conversation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from service.conversations.checks import whose
from service.db import TenantTx
from service.errors import Conflict
from service.export.conversations import ConversationLine
from service.memories.facts.write import scope_key


class Line(Protocol):
    """What these checks read of a memory line."""

    id: UUID
    agent_id: str | None
    key: str | None
    superseded_by: UUID | None
    conversation_id: str | None
    position: int | None
    message_id: str | None


Entry = tuple[int, Line, dict[str, Any]]
"""A memory line: its place in the request's ``lines``, the line as checked, and as sent."""
Conversation = tuple[int, ConversationLine, dict[str, Any]]
"""A conversation line: its place in ``lines``, the line as checked, and as Postgres reads it."""


def _mismatch(index: int, conversation_id: str | None, agent_id: str | None, owner: str | None,
              where: str) -> Conflict:
    return Conflict(f"lines[{index}]: conversation {conversation_id!r} belongs to {whose(owner)}{where}, "
                    f"not {whose(agent_id)}", code="conversation_agent_mismatch",
                    details={"field": f"lines[{index}].agent_id", "agent_id": owner})


def _collision(index: int, field: str, line: Line, holder: str, **details: Any) -> Conflict:
    if field == "key":
        what = f"key {line.key!r} of {whose(line.agent_id)} already has a current value"
    else:
        what = f"{field} {getattr(line, field)!r} of conversation {line.conversation_id!r} is already taken"
    return Conflict(f"lines[{index}]: {what} (held by {holder})", code="conflict",
                    details={"field": f"lines[{index}].{field}", **details})


def _places(line: Line) -> Iterator[tuple[str, tuple[Any, ...]]]:
    """The places a line takes that no other memory may hold: (field, place)."""
    if line.conversation_id is not None:
        yield "position", ("position", line.conversation_id, line.position)
        if line.message_id is not None:
            yield "message_id", ("message_id", line.conversation_id, line.message_id)
    if line.key is not None and line.superseded_by is None:
        yield "key", ("key", line.agent_id, line.key)


def one_line(sent: dict[Any, tuple[int, Any]], key: Any, index: int, line: Any, what: str, field: str) -> None:
    """409 when ``what`` (an id, an agent's directive) came in an earlier line of the request (``sent``, by
    ``key``) that is not this one: it is one thing, sent once or as the same line (then written once)."""
    first, same = sent.setdefault(key, (index, line))
    if same != line:
        raise Conflict(f"lines[{index}]: {what} is also lines[{first}], a different line (send it once, or as "
                       "the same line)", code="conflict",
                       details={"field": f"lines[{index}].{field}", "other": f"lines[{first}].{field}"})


def check_request(entries: Sequence[Entry], conversations: Sequence[Conversation] = ()) -> None:
    """The lines of one request agree on each conversation's agent (its conversation line first), send
    an id only as one line (the same line twice is written once: that is no collision) and take no place
    twice."""
    sent: dict[Any, tuple[int, Any]] = {}
    for index, line, _ in entries:
        one_line(sent, line.id, index, line, f"memory {line.id}", "id")
    owners: dict[str, tuple[int, str | None]] = {}
    for index, conversation_id, agent_id in _owned(entries, conversations):
        first, owner = owners.setdefault(conversation_id, (index, agent_id))
        if owner != agent_id:
            raise _mismatch(index, conversation_id, agent_id, owner, f" (lines[{first}])")
    taken: dict[tuple[Any, ...], tuple[int, UUID]] = {}
    for index, line, _ in entries:
        for field, place in _places(line):
            other, other_id = taken.setdefault(place, (index, line.id))
            if other_id != line.id:
                raise _collision(index, field, line, f"lines[{other}]", other=f"lines[{other}].{field}")


def _owned(entries: Sequence[Entry], conversations: Sequence[Conversation]) -> Iterator[tuple[int, str, str | None]]:
    """Each line that names a conversation's owner, conversation lines first: (line, conversation, agent)."""
    for index, conversation, _ in conversations:
        yield index, conversation.id, conversation.agent_id
    for index, line, _ in entries:
        if line.conversation_id is not None:
            yield index, line.conversation_id, line.agent_id


async def _keep_earliest(tx: TenantTx, conversations: Sequence[Conversation], created: set[str]) -> None:
    """A held conversation takes its line's creation time when that is earlier (its messages, imported
    first, made it later)."""
    earliest: dict[str, datetime] = {}
    for _, line, _ in conversations:
        if line.created_at is not None and line.id not in created:
            earliest[line.id] = min(earliest.get(line.id, line.created_at), line.created_at)
    if earliest:
        await tx.execute("export.import_conversation_times", tx.org_id, list(earliest), list(earliest.values()))


async def claim(tx: TenantTx, entries: Sequence[Entry], conversations: Sequence[Conversation] = ()) -> set[str]:
    """Lock what the lines will take (creating their new conversations, those of the conversation lines
    and of the messages, in one statement), then check it against what the org holds: 409 on the first
    line that does not fit. Returns the conversations of ``conversations`` this request created."""
    scopes = sorted({scope_key(line.agent_id) for _, line, _ in entries
                     if line.key is not None and line.superseded_by is None})
    if scopes:
        await tx.fetchval("facts.lock_scopes", str(tx.org_id), scopes)
    messages = [(index, line, raw) for index, line, raw in entries if line.conversation_id is not None]
    created: set[str] = set()
    if messages or conversations:
        rows = await tx.fetch("export.import_conversations", tx.org_id, [raw for _, _, raw in messages],
                              [raw for _, _, raw in conversations])
        owners = {r["id"]: r["agent_id"] for r in rows}
        for index, conversation_id, agent_id in _owned(messages, conversations):
            if owners.get(conversation_id, agent_id) != agent_id:  # (none: only messages the org holds name it)
                raise _mismatch(index, conversation_id, agent_id, owners[conversation_id], "")
        created = {r["id"] for r in rows if r["created"]} & {c.id for _, c, _ in conversations}
        await _keep_earliest(tx, conversations, created)
    placed = [entry for entry in entries if any(True for _ in _places(entry[1]))]
    if placed:
        held = await tx.fetchrow("export.import_collisions", tx.org_id, [raw for _, _, raw in placed])
        if held is not None:
            index, line, _ = placed[held["n"] - 1]
            raise _collision(index, held["field"], line, f"memory {held['id']}", memory_id=str(held["id"]))
    return created

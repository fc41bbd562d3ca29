"""Reading and removing conversations: every function takes an org-scoped transaction or the services."""

from __future__ import annotations

import base64
import re
from datetime import datetime
from uuid import UUID

import asyncpg

from service.conversations.types import ConversationOut, MessageOut
from service.db import TenantTx
from service.errors import BadRequest
from service.memories.repo import cursor_time
from service.retrieval.types import CONVERSATION_ID_CHARS, CONVERSATION_ID_MAX_LENGTH
from service.runtime import Services

_DELETE_BATCH = 1000


def to_conversation(row: asyncpg.Record) -> ConversationOut:
    return ConversationOut(id=row["id"], agent_id=row["agent_id"], message_count=int(row["message_count"]),
                           created_at=row["created_at"], updated_at=row["updated_at"])


def to_message(row: asyncpg.Record) -> MessageOut:
    return MessageOut(id=row["id"], conversation_id=row["conversation_id"], position=int(row["position"]),
                      message_id=row["message_id"], session_id=row["session_id"], speaker=row["speaker"],
                      role=row["role"], content=row["text"], occurred_at=row["occurred_at"],
                      created_at=row["created_at"], metadata=row["metadata"])


def _encode(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode(cursor: str) -> str:
    try:
        return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except ValueError as exc:
        raise BadRequest("cursor is not one this service issued", code="bad_cursor") from exc


def decode_position(cursor: str | None) -> int:
    """The position a messages cursor continues after (0: from the start)."""
    if cursor is None:
        return 0
    raw = _decode(cursor)
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequest("cursor is not one this service issued", code="bad_cursor")
    return int(raw)


def decode_created(cursor: str | None) -> tuple[datetime | None, str | None]:
    """The (created_at, id) a conversations cursor continues after: a time PostgreSQL can take and an
    id of the characters ids are made of (:data:`~service.retrieval.types.CONVERSATION_ID_CHARS`: a conversation
    stored before ids of dots only were refused still pages), else 400 ``bad_cursor``."""
    if cursor is None:
        return None, None
    stamp, _, ident = _decode(cursor).partition("|")
    try:
        if not (len(ident) <= CONVERSATION_ID_MAX_LENGTH and re.search(CONVERSATION_ID_CHARS, ident)):
            raise ValueError(f"{ident!r} is not a conversation id")
        return cursor_time(stamp), ident
    except ValueError as exc:
        raise BadRequest("cursor is not one this service issued", code="bad_cursor") from exc


async def get(tx: TenantTx, conversation_id: str) -> ConversationOut | None:
    row = await tx.fetchrow("conversations.get", tx.org_id, conversation_id)
    return None if row is None else to_conversation(row)


async def list_page(tx: TenantTx, *, agent_id: str | None, cursor: str | None,
                    limit: int) -> tuple[list[ConversationOut], str | None]:
    after_ts, after_id = decode_created(cursor)
    rows = await tx.fetch("conversations.list", tx.org_id, agent_id, after_ts, after_id, limit + 1)
    items = [to_conversation(r) for r in rows[:limit]]
    more = len(rows) > limit and items
    return items, (_encode(f"{items[-1].created_at.isoformat()}|{items[-1].id}") if more else None)


async def messages_page(tx: TenantTx, conversation_id: str, *, session_id: str | None, cursor: str | None,
                        limit: int) -> tuple[list[MessageOut], str | None] | None:
    """A page of the conversation's messages and the next page's cursor; None when there is no such
    conversation."""
    position = decode_position(cursor)
    if await get(tx, conversation_id) is None:
        return None
    rows = await tx.fetch("conversations.messages", tx.org_id, conversation_id, position, session_id, limit + 1)
    items = [to_message(r) for r in rows[:limit]]
    more = len(rows) > limit and items
    return items, (_encode(str(items[-1].position)) if more else None)


async def delete(services: Services, org_id: UUID, conversation_id: str) -> int | None:
    """Delete the conversation and its messages (their postings and access statistics go with them);
    returns how many messages it held, None when there was no such conversation.

    Messages go in batches, each its own transaction (a long conversation neither holds locks on all
    of its rows nor runs into the statement timeout), then, in one transaction, the conversation's row
    is locked, the messages appended meanwhile deleted and the row with them. The lock comes first:
    an append under way commits before it (its messages are among those counted), a later one waits
    and then starts the conversation anew. The count is the row's ``message_count`` (its last
    position, each message counted once), not the rows this call removed: another delete of the
    same conversation running at once removes some of them, and then one of the two answers the whole
    count and the other None (the conversation was gone when it finished). A failure part-way
    leaves fewer messages; a retry finishes."""
    while True:
        async with services.db.tenant(org_id) as tx:
            batch = int(await tx.fetchval("conversations.delete_messages", org_id, conversation_id, _DELETE_BATCH))
        if batch < _DELETE_BATCH:
            break
    async with services.db.tenant(org_id) as tx:
        if await tx.fetchval("conversations.lock", org_id, conversation_id) is None:
            return None
        await tx.fetchval("conversations.delete_messages", org_id, conversation_id, None)
        held = await tx.fetchval("conversations.delete", org_id, conversation_id)
    return int(held)

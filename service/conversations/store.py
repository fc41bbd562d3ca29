"""Reading and removing conversations: every function takes an org-scoped transaction or the services."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from service.conversations.checks import check_owner
from service.conversations.types import ConversationOut, DeletedConversation, MessageOut, TruncatedConversation
from service.db import TenantTx
from service.errors import BadRequest, Conflict
from service.memories import idempotency
from service.memories.repo import cursor_time
from service.retrieval.types import CONVERSATION_ID_CHARS, CONVERSATION_ID_MAX_LENGTH
from service.runtime import Services

_DELETE_BATCH = 1000
_LAST = 2**63 - 1
"""Past every position: where a listing from the last message starts."""


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
                        limit: int, newest_first: bool = False) -> tuple[list[MessageOut], str | None] | None:
    """A page of the conversation's messages in order (``newest_first``: from the last back) and the next
    page's cursor (the position it continues after, or before); None when there is no such conversation."""
    position = decode_position(cursor) if cursor is not None or not newest_first else _LAST
    if await get(tx, conversation_id) is None:
        return None
    query = "conversations.messages_desc" if newest_first else "conversations.messages"
    rows = await tx.fetch(query, tx.org_id, conversation_id, position, session_id, limit + 1)
    items = [to_message(r) for r in rows[:limit]]
    more = len(rows) > limit and items
    return items, (_encode(str(items[-1].position)) if more else None)


async def _lock(tx: TenantTx, conversation_id: str, agent_id: str | None) -> asyncpg.Record | None:
    """The conversation's row (id, agent, message count), locked for a removal; None when it is absent.
    ``agent_id``: only that agent's conversation (else 409 ``conversation_agent_mismatch``); None: anyone's.
    Each batch of a removal checks it: an agent never changes, but a conversation deleted and started
    anew by an append between two batches may belong to another."""
    row = await tx.fetchrow("conversations.lock", tx.org_id, conversation_id)
    if row is not None and agent_id is not None:
        check_owner(conversation_id, row["agent_id"], agent_id)
    return row


async def delete(services: Services, org_id: UUID, conversation_id: str, key: tuple[str, bytes] | None = None,
                 agent_id: str | None = None) -> tuple[DeletedConversation, bool] | None:
    """Delete the conversation and its messages (their postings and access statistics go with them);
    returns how many messages it held and whether that is the first answer under the Idempotency-Key
    ``key`` (replayed), None when there was no such conversation. ``agent_id``: only if the conversation
    is that agent's (else 409 ``conversation_agent_mismatch``, nothing removed).

    Messages go in batches of ``_DELETE_BATCH``, each its own transaction under the conversation's row
    lock (a long conversation neither holds locks on all of its rows nor runs into the statement
    timeout, and an append waits for one batch at most); the batch that finds none left removes the
    row, and claims the key and keeps the answer. An append under way commits before a batch's lock
    (its messages are removed and counted); one after the last batch starts the conversation anew. The
    count is the row's ``message_count`` (its last position, each message counted once). Two deletes of
    one conversation take turns batch by batch: one answers the count, the other None (or, under the
    first one's key, its answer). A failure part-way leaves fewer messages; a retry finishes."""
    if key is not None and (first := await idempotency.earlier(services, org_id, *key, DeletedConversation)):
        return first, True
    while True:
        async with services.db.tenant(org_id) as tx:
            if await _lock(tx, conversation_id, agent_id) is None:
                break
            if not int(await tx.fetchval("conversations.delete_messages", org_id, conversation_id, _DELETE_BATCH)):
                if key is not None and (first := await idempotency.claim(tx, *key, DeletedConversation)):
                    return first, True
                held = int(await tx.fetchval("conversations.delete", org_id, conversation_id))
                result = DeletedConversation(conversation_id=conversation_id, messages_deleted=held)
                if key is not None:
                    await idempotency.remember(tx, key[0], result)
                return result, False
    # gone: maybe by this key's first request, committed while this one ran
    if key is not None and (first := await idempotency.earlier(services, org_id, *key, DeletedConversation)):
        return first, True
    return None


@dataclass(frozen=True, slots=True)
class Unchanged:
    """What a removal expects of the conversation when it starts (None: anything): that many messages,
    that message (its memory ``id``) the last one."""

    message_count: int | None = None
    last_id: UUID | None = None


async def _changed(tx: TenantTx, conversation_id: str, count: int, expected: Unchanged) -> bool:
    if expected.message_count is not None and count != expected.message_count:
        return True
    return expected.last_id is not None and expected.last_id != await tx.fetchval(
        "conversations.last_message", tx.org_id, conversation_id, count)


async def truncate(services: Services, org_id: UUID, conversation_id: str, from_position: int,
                   expected: Unchanged, key: tuple[str, bytes] | None = None, agent_id: str | None = None
                   ) -> tuple[TruncatedConversation, bool] | None:
    """Remove the conversation's messages at ``from_position`` and after (its last ones); returns how many
    went and how many are left, and whether that is the first answer under the Idempotency-Key ``key``
    (replayed); None when there is no such conversation. ``agent_id``: only if the conversation is that
    agent's (else 409 ``conversation_agent_mismatch``, nothing removed). ``expected``: only if the conversation is as
    stated when the call starts, else 409 ``conversation_changed`` (a client removing the message it read
    last names it, and removes nothing appended since, nor a message appended in its place after another
    client removed it); a call that finds nothing from ``from_position`` removes nothing either way, so a
    retry of one that succeeded answers 200 with nothing removed (or, under its key, the first answer).

    Positions stay 1, 2, ... without gaps: messages go from the last back, at most ``_DELETE_BATCH`` per
    transaction, each under the conversation's lock, with the count lowered to match, so an append
    never waits on a long removal and always lands right after the last message there is. One that lands
    while a removal is still under way is at ``from_position`` or after, and goes too. The key is claimed,
    and the answer kept, in the last batch's transaction."""
    if key is not None and (first := await idempotency.earlier(services, org_id, *key,
                                                               TruncatedConversation)) is not None:
        return first, True
    deleted, check = 0, expected
    while True:
        async with services.db.tenant(org_id) as tx:
            row = await _lock(tx, conversation_id, agent_id)
            if row is None:
                return None
            count = int(row["message_count"])
            if count >= from_position and await _changed(tx, conversation_id, count, check):
                raise Conflict(f"conversation {conversation_id!r} changed since it was read (it holds {count} "
                               "messages now)", code="conversation_changed",
                               details={"message_count": count})
            check = Unchanged()
            keep = max(from_position - 1, count - _DELETE_BATCH)
            final = keep <= from_position - 1 or keep >= count
            if final and key is not None and (
                    first := await idempotency.claim(tx, *key, TruncatedConversation)) is not None:
                return first, True
            if keep < count:
                deleted += int(await tx.fetchval("conversations.delete_tail", org_id, conversation_id, keep))
                await tx.execute("conversations.advance", org_id, conversation_id, keep)
            if final:
                result = TruncatedConversation(conversation_id=conversation_id, messages_deleted=deleted,
                                               message_count=min(count, keep))
                if key is not None:
                    await idempotency.remember(tx, key[0], result)
                return result, False

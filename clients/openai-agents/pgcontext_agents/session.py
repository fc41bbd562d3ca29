"""``PgcontextSession``: an Agents SDK session whose items are the messages of a pgcontext conversation."""

from __future__ import annotations

import contextlib
import json
from typing import Any, cast
from uuid import uuid4

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit
from pgcontext_client import AsyncClient, Conflict, NotFound
from pgcontext_client.plans import append_all, arun
from pgcontext_client.stored import keep, kept
from pgcontext_client.types import ConversationMessage, MessageIn
from pgcontext_client.types.conversations import Role

META = "openai_agents"
"""The metadata key an item is kept under (``pgcontext_client.stored``)."""
PAGE = 200
POP_TRIES = 10
"""Reads of the last item before ``pop_item`` gives up while other appends keep coming."""


def _parts(parts: list[Any]) -> str:
    return " ".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def _text(item: dict[str, Any]) -> str:
    """What an item says, as the conversation's searchable text: a message's words, a tool call's name and
    arguments (``input`` for a custom tool), a tool's output."""
    content, kind = item.get("content"), str(item.get("type", ""))
    call = item.get("arguments", item.get("input"))
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = _parts(content)
    elif kind.endswith("_call") and isinstance(call, str):
        text = f"{item.get('name')}({call})"
    elif kind.endswith("_output") and "output" in item:
        output = item["output"]
        if isinstance(output, list):  # content parts (input_text, input_image, ...)
            output = _parts(output)
        text = output if isinstance(output, str) else json.dumps(output)
    else:
        text = ""
    return text if text.strip() else f"({kind or 'item'})"


def _role(item: dict[str, Any]) -> Role | None:
    role, kind = item.get("role"), str(item.get("type", ""))
    if role in ("user", "assistant", "system"):
        return cast(Role, role)
    if role == "developer":
        return "system"
    if kind.endswith("_call_output"):
        return "tool"
    if kind.endswith("_call") or kind == "reasoning":
        return "assistant"
    return None


def _message(item: TResponseInputItem) -> MessageIn:
    data: dict[str, Any] = dict(item)
    text = _text(data)
    return MessageIn(content=text, role=_role(data), message_id=uuid4().hex, metadata=keep(META, data, text))


def _item(message: ConversationMessage) -> TResponseInputItem:
    item = kept(META, message.metadata, message.content)
    if item is not None:
        return cast(TResponseInputItem, item)
    plain: dict[str, Any] = {"role": message.role if message.role in ("user", "assistant", "system") else "user",
                             "content": message.content}
    return plain  # type: ignore[return-value]  # an EasyInputMessageParam


class PgcontextSession:
    """The Agents SDK ``Session`` protocol over conversation ``session_id``: ``Runner.run(agent, input,
    session=PgcontextSession("chat-1", agent_id="support"))`` keeps the run's items in pgcontext.

    Each item is appended as a conversation message with its text and role (searchable, and what context
    assembly packs) and the item itself in ``metadata.openai_agents`` (its long text kept once, see
    ``pgcontext_client.stored``), which ``get_items`` returns. ``agent_id`` owns a conversation its first
    append creates (None: append to, pop from and clear whoever owns it). ``pop_item`` removes the
    conversation's last message; ``clear_session`` deletes the conversation. With ``agent_id``, all three
    act only on that agent's conversation: on another's they raise ``Conflict`` (``code``
    ``conversation_agent_mismatch``, the owner in ``details["agent_id"]``) and change nothing. More items
    than the service takes in one append go in several, in order.
    """

    session_settings: SessionSettings | None = None

    def __init__(self, session_id: str, *, agent_id: str | None = None, url: str | None = None,
                 api_key: str | None = None, client: AsyncClient | None = None,
                 session_settings: SessionSettings | None = None) -> None:
        self.session_id, self.agent_id = session_id, agent_id
        self.client = client or AsyncClient(url, api_key)
        self.session_settings = session_settings

    async def _messages(self, limit: int | None = None) -> list[ConversationMessage]:
        """The conversation's messages in order; ``limit``: only the latest that many (read from the last
        back, so a long session's earlier pages are not read)."""
        found: list[ConversationMessage] = []
        cursor: str | None = None
        while limit is None or len(found) < limit:
            size = PAGE if limit is None else min(PAGE, limit - len(found))
            try:
                page = await self.client.list_messages(self.session_id, limit=size, cursor=cursor,
                                                       order="asc" if limit is None else "desc")
            except NotFound:
                return []
            found += page.items
            cursor = page.next_cursor
            if cursor is None:
                break
        return found if limit is None else found[::-1]

    async def _append(self, messages: list[MessageIn], agent_id: str | None) -> None:
        """One append, or several in order when there are more messages than the service takes at once.
        ``agent_id`` None: whoever owns the conversation (a new one: the whole org)."""
        await arun(self.client, append_all(self.session_id, messages, agent_id=agent_id))

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order; ``limit`` (else ``session_settings.limit``): only the latest that many."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit <= 0:
            return []
        return [_item(m) for m in await self._messages(limit)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if items:
            await self._append([_message(i) for i in items], self.agent_id)

    async def pop_item(self) -> TResponseInputItem | None:
        """The last item, removed: the conversation's last message, removed only if it still is the last
        one (an item appended meanwhile is read and removed instead, never lost; one another ``pop_item``
        took is not returned twice). ``Conflict`` ``conversation_agent_mismatch`` when the conversation is
        not this session's ``agent_id``'s."""
        for _ in range(POP_TRIES):
            last = await self._messages(1)
            if not last:
                return None
            try:
                done = await self.client.truncate_conversation(self.session_id, last[0].position,
                                                               last_id=last[0].id, agent_id=self.agent_id)
            except NotFound:  # cleared meanwhile
                return None
            except Conflict as exc:
                if exc.code != "conversation_changed":
                    raise
                continue
            if done.messages_deleted:  # else another pop took it first
                return _item(last[0])
        raise RuntimeError(f"session {self.session_id!r} kept changing: no item popped after {POP_TRIES} tries")

    async def clear_session(self) -> None:
        """Delete the conversation (none yet: nothing to clear); ``Conflict`` ``conversation_agent_mismatch``
        when it is not this session's ``agent_id``'s."""
        with contextlib.suppress(NotFound):
            await self.client.delete_conversation(self.session_id, agent_id=self.agent_id)

    async def close(self) -> None:
        await self.client.aclose()

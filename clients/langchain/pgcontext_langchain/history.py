"""``PgcontextChatMessageHistory``: a LangChain chat history that is a pgcontext conversation."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import uuid4

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict
from pgcontext_client import AsyncClient, Client, NotFound, endpoints
from pgcontext_client.plans import Plan, append_all, arun, run
from pgcontext_client.stored import keep, kept
from pgcontext_client.types import ConversationMessage, MessageIn, MessagePage

from pgcontext_langchain.stored import META, message_id

ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
"""LangChain message types and the conversation roles they are stored with (others: no role)."""
PAGE = 200


def _text(message: BaseMessage) -> str:
    """What a message says, as the conversation's searchable text: its words, then a line per tool call
    (``name({arguments})``, the arguments as the model wrote them when the message carries them), so a
    call's long arguments are kept once (``pgcontext_client.stored``) and found by search."""
    text = str(message.text)  # a str subclass in langchain-core 1.x
    parts = [text] if text.strip() else []
    parts += [f"{call['name']}({_arguments(message, call)})" for call in getattr(message, "tool_calls", None) or []]
    return "\n".join(parts) if parts else f"({message.type} message)"


def _arguments(message: BaseMessage, call: Mapping[str, Any]) -> str:
    """A tool call's arguments: the model's own JSON (``additional_kwargs.tool_calls``, as OpenAI-style
    chat models keep it), else the parsed ``args`` as JSON."""
    for raw in message.additional_kwargs.get("tool_calls") or ():
        function = raw.get("function") if isinstance(raw, dict) else None
        written = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(written, str) and raw.get("id") == call.get("id"):
            return written
    return json.dumps(call.get("args", {}), ensure_ascii=False)


def _message_in(message: BaseMessage) -> MessageIn:
    text = _text(message)
    return MessageIn(content=text, role=ROLES.get(message.type),  # type: ignore[arg-type]
                     message_id=message_id(message.id) if message.id else uuid4().hex,
                     metadata=keep(META, message_to_dict(message), text))


def _as_dict(message: ConversationMessage) -> dict[str, Any]:
    """The LangChain message (``message_to_dict``) a conversation message holds; one appended without this
    adapter reads as its role's type (a ``tool`` one, which names no tool call, as a ``ChatMessage``)."""
    record = kept(META, message.metadata, message.content)
    if record is not None:
        return record
    if message.role == "tool":
        return {"type": "chat", "data": {"content": message.content, "role": "tool"}}
    return {"type": _TYPES.get(message.role or "", "human"), "data": {"content": message.content}}


class PgcontextChatMessageHistory(BaseChatMessageHistory):
    """The messages of pgcontext conversation ``conversation_id`` (``/v1/conversations/{id}/messages``).

    Each message is stored with its text (searchable, and what context assembly packs) and role, and the
    LangChain message itself in ``metadata.langchain``, so it reads back as it was written (type, id,
    tool calls; its long text is kept once, see ``pgcontext_langchain.stored``). ``agent_id`` owns a
    conversation its first append creates (None: append to and clear whoever owns it). ``clear()`` deletes
    the conversation. With ``agent_id``, appends and ``clear()`` act only on that agent's conversation: on
    another's they raise ``Conflict`` (``code`` ``conversation_agent_mismatch``) and change nothing. A
    message keeps its ``id`` as the conversation's ``message_id`` (a digest of it when the service's id
    rule refuses it, a new one when it has none), so a retried append writes nothing twice.
    More messages than the service takes in one append go in several, in order.
    """

    def __init__(self, conversation_id: str, *, agent_id: str | None = None, url: str | None = None,
                 api_key: str | None = None, client: Client | None = None,
                 aclient: AsyncClient | None = None) -> None:
        self.conversation_id, self.agent_id = conversation_id, agent_id
        self._url, self._api_key = url, api_key
        self._client, self._aclient = client, aclient

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._url, self._api_key)
        return self._client

    @property
    def aclient(self) -> AsyncClient:
        if self._aclient is None:
            self._aclient = AsyncClient(self._url, self._api_key)
        return self._aclient

    def _read(self) -> Plan[list[BaseMessage]]:
        stored: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            try:
                page: MessagePage = yield endpoints.list_messages(self.conversation_id, limit=PAGE, cursor=cursor)
            except NotFound:
                return []
            stored += [_as_dict(m) for m in page.items]
            cursor = page.next_cursor
            if cursor is None:
                return messages_from_dict(stored)

    def _append(self, messages: Sequence[BaseMessage]) -> Plan[None]:
        """One append, or several in order when there are more messages than the service takes at once."""
        yield from append_all(self.conversation_id, [_message_in(m) for m in messages], agent_id=self.agent_id)

    def _clear(self) -> Plan[None]:
        with contextlib.suppress(NotFound):  # none yet: nothing to clear
            yield endpoints.delete_conversation(self.conversation_id, agent_id=self.agent_id)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return run(self.client, self._read())

    async def aget_messages(self) -> list[BaseMessage]:
        return await arun(self.aclient, self._read())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        run(self.client, self._append(messages))

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await arun(self.aclient, self._append(messages))

    def clear(self) -> None:
        run(self.client, self._clear())

    async def aclear(self) -> None:
        await arun(self.aclient, self._clear())


_TYPES = {role: kind for kind, role in ROLES.items()}

"""HTTP handlers for /v1/conversations: thin — parse, call append or the store, shape the response."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from litestar import Controller, Response, delete, get, post
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from service.conversations import append, store
from service.conversations.checks import check_ident
from service.conversations.types import (
    AppendIn,
    AppendOut,
    ConversationOut,
    ConversationPage,
    DeletedConversation,
    MessagePage,
    TruncatedConversation,
)
from service.errors import NotFound, check_page_limit
from service.http.deps import OrgId, ServicesDep
from service.http.responses import errors
from service.memories import idempotency
from service.memories.types import AGENT_ID_MAX_LENGTH, AGENT_ID_PATTERN
from service.retrieval.types import CONVERSATION_ID_MAX_LENGTH, CONVERSATION_ID_PATTERN

APPEND_DESCRIPTION = (
    "Appends `messages` in the order sent (at most PGCONTEXT_MAX_BATCH, default 256). The first append "
    "creates the conversation; its `agent_id` (absent or null: org-wide) owns it and its messages, and a "
    "later append naming another agent is a 409. Each message is stored as a memory of kind `message`, "
    "embedded server-side, searchable, never merged or rewritten, at the next position (1, 2, ...; "
    "concurrent appends are ordered). A message whose `message_id` is already in the conversation is not "
    "written again (`created: false`, the same id and position); the same `message_id` with other "
    "content, speaker, role or session is a 409. Each new message's search context is derived from the "
    "last turns of its session before it (PGCONTEXT_CONVERSATION_CONTEXT_TURNS)."
)

TRUNCATE_DESCRIPTION = (
    "Removes the messages at `from_position` and after, with everything derived from them, and answers "
    "how many went and how many are left; the next append goes to position `message_count + 1`. "
    "`message_count` makes it conditional: a client removing the last message it read passes the count it "
    "read, and gets a 409 `conversation_changed` (nothing removed) when an append came in between (a "
    "conversation holding nothing from `from_position` answers 200 with nothing removed, so a retry is safe). "
    "`last_id` (the `id` of the last message read) makes it conditional on that message still being the last "
    "one, which also refuses a message appended in its place after another client removed it. `agent_id` makes "
    "it conditional on the conversation's agent (else 409 `conversation_agent_mismatch`). A retry "
    "under the same `Idempotency-Key` gets the first answer. Earlier messages and their search contexts are "
    "untouched."
)
OwnerQuery = Annotated[str | None, QueryParameter(
    min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
    description="Only if the conversation belongs to this agent (else 409 `conversation_agent_mismatch` with "
                "its owner in `details.agent_id`, null for an org-wide one, and nothing removed); left out: "
                "whoever owns it.")]
"""A removal's ``agent_id``: the caller's agent, so that it never removes another agent's conversation."""


def _bound(request: dict[str, object], agent_id: str | None) -> dict[str, object]:
    """A removal's request as its Idempotency-Key is bound to it: ``agent_id`` only when given (a key
    kept for a request without it still matches its retry)."""
    return request if agent_id is None else {**request, "agent_id": agent_id}


POSITION_MAX = 2**53 - 1
"""The largest position a request may name: any client's JSON numbers hold it exactly (JavaScript's, a
schema validator's doubles), and no conversation reaches it."""


class ConversationController(Controller):
    path = "/v1/conversations"
    tags = ["conversations"]

    @post("/{conversation_id:str}/messages", status_code=HTTP_201_CREATED, summary="Append messages",
          description=APPEND_DESCRIPTION, responses=errors(409, 413, 422))
    async def append_messages(
        self, services: ServicesDep, org_id: OrgId, conversation_id: FromPath[str], data: JSONBody[AppendIn],
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key")] = None,
    ) -> Response[AppendOut]:
        result, replayed = await append.append(services, org_id, conversation_id, data, idempotency_key)
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return Response(result, status_code=HTTP_201_CREATED, headers=headers)

    @get("/{conversation_id:str}/messages", summary="A conversation's messages in order (cursor-paginated)",
         responses=errors(404))
    async def list_messages(
        self, services: ServicesDep, org_id: OrgId, conversation_id: FromPath[str],
        session_id: Annotated[str | None, QueryParameter(
            min_length=1, max_length=CONVERSATION_ID_MAX_LENGTH, pattern=CONVERSATION_ID_PATTERN,
            description="Only this session's messages.")] = None,
        cursor: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 50,
        order: Annotated[Literal["asc", "desc"], QueryParameter(
            description="`asc` (default): from the first message on; `desc`: from the last back.")] = "asc",
    ) -> MessagePage:
        check_ident(conversation_id, "conversation_id")
        check_ident(session_id, "session_id")
        check_page_limit(limit, services.settings.limits.max_page_size)
        page = await services.db.read(org_id, lambda tx: store.messages_page(
            tx, conversation_id, session_id=session_id, cursor=cursor, limit=limit, newest_first=order == "desc"))
        if page is None:
            raise NotFound(f"conversation {conversation_id!r} not found", code="conversation_not_found")
        return MessagePage(items=page[0], next_cursor=page[1])

    @delete("/{conversation_id:str}/messages", status_code=HTTP_200_OK,
            summary="Remove a conversation's last messages", description=TRUNCATE_DESCRIPTION,
            responses=errors(404, 409))
    async def truncate(
        self, services: ServicesDep, org_id: OrgId, conversation_id: FromPath[str],
        from_position: Annotated[int, QueryParameter(
            ge=1, le=POSITION_MAX, description="The first position removed: it and every later message go.")],
        message_count: Annotated[int | None, QueryParameter(
            ge=0, le=POSITION_MAX, schema_extra={"minimum": 0},  # the schema leaves a bound of 0 out otherwise
            description="Only if the conversation holds exactly this many messages (else 409 "
                        "`conversation_changed`).")] = None,
        last_id: Annotated[UUID | None, QueryParameter(
            description="Only if this message (its `id`) is the conversation's last one (else 409 "
                        "`conversation_changed`).")] = None,
        agent_id: OwnerQuery = None,
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key")] = None,
    ) -> Response[TruncatedConversation]:
        check_ident(conversation_id, "conversation_id")
        idempotency.check_key(idempotency_key)
        expected = store.Unchanged(message_count=message_count, last_id=last_id)
        key = None if idempotency_key is None else (idempotency_key, idempotency.request_hash(
            _bound({"from_position": from_position, "message_count": message_count, "last_id": last_id}, agent_id),
            f"conversations/{conversation_id}/messages:delete"))
        done = await store.truncate(services, org_id, conversation_id, from_position, expected, key, agent_id)
        if done is None:
            raise NotFound(f"conversation {conversation_id!r} not found", code="conversation_not_found")
        return Response(done[0], status_code=HTTP_200_OK,
                        headers={"Idempotent-Replayed": "true"} if done[1] else {})

    @get("/{conversation_id:str}", summary="One conversation", responses=errors(404))
    async def get_one(self, services: ServicesDep, org_id: OrgId, conversation_id: FromPath[str]) -> ConversationOut:
        check_ident(conversation_id, "conversation_id")
        found = await services.db.read(org_id, lambda tx: store.get(tx, conversation_id))
        if found is None:
            raise NotFound(f"conversation {conversation_id!r} not found", code="conversation_not_found")
        return found

    @get("/", summary="List conversations (newest first, cursor-paginated)")
    async def list_conversations(
        self, services: ServicesDep, org_id: OrgId,
        agent_id: Annotated[str | None, QueryParameter(
            min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
            description="Only this agent's conversations (1-200 letters, digits and _.:@-).")] = None,
        cursor: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 50,
    ) -> ConversationPage:
        check_page_limit(limit, services.settings.limits.max_page_size)
        items, next_cursor = await services.db.read(org_id, lambda tx: store.list_page(
            tx, agent_id=agent_id, cursor=cursor, limit=limit))
        return ConversationPage(items=items, next_cursor=next_cursor)

    @delete("/{conversation_id:str}", status_code=HTTP_200_OK, summary="Delete a conversation and its messages",
            responses=errors(404, 409))
    async def remove(
        self, services: ServicesDep, org_id: OrgId, conversation_id: FromPath[str], agent_id: OwnerQuery = None,
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key")] = None,
    ) -> Response[DeletedConversation]:
        """Removes the conversation, its messages and everything derived from them (their postings,
        search contexts and access statistics); another org's conversation of the same id is untouched.
        With `agent_id`, only that agent's conversation (else 409 `conversation_agent_mismatch`, nothing
        removed). A retry under the same `Idempotency-Key` gets the first answer (not a 404)."""
        check_ident(conversation_id, "conversation_id")
        idempotency.check_key(idempotency_key)
        key = None if idempotency_key is None else (idempotency_key, idempotency.request_hash(
            _bound({}, agent_id), f"conversations/{conversation_id}:delete"))
        deleted = await store.delete(services, org_id, conversation_id, key, agent_id)
        if deleted is None:
            raise NotFound(f"conversation {conversation_id!r} not found", code="conversation_not_found")
        return Response(deleted[0], status_code=HTTP_200_OK,
                        headers={"Idempotent-Replayed": "true"} if deleted[1] else {})

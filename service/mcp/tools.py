"""The MCP tools: an agent's memory as tools a model can call, each a thin wrapper over the Python client.

Which agent the memories belong to is configuration (``PGCONTEXT_AGENT_ID``), never a tool argument: the
model using the tools reads and writes its own memory only. The API key comes from configuration (stdio)
or from the MCP client's bearer token (streamable HTTP); see ``service.mcp.server``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal
from uuid import UUID

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pgcontext_client import (
    AsyncClient,
    Conflict,
    MemoryIn,
    Message,
    MessageIn,
    NotFound,
    PgcontextError,
    SearchFilters,
    SearchTuning,
    TransportError,
)
from pgcontext_client.types import SearchResult
from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field, model_validator


@dataclass(frozen=True)
class McpConfig:
    url: str
    """The pgcontext service the tools call."""
    agent_id: str
    """Whose memories, directive and context the tools work on."""
    api_key: str | None = None
    """stdio: the key every call uses. Streamable HTTP: unused (each MCP client's bearer token is its key)."""
    model: str = "gpt-4o"
    """Model whose tokenizer counts ``assemble_context``'s budget (any name the service accepts; empty: gpt-4o)."""
    max_context_tokens: int | None = None
    """``assemble_context``'s default budget; unset: selective mode (the service sizes it from the query)."""
    max_clients: int = 256
    """Streamable HTTP: keys the service accepted that keep a client (least recently used dropped first)."""
    tool_deadline_s: float = 50.0
    """A tool call not done by then is answered as a tool error (under the 60 s MCP clients commonly wait)."""


MAX_RECALL_CHARS = 40_000
"""Characters of memory text one ``recall`` returns at most (the best match always whole): 50 memories of
32,000 characters were 1.6 MB, more than a model's context and than what runtimes take from one tool call
(Claude Code refuses a result over 25,000 tokens)."""

MAX_FORGET_IDS = 100
"""Ids one ``forget`` takes, and ``remember``'s ``supersedes`` names in all: each is a request or two, one
after the other, well within the call's deadline (12,000 ids ran into it, a generic error although it had
deleted many)."""

MAX_FEEDBACK_IDS = 256
"""Ids one ``give_feedback`` takes in all, what the service takes in one request (its ``MAX_FEEDBACK_ITEMS``)."""

CONVERSATION_ID_PATTERN = r"^(?!\.+$)(?!.*\n)[A-Za-z0-9_.:@-]+$"
"""The service's rule for a conversation id (with 1-200 characters), which ``service.mcp`` may not import."""


def conversation_rule(value: str) -> str:
    """``value`` if it is a conversation id the service takes (an empty one was sent as no path segment)."""
    if not (len(value) <= 200 and re.search(CONVERSATION_ID_PATTERN, value)):
        raise ValueError("must be 1-200 letters, digits and _.:@- (not only dots)")
    return value


ClientFor = Callable[[], Awaitable[AsyncClient]]
"""The client for the current tool call (the configured key, or the HTTP caller's)."""


class NewMemory(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The fact, preference, event or instruction, self-contained and specific.")
    kind: str | None = Field(None, description="A lowercase label such as fact, preference, event, task "
                                               "(default fact).")
    importance: float | None = Field(None, ge=0, le=1, description="0-1; higher is kept in view more (default 0.5).")
    pinned: bool | None = Field(None, description="Always offer this memory in assembled context.")
    occurred_at: AwareDatetime | None = Field(None, description="When it happened or was said (ISO 8601 with "
                                                                "timezone); default now.")
    metadata: dict[str, Any] | None = Field(None, description="Optional JSON object for filtering later.")
    search_context: str | None = Field(None, description="Words this memory should be found by but that are not "
                                                         "part of it, e.g. the question a reply answers; searched, "
                                                         "never shown.")
    key: str | None = Field(None, description="For a fact with one value at a time (e.g. user.city): the newest "
                                              "value retires the one before it.")
    supersedes: list[str] | None = Field(None, description="Ids of memories this one corrects or replaces.")


class ChatMessage(BaseModel):
    """A recent turn; one as given to `append_messages` is taken as it is (its other fields unused)."""

    role: str = Field(description="user, assistant, system or tool")
    content: str


class NewMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="The words as said.")
    role: Literal["user", "assistant", "system", "tool"] | None = Field(None, description="Who said it, by role.")
    speaker: str | None = Field(None, description="Who said it, by name (e.g. the user's name).")
    occurred_at: AwareDatetime | None = Field(None, description="When it was said (ISO 8601 with timezone); "
                                                                "default now.")
    session_id: str | None = Field(None, description="The session (chat thread or day) it belongs to.")
    message_id: str | None = Field(None, description="Your id for it (letters, digits, _.:@-): a message already "
                                                     "stored under this id is not stored again.")

    @model_validator(mode="after")
    def said_by_someone(self) -> NewMessage:
        """A turn nobody said is no use to recall ("what did the user say?"): a role or a speaker is needed."""
        if self.role is None and not (self.speaker or "").strip():
            raise ValueError("a turn needs its `role` (user, assistant, system or tool) or its `speaker`")
        return self


REMEMBER = """Store new long-term memories for this agent, so later conversations can recall them.

Use it when you learn something worth keeping beyond this conversation: a user's preference or fact
about them, a decision, a commitment, an event with its date, a correction of something remembered.
Write each memory as one self-contained statement ("The user is allergic to peanuts."), not a
transcript. Give `text` for one memory, or `memories` for several at once (up to 256), each with
its own `kind`, `importance` and so on. `supersedes` names this agent's own memories only (up to
100 in all). A memory that repeats one already stored is merged into it, not stored twice. For a
fact that has one value at a time, give a `key` (user.city): the new value retires the old one.
Returns per memory its id and what happened (`created`, `merged` into an existing memory, or
`superseded` older ones)."""

APPEND = """Record turns of a conversation, in order, so later calls can recall what was said.

Use it to keep the conversation itself (as opposed to `remember`, which stores distilled facts):
send each new turn, the user's and your own, with its `role` (or the speaker's name) and the same
`conversation_id` for the whole conversation. Turns are stored exactly as said, never merged or
rewritten, and become searchable (by `recall` and `assemble_context`). Give each turn a
`message_id` to make a retry safe. Returns each turn's position in the conversation."""

RECALL = """Search this agent's long-term memories by meaning and keywords (hybrid search).

Use it to look something up explicitly: "what do I know about the user's diet?", or to find a
memory's id before forgetting it. Results are best first, each with its id, text, kind, when it
happened and a `score` from 0 (no match) to 1 (a perfect match), comparable between calls.
Long memories are returned whole up to about 40,000 characters in all (the best one always);
`more` then counts the matches left out. For everything relevant to answering a message within
a token budget, prefer `assemble_context`."""

ASSEMBLE = """Build the best context for answering a query: the agent's directive, its most useful
memories and the recent conversation, ranked and packed into a token budget.

Call it before answering a user message that may depend on what you remember. Memories in the
returned `context` are numbered lines ("1 The user ..."); `refs` maps each number to the memory id,
which is what `give_feedback` takes. `max_context_tokens` caps the size (default: configured, or
sized automatically from the query)."""

FEEDBACK = """Tell the memory service which memories helped and which did not.

Call it after answering with context from `assemble_context` or `recall`: list the ids of memories
that were useful in `helpful_ids`, and those that were irrelevant or wrong in `unhelpful_ids`. It
changes how those memories rank in future context. Ids of memories outside this agent's context
(another agent's) are reported `not_found`. Up to 256 ids in all per call."""

SET_DIRECTIVE = """Set this agent's directive: standing instructions placed at the top of every assembled
context (persona, rules, the user's lasting requests). Replaces the previous directive (the version
increments); send the complete text each time. Use it when the user asks for a lasting change in
how you behave ("always answer in French")."""

GET_DIRECTIVE = """Read this agent's current directive (its standing instructions) and version. Use it
before changing the directive, to edit rather than overwrite it."""

FORGET = """Delete memories of this agent by id, permanently.

Use it when the user asks you to forget something or a memory is wrong and should not be corrected
by a new one. Find the ids with `recall` first; up to 100 ids per call. Deleting an id that does
not exist is reported, not an error; so is an id the service refuses to delete on its own (a
conversation's turn goes with its conversation), under `refused` with the reason. Each id is
reported once."""


def distinct_ids(memory_ids: list[str]) -> dict[str, UUID | None]:
    """Each id once, first spelling first, in the order given (None: not a UUID). Spellings of one UUID
    (upper case, braces) are one id: otherwise its first mention deletes it and the next reports it
    ``not_found``."""
    seen: dict[UUID | str, str] = {}
    for memory_id in memory_ids:
        try:
            ident: UUID | str = UUID(memory_id)
        except ValueError:
            ident = memory_id
        seen.setdefault(ident, memory_id)
    return {spelling: ident if isinstance(ident, UUID) else None for ident, spelling in seen.items()}


async def owns(client: AsyncClient, agent: str, ident: UUID) -> bool:
    """Whether memory ``ident`` is ``agent``'s own: what its tools may change (delete, retire); another
    agent's, an org-wide or no memory is not."""
    try:
        return (await client.get_memory(ident)).agent_id == agent
    except NotFound:
        return False


async def not_mine(client: AsyncClient, agent: str, ids: Iterable[UUID]) -> list[UUID]:
    """Those of ``ids`` that ``agent`` does not :func:`owns`, in order."""
    return [ident for ident in dict.fromkeys(ids) if not await owns(client, agent, ident)]


@contextlib.contextmanager
def service_errors() -> Iterator[None]:
    """The service's errors as tool errors, worded for the model (the request id lets an operator find the
    log line); anything else is a crash the SDK reports as such."""
    try:
        yield
    except PgcontextError as exc:
        raise ToolError(failure(exc)) from exc


def failure(exc: PgcontextError) -> str:
    """A service error (or no answer) in a line for the model."""
    if isinstance(exc, TransportError):
        return f"pgcontext could not be reached: {exc.message}"
    return f"pgcontext answered {exc.status} {exc.code}: {exc.message} (request id {exc.request_id})"


def _recalled(r: SearchResult) -> dict[str, Any]:
    """One ``recall`` result; a conversation's turn also says where it was said and by whom."""
    out: dict[str, Any] = {"id": str(r.id), "text": r.text, "kind": r.kind, "score": r.score,
                           "occurred_at": r.occurred_at.isoformat() if r.occurred_at else None}
    if r.message is not None:
        out["conversation_id"] = r.message.conversation_id
        out["said_by"] = r.message.speaker or r.message.role
    return out


def register(server: MCPServer[Any], config: McpConfig, client_for: ClientFor) -> None:
    agent = config.agent_id
    model = config.model.strip() or "gpt-4o"  # an empty PGCONTEXT_MCP_MODEL in a runtime's env: the default
    writes = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(description=REMEMBER, annotations=writes)
    async def remember(
        text: Annotated[str | None, Field(description="One memory to store.")] = None,
        memories: Annotated[list[NewMemory] | None, Field(description="Several memories to store at once.")] = None,
        kind: Annotated[str | None, Field(description="Kind of `text` (e.g. preference, event).")] = None,
        importance: Annotated[float | None, Field(ge=0, le=1, description="Importance of `text`, 0-1.")] = None,
        occurred_at: Annotated[AwareDatetime | None, Field(
            description="When `text` happened or was said (ISO 8601 with timezone); default now.")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(
            description="Optional JSON object stored with `text`, for filtering later.")] = None,
    ) -> dict[str, Any]:
        given = [name for name, value in (("kind", kind), ("importance", importance), ("occurred_at", occurred_at),
                                          ("metadata", metadata)) if value is not None]
        if memories and text is None and given:
            names = ", ".join(f"`{n}`" for n in given)
            raise ToolError(f"invalid arguments: {names} {'is' if len(given) == 1 else 'are'} for `text` only; "
                            "with `memories`, give them in each memory")
        try:
            batch = [MemoryIn(text=m.text, agent_id=agent, kind=m.kind, importance=m.importance, pinned=m.pinned,
                              occurred_at=m.occurred_at, metadata=m.metadata, search_context=m.search_context,
                              key=m.key, supersedes=[UUID(i) for i in m.supersedes] if m.supersedes else None)
                     for m in memories or []]
        except ValueError as exc:
            raise ToolError(f"supersedes takes memory ids (UUIDs, as `recall` returns them): {exc}") from exc
        if text is not None:
            batch.insert(0, MemoryIn(text=text, agent_id=agent, kind=kind, importance=importance,
                                     occurred_at=occurred_at, metadata=metadata))
        if not batch:
            raise ToolError("give `text` (one memory) or `memories` (several)")
        named = list(dict.fromkeys(i for m in batch for i in m.supersedes or []))
        if len(named) > MAX_FORGET_IDS:  # each is read first, as forget reads the ids it deletes
            raise ToolError(f"invalid arguments: `supersedes` names at most {MAX_FORGET_IDS} memories in one call "
                            f"(got {len(named)}); nothing was stored")
        client = await client_for()
        with service_errors():
            if others := await not_mine(client, agent, named):
                raise ToolError(f"invalid arguments: `supersedes` may name only this agent's own memories, not "
                                f"{', '.join(map(str, others))} (another agent's, org-wide or not found); "
                                "nothing was stored")
            created = await client.create_memories(batch)
        return {"stored": sum(i.status != "merged" for i in created.items), "ids": [str(i) for i in created.ids],
                "outcomes": [{"id": str(i.id), "status": i.status, "superseded": [str(s) for s in i.superseded]}
                             for i in created.items]}

    @server.tool(description=APPEND, annotations=writes)  # idempotent only for turns with a message_id
    async def append_messages(
        conversation_id: Annotated[str, AfterValidator(conversation_rule), Field(
            description="The conversation (1-200 letters, digits, _.:@-), the same for all its turns.",
            json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": CONVERSATION_ID_PATTERN})],
        messages: Annotated[list[NewMessage], Field(min_length=1, description="The new turns, oldest first.")],
    ) -> dict[str, Any]:
        turns = [MessageIn(content=m.content, role=m.role, speaker=m.speaker, occurred_at=m.occurred_at,
                           session_id=m.session_id, message_id=m.message_id) for m in messages]
        with service_errors():
            out = await (await client_for()).append_messages(conversation_id, turns, agent_id=agent)
        return {"conversation_id": out.conversation_id, "message_count": out.message_count,
                "messages": [{"id": str(m.id), "position": m.position, "stored": m.created} for m in out.messages]}

    @server.tool(description=RECALL, annotations=reads)
    async def recall(
        query: Annotated[str, Field(description="What to look for, in natural language or keywords.")],
        limit: Annotated[int, Field(ge=1, le=50, description="How many memories at most.")] = 5,
        kinds: Annotated[list[str] | None, Field(min_length=1,
                                                 description="Only these kinds (e.g. [\"preference\"]).")] = None,
        conversations: Annotated[list[str] | None, Field(
            min_length=1, description="Only the turns of these conversations (as given to `append_messages`); "
                                      "other memories still match.")] = None,
    ) -> dict[str, Any]:
        with service_errors():
            # The model writes these queries: its "I" is not the user's (and not its own turns either:
            # "what do I know about the user's diet?"), so the first and second person are ignored.
            found = await (await client_for()).search(query, limit=limit,
                                                      filters=SearchFilters(agent_id=agent, kinds=kinds,
                                                                            conversations=conversations),
                                                      tuning=SearchTuning(first_person=None))
        kept: list[dict[str, Any]] = []
        chars = 0
        for r in found.results:
            chars += len(r.text)
            if kept and chars > MAX_RECALL_CHARS:
                break
            kept.append(_recalled(r))
        more = len(found.results) - len(kept)
        return {"memories": kept, **({"more": more} if more else {})}

    @server.tool(description=ASSEMBLE, annotations=reads)
    async def assemble_context(
        query: Annotated[str, Field(description="The message or question to answer.")],
        recent_messages: Annotated[list[ChatMessage] | None, Field(
            description="The latest conversation turns, oldest first (kept as far as the budget allows).")] = None,
        max_context_tokens: Annotated[int | None, Field(ge=1, description="Token budget for the whole block.")] = None,
        conversation_id: Annotated[str | None, Field(
            description="The conversation being answered (as given to `append_messages`): its turns already in "
                        "`recent_messages` are not repeated among the memories.")] = None,
    ) -> dict[str, Any]:
        budget = max_context_tokens or config.max_context_tokens
        selective = True if budget is None else None  # no budget anywhere: the service sizes it from the query
        messages = [Message(role=m.role, content=m.content) for m in recent_messages or []]
        with service_errors():
            ctx = await (await client_for()).assemble(agent, query, model=model, recent_messages=messages,
                                                      max_context_tokens=budget, selective=selective,
                                                      conversation_id=conversation_id)
        return {"context": ctx.context, "refs": {tag: str(i) for tag, i in ctx.refs.items()},
                "context_tokens": ctx.budget.context_tokens, "degradation_level": ctx.degradation_level,
                "degradation_reasons": ctx.degradation_reasons}

    @server.tool(description=FEEDBACK, annotations=writes)
    async def give_feedback(
        helpful_ids: Annotated[list[str] | None, Field(max_length=MAX_FEEDBACK_IDS,
                                                       description="Ids of memories that helped.")] = None,
        unhelpful_ids: Annotated[list[str] | None, Field(max_length=MAX_FEEDBACK_IDS,
                                                         description="Ids of memories that did not.")] = None,
    ) -> dict[str, Any]:
        try:
            verdicts = {**{UUID(i): False for i in unhelpful_ids or []}, **{UUID(i): True for i in helpful_ids or []}}
        except ValueError as exc:
            raise ToolError(f"memory ids are UUIDs (as `recall` and `assemble_context` return them): {exc}") from exc
        if not verdicts:
            raise ToolError("give `helpful_ids`, `unhelpful_ids` or both")
        if len(verdicts) > MAX_FEEDBACK_IDS:
            raise ToolError(f"invalid arguments: at most {MAX_FEEDBACK_IDS} ids in all (got {len(verdicts)}); "
                            "give feedback on the rest in another call")
        if both := sorted({str(UUID(i)) for i in helpful_ids or []} & {str(UUID(i)) for i in unhelpful_ids or []}):
            raise ToolError(f"invalid arguments: {', '.join(both)} cannot be both helpful and unhelpful "
                            "(give each id in one list)")
        client = await client_for()
        unknown: list[UUID] = []
        with service_errors():
            for ident in list(verdicts):  # this agent's and org-wide memories: what its context holds
                try:
                    if (await client.get_memory(ident)).agent_id in (agent, None):
                        continue
                except NotFound:
                    pass
                unknown.append(ident)
                del verdicts[ident]
            result = await client.feedback(verdicts) if verdicts else None
        missing = [*unknown, *(result.not_found if result else [])]
        return {"updated": len(result.updated) if result else 0, "not_found": [str(i) for i in missing]}

    @server.tool(description=SET_DIRECTIVE, annotations=writes)
    async def set_directive(
        content: Annotated[str, Field(description="The complete directive text.")],
    ) -> dict[str, Any]:
        with service_errors():
            directive = await (await client_for()).put_directive(agent, content)
        return {"version": directive.version, "content": directive.content}

    @server.tool(description=GET_DIRECTIVE, annotations=reads)
    async def get_directive() -> dict[str, Any]:
        with service_errors():
            try:
                directive = await (await client_for()).get_directive(agent)
            except NotFound:
                return {"version": 0, "content": None}
        return {"version": directive.version, "content": directive.content}

    @server.tool(description=FORGET, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                                                 idempotent_hint=True, open_world_hint=False))
    async def forget(
        memory_ids: Annotated[list[str], Field(min_length=1, max_length=MAX_FORGET_IDS, description=(
            f"Ids of the memories to delete, at most {MAX_FORGET_IDS} per call."))],
    ) -> dict[str, Any]:
        client = await client_for()
        deleted: list[str] = []
        missing: list[str] = []
        refused: list[dict[str, str]] = []
        for memory_id, ident in distinct_ids(memory_ids).items():
            if ident is None:
                missing.append(memory_id)
                continue
            try:
                mine = await owns(client, agent, ident)  # another agent's (or an org-wide) is not its to delete
                if mine:
                    # 404 now: a delete sent again after its answer was lost (the first one deleted it), or
                    # another caller's at the same moment; either way it is gone, as asked.
                    with contextlib.suppress(NotFound):
                        await client.delete_memory(ident)
            except Conflict as exc:  # a conversation's turn (or a document's chunk): it goes with its whole
                refused.append({"id": memory_id, "reason": f"{exc.code}: {exc.message}"})
                continue
            except PgcontextError as exc:  # the call failed, not this id: what was deleted before is said
                done = f" (deleted before it failed: {', '.join(deleted)})" if deleted else ""
                raise ToolError(f"{failure(exc)}{done}") from exc
            (deleted if mine else missing).append(memory_id)
        return {"deleted": deleted, "not_found": missing, **({"refused": refused} if refused else {})}

"""``memory_tools``: remember, recall and assemble_context as Agents SDK function tools (like pgcontext's
MCP server's), bound to one agent's memories."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agents import RunContextWrapper, Tool, function_tool
from agents.tool import default_tool_error_function
from pgcontext_client import AssembleFilters, AsyncClient, PgcontextError, SearchFilters, SearchTuning, TransportError
from pgcontext_client.types import RetrievalOptions


def tool_failure(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What the model reads when a tool call fails: the service's answer (which argument, which limit), as
    pgcontext's MCP tools say it, so the model can correct its call; any other error, the SDK's own line."""
    if isinstance(error, TransportError):
        return f"pgcontext could not be reached: {error.message}"
    if isinstance(error, PgcontextError):
        return f"pgcontext answered {error.status} {error.code}: {error.message} (request id {error.request_id})"
    return default_tool_error_function(ctx, error)


def memory_tools(agent_id: str, *, url: str | None = None, api_key: str | None = None,
                 client: AsyncClient | None = None, model: str = "gpt-4o",
                 max_context_tokens: int = 2000, conversations: Sequence[str] | None = None) -> list[Tool]:
    """``remember``, ``recall`` and ``assemble_context`` over ``agent_id``'s memories. Which agent is
    configuration, never a tool argument: the model reads and writes this agent's memory only. ``model``
    and ``max_context_tokens``: how ``assemble_context`` counts and caps its context. ``conversations``:
    the only conversations whose messages ``recall`` and ``assemble_context`` may find (the session's,
    for an agent that talks with many people); the agent's other memories as always."""
    pg = client or AsyncClient(url, api_key)
    chats = None if conversations is None else list(conversations)

    @function_tool(failure_error_function=tool_failure)
    async def remember(text: str, kind: str | None = None, importance: float | None = None) -> str:
        """Store a long-term memory, so later conversations can recall it. Write one self-contained
        statement ("The user is allergic to peanuts."), not a transcript. A memory that repeats one
        already stored is merged into it.

        Args:
            text: The fact, preference, event or instruction.
            kind: A lowercase label such as fact, preference, event, task (default fact).
            importance: 0-1; higher is kept in view more (default 0.5).
        """
        written = await pg.create_memory(text, agent_id=agent_id, kind=kind, importance=importance)
        return json.dumps({"id": str(written.id), "status": written.status})

    @function_tool(failure_error_function=tool_failure)
    async def recall(query: str, limit: int = 5) -> str:
        """Search your long-term memories by meaning and keywords. Results are best first, each with its
        id, text, kind and a score from 0 (no match) to 1 (a perfect match).

        Args:
            query: What to look for, in natural language or keywords.
            limit: How many memories at most (1-50).
        """
        # The model's own words: its "I" is not the user's, nor its "you" the agent's (both ignored, as in MCP).
        found = await pg.search(query, limit=max(1, min(limit, 50)),
                                filters=SearchFilters(agent_id=agent_id, conversations=chats),
                                tuning=SearchTuning(first_person=None))
        return json.dumps({"memories": [
            {"id": str(r.id), "text": r.text, "kind": r.kind, "score": r.score,
             "occurred_at": r.occurred_at.isoformat() if r.occurred_at else None} for r in found.results]})

    @function_tool(failure_error_function=tool_failure)
    async def assemble_context(query: str) -> str:
        """The best context for answering a message: your standing directive and the most useful memories,
        ranked and packed into a token budget. Memories are numbered lines; `refs` maps each number to the
        memory's id.

        Args:
            query: The message or question to answer.
        """
        ctx = await pg.assemble(agent_id, query, model=model, max_context_tokens=max_context_tokens,
                                retrieval=None if chats is None else RetrievalOptions(
                                    filters=AssembleFilters(conversations=chats)))
        return json.dumps({"context": ctx.context, "refs": {tag: str(i) for tag, i in ctx.refs.items()}})

    return [remember, recall, assemble_context]

"""What a model is told when it calls an MCP tool wrongly: each wrong argument named with its rule, in a
short line (never pydantic's validation dump), an argument the tool does not take refused rather than
dropped, and nothing written. The real server (``build_server``) behind the SDK's in-process client,
against a live service."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from mcp.client import Client
from pgcontext_client import Client as Pgcontext

from service.mcp import McpConfig
from service.mcp.server import Clients, build_server
from tests.conftest import Tenant

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@contextlib.asynccontextmanager
async def session(config: McpConfig) -> AsyncIterator[Client]:
    """The SDK's client on the server ``pgcontext mcp`` runs for ``config`` (its tools call the service)."""
    clients = Clients(config)
    try:
        async with Client(build_server(config, clients)) as client:
            yield client
    finally:
        await clients.aclose()


def mine(live_url: str, tenant: Tenant) -> tuple[McpConfig, str]:
    agent = f"mcp-{uuid4().hex[:8]}"
    return McpConfig(url=live_url, agent_id=agent, api_key=tenant.key), agent


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    """The error text a model reads for this call (which must be an error)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, (tool, arguments, result)
    text: str = result.content[0].text  # type: ignore[union-attr]
    assert "pydantic" not in text and "validation error for" not in text and "input_type" not in text, text
    return text.removeprefix(f"Error executing tool {tool}: ")


async def test_each_wrong_argument_is_named_with_its_rule(live_url: str, tenant: Tenant) -> None:
    config, agent = mine(live_url, tenant)
    async with session(config) as client:
        await wrong_arguments(client)
    with Pgcontext(live_url, tenant.key) as pg:
        assert pg.list_memories(agent_id=agent).items == []  # none of these wrote anything


async def wrong_arguments(client: Client) -> None:
    expected: list[tuple[str, dict[str, Any], str]] = [
        ("recall", {}, "invalid arguments: `query` is required"),
        ("recall", {"query": "x", "limit": 0}, "invalid arguments: `limit` must be at least 1 (got 0)"),
        ("recall", {"query": "x", "limit": 80}, "invalid arguments: `limit` must be at most 50 (got 80)"),
        ("recall", {"query": "x", "limit": "many"}, "invalid arguments: `limit` must be a whole number (got 'many')"),
        ("recall", {"query": "x", "conversations": []},
         "invalid arguments: `conversations` must have at least 1 item"),
        ("remember", {"text": "x", "importance": 2}, "invalid arguments: `importance` must be at most 1 (got 2)"),
        ("remember", {"text": "x", "occurred_at": "yesterday"}, "invalid arguments: `occurred_at` must be an ISO "
         "8601 date-time with a timezone (e.g. 2024-05-01T09:30:00Z) (got 'yesterday')"),
        ("remember", {"text": "x", "occurred_at": "2024-05-01T09:30:00"}, "invalid arguments: `occurred_at` needs "
         "a timezone (e.g. 2024-05-01T09:30:00Z or +02:00) (got '2024-05-01T09:30:00')"),
        ("remember", {"memories": [{"text": "a", "tags": ["x"]}, {"txt": "b"}]},
         "invalid arguments: `memories[0].tags` is not a field here; `memories[1].text` is required; "
         "`memories[1].txt` is not a field here (got 'b')"),
        ("append_messages", {"conversation_id": "c", "messages": [{"content": "hi", "role": "bot"}]},
         "invalid arguments: `messages[0].role` must be one of 'user', 'assistant', 'system' or 'tool' (got 'bot')"),
        ("forget", {"memory_ids": "abc"}, "invalid arguments: `memory_ids` must be a list (got 'abc')"),
        ("assemble_context", {"query": "x", "recent_messages": [{"role": "user", "text": "hi"}]},
         "invalid arguments: `recent_messages[0].content` is required"),
    ]
    for tool, arguments, message in expected:
        assert await refused(client, tool, arguments) == message, (tool, arguments)
    same = str(uuid4())
    assert await refused(client, "give_feedback", {"helpful_ids": [same], "unhelpful_ids": [same.upper()]}) == (
        f"invalid arguments: {same} cannot be both helpful and unhelpful (give each id in one list)")
    huge = await refused(client, "recall", {"query": "x", "limit": "9" * 1000})  # the value is not echoed back
    assert huge == "invalid arguments: `limit` must be at most 50"
    many = await refused(client, "remember", {"memories": [{} for _ in range(9)]})
    assert many.endswith("`memories[4].text` is required; and 4 more") and len(many) < 250


async def test_an_argument_the_tool_does_not_take_is_refused_not_dropped(live_url: str, tenant: Tenant) -> None:
    """A misspelt optional argument used to be dropped without a word: the call ran with the default."""
    config, agent = mine(live_url, tenant)
    async with session(config) as client:
        await unknown_arguments(client)
    with Pgcontext(live_url, tenant.key) as pg:
        assert pg.list_memories(agent_id=agent).items == []


async def unknown_arguments(client: Client) -> None:
    assert await refused(client, "recall", {"query": "x", "limt": 3}) == (
        "invalid arguments: `limt` is not an argument of recall (it takes `conversations`, `kinds`, `limit`, `query`)")
    assert await refused(client, "remember", {"text": "The user likes tea.", "tags": ["drinks"], "pin": True}) == (
        "invalid arguments: `pin`, `tags` are not arguments of remember (it takes `importance`, `kind`, `memories`, "
        "`metadata`, `occurred_at`, `text`)")
    assert await refused(client, "get_directive", {"agent_id": "someone-else"}) == (
        "invalid arguments: `agent_id` is not an argument of get_directive (it takes no arguments)")
    schemas = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    assert schemas["remember"]["$defs"]["NewMemory"]["additionalProperties"] is False  # the model is told so
    assert schemas["append_messages"]["$defs"]["NewMessage"]["additionalProperties"] is False


async def test_a_turn_needs_a_role_or_a_speaker(live_url: str, tenant: Tenant) -> None:
    """A turn nobody said was stored (``said_by`` null): "what did the user say?" could never find it."""
    conversation = f"c-{uuid4().hex[:8]}"
    async with session(mine(live_url, tenant)[0]) as client:
        for nobody in ({"content": "hi"}, {"content": "hi", "speaker": "  "}):
            assert await refused(client, "append_messages", {"conversation_id": conversation, "messages": [
                {"content": "Hello!", "role": "user"}, nobody]}) == (
                "invalid arguments: `messages[1]`: a turn needs its `role` (user, assistant, system or tool) or its "
                "`speaker`")
        for said in ({"content": "Hi Dana.", "role": "assistant"}, {"content": "Hello!", "speaker": "Dana"}):
            result = await client.call_tool("append_messages", {"conversation_id": conversation, "messages": [said]})
            assert not result.is_error, result
    with Pgcontext(live_url, tenant.key) as pg:
        assert [(m.role, m.speaker) for m in pg.list_messages(conversation).items] == [
            ("assistant", None), (None, "Dana")]


async def test_forget_reports_a_failed_call_as_an_error_not_as_refused_ids(live_url: str, tenant: Tenant) -> None:
    """``refused`` is for an id the service will not delete on its own (a conversation's turn); a call the
    service did not take at all (here: a revoked key) is an error, not every id "refused"."""
    with Pgcontext(live_url, tenant.key) as pg:
        ids = [str(pg.create_memory(f"Forgettable note {n}.", agent_id="mcp-forget").ids[0]) for n in range(2)]
    async with session(McpConfig(url=live_url, agent_id="mcp-forget", api_key="pgc_not_a_key")) as client:
        message = await refused(client, "forget", {"memory_ids": ids})
        assert message.startswith("pgcontext answered 401 unauthorized: "), message
    with Pgcontext(live_url, tenant.key) as pg:
        assert {str(m.id) for m in pg.list_memories(agent_id="mcp-forget").items} == set(ids)


async def test_an_empty_model_setting_means_the_default(live_url: str, tenant: Tenant) -> None:
    """``PGCONTEXT_MCP_MODEL=""`` (an empty value in a runtime's ``env``) made every assemble_context a 400."""
    agent = f"mcp-{uuid4().hex[:8]}"
    async with session(McpConfig(url=live_url, agent_id=agent, api_key=tenant.key, model="")) as client:
        result = await client.call_tool("assemble_context", {"query": "what does the user drink?"})
        assert not result.is_error, result.content


async def test_supersedes_names_only_this_agents_own_memories(live_url: str, tenant: Tenant) -> None:
    """``remember`` retired another agent's memory through ``supersedes``, which ``forget`` would not
    delete: an id that is not this agent's own (another agent's, org-wide, none) is refused, nothing written."""
    config, agent = mine(live_url, tenant)
    with Pgcontext(live_url, tenant.key) as pg:
        own = str(pg.create_memory("The user's badge number is 41.", agent_id=agent).ids[0])
        theirs = str(pg.create_memory("Bob's badge number is 17.", agent_id=f"{agent}-bob").ids[0])
        shared = str(pg.create_memory("Badges are renewed each January.").ids[0])
    nobody = str(uuid4())
    async with session(config) as client:
        for other in (theirs, shared):  # each alone: the service itself would retire it
            assert await refused(client, "remember", {"memories": [
                {"text": "Badge numbers changed.", "supersedes": [other]}]}) == (
                f"invalid arguments: `supersedes` may name only this agent's own memories, not {other} (another "
                "agent's, org-wide or not found); nothing was stored")
        message = await refused(client, "remember", {"memories": [
            {"text": "The user's badge number is 42.", "supersedes": [own]},
            {"text": "Badge numbers changed.", "supersedes": [theirs, shared, nobody, theirs]}]})
        assert message == (f"invalid arguments: `supersedes` may name only this agent's own memories, not {theirs}, "
                           f"{shared}, {nobody} (another agent's, org-wide or not found); nothing was stored")
        with Pgcontext(live_url, tenant.key) as pg:
            assert [str(m.id) for m in pg.list_memories(agent_id=agent).items] == [own]  # nothing written
            assert all(pg.get_memory(i).current for i in (own, theirs, shared))
        result = await client.call_tool("remember", {"memories": [
            {"text": "The user's badge number is 42.", "supersedes": [own.upper()]}]})
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert result.structured_content["outcomes"][0]["superseded"] == [own]  # its own: retired as asked
        many = [str(uuid4()) for _ in range(101)]  # each is read before anything is written: a bound, as forget's
        assert await refused(client, "remember", {"memories": [{"text": "Badges changed.", "supersedes": many}]}) == (
            "invalid arguments: `supersedes` names at most 100 memories in one call (got 101); nothing was stored")


async def test_top_level_fields_of_text_are_refused_with_memories(live_url: str, tenant: Tenant) -> None:
    """``kind``, ``importance``, ``occurred_at`` and ``metadata`` are `text`'s: given with ``memories`` alone
    they were dropped without a word (a batch of preferences stored as facts)."""
    config, agent = mine(live_url, tenant)
    batch = [{"text": "The user prefers window seats."}]
    async with session(config) as client:
        assert await refused(client, "remember", {"memories": batch, "kind": "preference"}) == (
            "invalid arguments: `kind` is for `text` only; with `memories`, give them in each memory")
        assert await refused(client, "remember", {"memories": batch, "importance": 0.9, "occurred_at":
                                                  "2024-05-01T09:30:00Z", "metadata": {"source": "chat"}}) == (
            "invalid arguments: `importance`, `occurred_at`, `metadata` are for `text` only; with `memories`, give "
            "them in each memory")
        with Pgcontext(live_url, tenant.key) as pg:
            assert pg.list_memories(agent_id=agent).items == []
        both = await client.call_tool("remember", {"text": "The user likes tea.", "kind": "preference",
                                                   "memories": [{"text": "The user owns a cat.", "kind": "fact"}]})
        assert not both.is_error, both.content  # with `text`, they are its own
        with Pgcontext(live_url, tenant.key) as pg:
            assert {m.text: m.kind for m in pg.list_memories(agent_id=agent).items} == {
                "The user likes tea.": "preference", "The user owns a cat.": "fact"}


async def test_id_lists_are_bounded(live_url: str, tenant: Tenant) -> None:
    """``forget`` took any number of ids, two requests each: 12,000 ran into the call's deadline, a generic
    error although it had deleted many. Its ids and ``give_feedback``'s are bounded, in the schema too."""
    config, _agent = mine(live_url, tenant)
    ids = [str(uuid4()) for _ in range(300)]
    async with session(config) as client:
        assert await refused(client, "forget", {"memory_ids": ids[:101]}) == (
            "invalid arguments: `memory_ids` must have at most 100 items")
        assert await refused(client, "give_feedback", {"helpful_ids": ids[:257]}) == (
            "invalid arguments: `helpful_ids` must have at most 256 items")
        assert await refused(client, "give_feedback", {"helpful_ids": ids[:200], "unhelpful_ids": ids[200:]}) == (
            "invalid arguments: at most 256 ids in all (got 300); give feedback on the rest in another call")
        schemas = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
        assert schemas["forget"]["properties"]["memory_ids"]["maxItems"] == 100
        feedback = schemas["give_feedback"]["properties"]
        assert [feedback[n]["anyOf"][0]["maxItems"] for n in ("helpful_ids", "unhelpful_ids")] == [256, 256]
        most = await client.call_tool("forget", {"memory_ids": ids[:100]})
        assert most.structured_content == {"deleted": [], "not_found": ids[:100]}


async def test_a_conversation_id_follows_the_services_rule(live_url: str, tenant: Tenant) -> None:
    """``conversation_id=""`` was answered in the Python client's words ("an id in the path is empty ...
    (request id None)"): the argument is named with its rule, as the schema says."""
    config, agent = mine(live_url, tenant)
    turn = [{"role": "user", "content": "hi"}]
    async with session(config) as client:
        for wrong in ("", "..", "a b", "x" * 201, "trip\n"):
            assert await refused(client, "append_messages", {"conversation_id": wrong, "messages": turn}) == (
                "invalid arguments: `conversation_id`: must be 1-200 letters, digits and _.:@- (not only dots)"), wrong
        schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}["append_messages"]
        assert schema["properties"]["conversation_id"] | {"description": ""} == {
            "type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^(?!\.+$)(?!.*\n)[A-Za-z0-9_.:@-]+$",
            "description": "", "title": "Conversation Id"}
        result = await client.call_tool("append_messages", {"conversation_id": "a.b:c@d-e_" + "x" * 190,
                                                            "messages": turn})
        assert not result.is_error, result.content
    with Pgcontext(live_url, tenant.key) as pg:
        assert [m.text for m in pg.list_memories(agent_id=agent).items] == ["hi"]

"""``pgcontext_agents`` against a live service: an Agents SDK agent loop with a scripted stub model that stores
and recalls memories through the tools and keeps its conversation in ``PgcontextSession``; the session
protocol (limit, pop, clear, round trip of item types, long items and long sessions, tenant isolation) and the
README example."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from agents import Agent, Model, ModelResponse, Runner
from agents.memory import Session, SessionSettings
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
from pgcontext_agents import PgcontextSession, memory_tools
from pgcontext_client import Client, Conflict, SearchFilters

from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.adapters import ROOT, run_readme
from tests.integration.test_conversations import ROLE_CHAT

pytestmark = pytest.mark.integration

Step = Callable[[list[dict[str, Any]]], list[Any]]
"""One model turn: from the items the model is given, what it answers."""


class ScriptedModel(Model):
    """A stub ``Model`` playing a script: each call answers with the next step (a tool call or a message),
    and records the input it was given."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps, self.inputs = list(steps), []  # type: list[Step], list[list[dict[str, Any]]]

    async def get_response(self, system_instructions: str | None, input: str | list[Any], *args: Any,
                           **kwargs: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [dict(i) for i in input]
        self.inputs.append(items)
        return ModelResponse(output=self.steps.pop(0)(items), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def call(name: str, **arguments: Any) -> Step:
    return lambda items: [ResponseFunctionToolCall(type="function_call", call_id=f"call-{uuid4().hex[:8]}",
                                                   name=name, arguments=json.dumps(arguments))]


def say(text: Callable[[list[dict[str, Any]]], str]) -> Step:
    return lambda items: [ResponseOutputMessage(
        id=f"msg-{uuid4().hex[:8]}", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text(items), annotations=[])])]


def last_tool_output(items: list[dict[str, Any]]) -> Any:
    return json.loads(next(i["output"] for i in reversed(items) if i.get("type") == "function_call_output"))


def fact(items: list[dict[str, Any]]) -> dict[str, Any]:
    """The best recalled memory that is a fact (the conversation's own messages are memories too)."""
    return next(m for m in last_tool_output(items)["memories"] if m["kind"] == "fact")


async def test_an_agent_loop_remembers_and_recalls_through_the_tools_and_session(live_url: str,
                                                                                tenant: Tenant) -> None:
    agent_id, chat = f"oa-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    model = ScriptedModel([
        call("remember", text="The user's sister is called Ines.", kind="fact", importance=0.8),
        say(lambda items: f"Noted ({last_tool_output(items)['status']})."),
        call("recall", query="what is the name of the user's sister?", limit=3),
        say(lambda items: f"Your sister is {fact(items)['text'].split()[-1].rstrip('.')}."),
        call("assemble_context", query="who is in the user's family?"),
        say(lambda items: last_tool_output(items)["context"]),
    ])
    agent = Agent(name="assistant", instructions="Use your memory.", model=model,
                  tools=memory_tools(agent_id, url=live_url, api_key=tenant.key))
    session = PgcontextSession(chat, agent_id=agent_id, url=live_url, api_key=tenant.key)
    assert isinstance(session, Session)  # the SDK's protocol

    first = await Runner.run(agent, "My sister is called Ines.", session=session)
    assert first.final_output == "Noted (created)."
    with Client(live_url, tenant.key) as pg:
        hits = pg.search("sister", filters=SearchFilters(agent_id=agent_id, kinds=["fact"])).results
        assert [h.text for h in hits] == ["The user's sister is called Ines."]

    second = await Runner.run(agent, "What's my sister's name?", session=session)
    assert second.final_output == "Your sister is Ines."
    recalled = fact(model.inputs[3])
    assert 0.0 < recalled["score"] <= 1.0 and recalled["id"] == str(hits[0].id)
    # the second run's model saw the first run's conversation, read back from the session
    assert {"role": "user", "content": "My sister is called Ines."} in model.inputs[2]
    assert any(i.get("type") == "function_call" and i.get("name") == "remember" for i in model.inputs[2])

    third = await Runner.run(agent, "Who's in my family?", session=session)
    assert "The user's sister is called Ines." in third.final_output

    items = [dict(i) for i in await session.get_items()]
    kinds = [i.get("type", "message") for i in items]
    assert kinds.count("function_call") == 3 and kinds.count("function_call_output") == 3
    assert [i["content"] for i in items if i.get("role") == "user"] == [
        "My sister is called Ines.", "What's my sister's name?", "Who's in my family?"]
    with Client(live_url, tenant.key) as pg:
        stored = pg.list_messages(chat, limit=100).items
        assert pg.get_conversation(chat).agent_id == agent_id
    assert len(stored) == len(items) and {m.role for m in stored} == {"user", "assistant", "tool"}
    assert any(m.role == "tool" and "Ines" in m.content for m in stored)  # searchable text, not just metadata
    await session.close()


async def test_recall_reads_the_models_first_person_as_nobodys(live_url: str, tenant: Tenant) -> None:
    # The model writes recall's query: its "I" is not the user's, so the user's turns are not put first.
    agent_id = f"oa-{uuid4().hex[:8]}"
    query = "Where did I note the user's sister would move?"
    with Client(live_url, tenant.key) as pg:
        said = pg.append_messages(f"chat-{uuid4().hex[:8]}", ROLE_CHAT, agent_id=agent_id).messages[1].id
        as_users = pg.search(query, limit=3, filters=SearchFilters(agent_id=agent_id)).results
    assert as_users[0].id != said  # searched as if the user's words, the user's turn ranks first
    model = ScriptedModel([call("recall", query=query, limit=3),
                           say(lambda items: last_tool_output(items)["memories"][0]["id"])])
    agent = Agent(name="assistant", instructions="Use your memory.", model=model,
                  tools=memory_tools(agent_id, url=live_url, api_key=tenant.key))
    assert (await Runner.run(agent, "Where did my sister go, did I say?")).final_output == str(said)


async def test_the_tools_keep_to_the_conversations_named(live_url: str, tenant: Tenant) -> None:
    # One agent, two people: with conversations=[theirs], recall and assemble_context find only that chat.
    agent_id = f"oa-{uuid4().hex[:8]}"
    ines, noor = f"chat-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        mine = pg.append_messages(ines, [{"role": "user", "content": "My sister moved to Oslo."}],
                                  agent_id=agent_id).messages[0].id
        other = pg.append_messages(noor, [{"role": "user", "content": "My sister moved to Lisbon."}],
                                   agent_id=agent_id).messages[0].id
    query = "Where did the sister move?"
    model = ScriptedModel([call("recall", query=query, limit=5), call("assemble_context", query=query),
                           say(lambda items: "done")])
    agent = Agent(name="assistant", instructions="Use your memory.", model=model,
                  tools=memory_tools(agent_id, url=live_url, api_key=tenant.key, conversations=[ines]))
    await Runner.run(agent, query)
    assert [m["id"] for m in last_tool_output(model.inputs[1])["memories"]] == [str(mine)]
    context = last_tool_output(model.inputs[2])["context"]
    assert "Oslo" in context and "Lisbon" not in context
    # without the option, both chats
    model = ScriptedModel([call("recall", query=query, limit=5), say(lambda items: "done")])
    agent = Agent(name="assistant", instructions="Use your memory.", model=model,
                  tools=memory_tools(agent_id, url=live_url, api_key=tenant.key))
    await Runner.run(agent, query)
    assert {m["id"] for m in last_tool_output(model.inputs[1])["memories"]} == {str(mine), str(other)}


async def test_a_failed_tool_call_tells_the_model_what_the_service_said(live_url: str, tenant: Tenant) -> None:
    """The SDK's default answer to a failed tool call is "An error occurred ... Please try again.", so a
    model retried the same arguments; the tools answer with the service's error, as the MCP tools do."""
    agent_id = f"oa-{uuid4().hex[:8]}"
    model = ScriptedModel([call("remember", text="The user likes tea.", importance=3),
                           call("remember", text="x" * 40_000), say(lambda items: "done")])
    agent = Agent(name="assistant", instructions="Use your memory.", model=model,
                  tools=memory_tools(agent_id, url=live_url, api_key=tenant.key))
    await Runner.run(agent, "Remember that I like tea.")
    outputs = [next(i["output"] for i in reversed(items) if i.get("type") == "function_call_output")
               for items in model.inputs[1:]]
    assert outputs[0].startswith("pgcontext answered 400 validation_error:") and "importance" in outputs[0], outputs
    assert outputs[1].startswith("pgcontext answered 413 text_too_long:") and "32000" in outputs[1], outputs
    unreachable = memory_tools(agent_id, url="http://127.0.0.1:9", api_key=tenant.key)[0]
    model = ScriptedModel([call("remember", text="The user likes tea."), say(lambda items: "done")])
    await Runner.run(Agent(name="assistant", model=model, tools=[unreachable]), "Remember that I like tea.")
    said = next(i["output"] for i in reversed(model.inputs[1]) if i.get("type") == "function_call_output")
    assert said.startswith("pgcontext could not be reached:"), said
    with Client(live_url, tenant.key) as pg:
        assert pg.list_memories(agent_id=agent_id).items == []


async def test_the_session_protocol(live_url: str, tenant: Tenant, other_tenant: Tenant) -> None:
    chat = f"chat-{uuid4().hex[:8]}"
    session = PgcontextSession(chat, url=live_url, api_key=tenant.key)
    assert await session.get_items() == [] and await session.pop_item() is None
    await session.clear_session()  # nothing yet
    items: list[Any] = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
                        {"role": "user", "content": [{"type": "input_text", "text": "three"}]}]
    await session.add_items(items[:2])
    await session.add_items(items[2:])
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[1:] and await session.get_items(limit=0) == []
    theirs = PgcontextSession(chat, url=live_url, api_key=other_tenant.key)
    assert await theirs.get_items() == [] and await theirs.pop_item() is None
    await theirs.clear_session()
    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    await session.add_items([{"role": "user", "content": "four"}])
    assert [dict(i)["content"] for i in await session.get_items()] == ["one", "two", "four"]
    await session.clear_session()
    assert await session.get_items() == []
    await session.close()
    await theirs.close()


def test_the_readme_example_runs(live_url: str, tenant: Tenant, tmp_path: Path) -> None:
    out = run_readme(ROOT / "clients" / "openai-agents" / "README.md", live_url, tenant.key, tmp_path).splitlines()
    assert out == ["['remember', 'recall', 'assemble_context']", "[{'role': 'assistant', 'content': 'Nice to know!'}]",
                   "{'role': 'assistant', 'content': 'Nice to know!'}", "1"]


async def test_pop_item_keeps_a_session_longer_than_one_append(live_url: str, tenant: Tenant,
                                                               settings: Settings) -> None:
    session = PgcontextSession(f"chat-{uuid4().hex[:8]}", agent_id=f"oa-{uuid4().hex[:8]}", url=live_url,
                               api_key=tenant.key)
    items: list[Any] = [{"role": "user", "content": f"item {i}"} for i in range(settings.limits.max_batch + 5)]
    await session.add_items(items)  # more than one append takes
    assert await session.pop_item() == items[-1]
    assert await session.get_items() == items[:-1]
    await session.clear_session()
    await session.close()


async def test_pop_item_removes_the_last_message_only_and_never_one_appended_meanwhile(live_url: str,
                                                                                       tenant: Tenant) -> None:
    chat = f"chat-{uuid4().hex[:8]}"
    session = PgcontextSession(chat, agent_id=f"oa-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    other = PgcontextSession(chat, url=live_url, api_key=tenant.key)
    items: list[Any] = [{"role": "user", "content": f"item {i}"} for i in range(3)]
    late: Any = {"role": "assistant", "content": "appended between the read and the removal"}
    await session.add_items(items)
    with Client(live_url, tenant.key) as pg:
        before = [m.id for m in pg.list_messages(chat).items]
    read, raced = session.client.list_messages, [False]

    async def racing(*args: Any, **kwargs: Any) -> Any:  # another writer appends right after pop_item's read
        page = await read(*args, **kwargs)
        if not raced[0]:
            raced[0] = True
            await other.add_items([late])
        return page

    session.client.list_messages = racing
    assert await session.pop_item() == late  # the item that was last when it was removed
    assert await session.get_items() == items
    with Client(live_url, tenant.key) as pg:
        assert [m.id for m in pg.list_messages(chat).items] == before  # the rest untouched, not rewritten
    await session.clear_session()
    await session.close()
    await other.close()


async def test_long_items_round_trip(live_url: str, tenant: Tenant, settings: Settings) -> None:
    session = PgcontextSession(f"chat-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    over = settings.limits.max_metadata_bytes + 2000  # longer than the metadata may be: the text is kept once
    items: list[Any] = [
        {"role": "user", "content": "Summarise the page."},
        {"type": "function_call", "call_id": "c-1", "name": "write", "arguments": json.dumps({"text": "a" * over})},
        {"type": "function_call_output", "call_id": "c-1", "output": "界" * (over // 3)},
        {"type": "function_call_output", "call_id": "c-2", "output": [{"type": "input_text", "text": "b" * over}]},
        {"type": "custom_tool_call", "call_id": "c-3", "name": "patch", "input": "d" * over},
        {"type": "custom_tool_call_output", "call_id": "c-3", "output": "e" * over},
        {"id": "msg-1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "c" * over, "annotations": []}]}]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.pop_item() == items[-1] and await session.get_items() == items[:-1]
    with Client(live_url, tenant.key) as pg:
        roles = [m.role for m in pg.list_messages(session.session_id).items]
    assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool"]
    await session.clear_session()
    await session.close()


async def test_a_session_without_agent_id_extends_an_agents_conversation(live_url: str, tenant: Tenant) -> None:
    agent, chat = f"oa-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    owner = PgcontextSession(chat, agent_id=agent, url=live_url, api_key=tenant.key)
    await owner.add_items([{"role": "user", "content": "one"}])
    session = PgcontextSession(chat, url=live_url, api_key=tenant.key,
                               session_settings=SessionSettings(limit=2))  # whoever owns it
    await session.add_items([{"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}])
    assert [dict(i)["content"] for i in await session.get_items()] == ["two", "three"]  # the settings' limit
    assert len(await session.get_items(limit=10)) == 3
    with Client(live_url, tenant.key) as pg:
        assert pg.get_conversation(chat).agent_id == agent
    await owner.close()
    await session.close()


async def test_a_session_of_another_agent_neither_pops_nor_clears_the_conversation(live_url: str,
                                                                                 tenant: Tenant) -> None:
    chat = f"chat-{uuid4().hex[:8]}"
    owner = PgcontextSession(chat, agent_id=f"oa-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    items: list[Any] = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    await owner.add_items(items)
    intruder = PgcontextSession(chat, agent_id=f"oa-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    refused: list[Callable[[], Awaitable[Any]]] = [lambda: intruder.add_items(items[:1]), intruder.pop_item,
                                                  intruder.clear_session]
    for call_refused in refused:
        with pytest.raises(Conflict) as mismatch:
            await call_refused()
        assert mismatch.value.code == "conversation_agent_mismatch"
        assert mismatch.value.details == {"agent_id": owner.agent_id}
    assert await owner.get_items() == items  # nothing removed
    assert await owner.pop_item() == items[-1]
    await owner.clear_session()
    assert await owner.get_items() == []
    await owner.close()
    await intruder.close()


async def test_pops_at_once_take_distinct_items(live_url: str, tenant: Tenant) -> None:
    chat = f"chat-{uuid4().hex[:8]}"
    sessions = [PgcontextSession(chat, url=live_url, api_key=tenant.key) for _ in range(3)]
    items: list[Any] = [{"role": "user", "content": f"item {i}"} for i in range(5)]
    await sessions[0].add_items(items)
    popped = await asyncio.gather(*(s.pop_item() for s in sessions))  # all three read the same last item
    assert sorted(str(dict(i)["content"]) for i in popped if i is not None) == ["item 2", "item 3", "item 4"]
    assert await sessions[0].get_items() == items[:2]
    await sessions[0].clear_session()
    for session in sessions:
        await session.close()

"""``pgcontext_langchain`` against a live service: LangChain's standard retriever tests, both retriever modes,
a retrieval chain with a fake chat model, the chat message history over a conversation (sync, async,
round trip of message types, long messages, odd ids, long batches, conversations written without it, clear,
tenant isolation) and the README example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompt_values import PromptValue
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pgcontext_client import Client, Conflict, SearchFilters
from pgcontext_langchain import PgcontextChatMessageHistory, PgcontextRetriever

from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.adapters import ROOT, run_readme

pytestmark = pytest.mark.integration

FACTS = ["The user is allergic to peanuts.", "The user cooks for two on weekdays.",
         "The user's favourite cuisine is Georgian.", "The user avoids deep-fried food.",
         "The user grows basil and mint on the balcony."]


def seed(url: str, key: str, agent: str) -> list[str]:
    with Client(url, key) as pg:
        return [str(pg.create_memory(text, agent_id=agent).id) for text in FACTS]


class TestStandardRetrieverTests(RetrieversIntegrationTests):
    """LangChain's own retriever tests (``langchain-tests``) on a seeded agent."""

    params: dict[str, Any]

    @pytest.fixture(autouse=True)
    def _seeded(self, live_url: str, tenant: Tenant) -> None:
        agent = f"lc-{uuid4().hex[:8]}"
        seed(live_url, tenant.key, agent)
        self.params = {"url": live_url, "api_key": tenant.key, "agent_id": agent}

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return PgcontextRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return "what food does the user avoid?"


def test_search_mode_documents(live_url: str, tenant: Tenant) -> None:
    agent = f"lc-{uuid4().hex[:8]}"
    ids = seed(live_url, tenant.key, agent)
    docs = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=agent, k=3).invoke(
        "does the user have a peanut allergy?")
    assert len(docs) == 3 and docs[0].page_content == FACTS[0] and docs[0].metadata["id"] == ids[0]
    assert docs[0].id == ids[0] and docs[0].metadata["agent_id"] == agent and docs[0].metadata["kind"] == "fact"
    scores = [d.metadata["score"] for d in docs]
    assert all(0.0 <= s <= 1.0 for s in scores) and scores[0] == max(scores)
    other = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=f"lc-{uuid4().hex[:8]}")
    assert other.invoke("peanut allergy") == []  # another agent's memories stay out


async def test_assemble_mode_documents(live_url: str, tenant: Tenant) -> None:
    agent = f"lc-{uuid4().hex[:8]}"
    ids = seed(live_url, tenant.key, agent)
    retriever = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=agent, mode="assemble", k=10,
                                   max_context_tokens=1500)
    docs = await retriever.ainvoke("what should I cook for the user? any allergies?")
    assert {d.metadata["id"] for d in docs} <= set(ids) and ids[0] in {d.metadata["id"] for d in docs}
    assert [d.metadata["tag"] for d in docs] == [str(n) for n in range(1, len(docs) + 1)]  # packing order
    assert all(0.0 <= d.metadata["score"] <= 1.0 and d.metadata["origin"] in ("hot", "cold") for d in docs)
    assert len(await retriever.ainvoke("allergies?", k=2)) == 2
    with pytest.raises(ValueError, match="agent_id"):
        PgcontextRetriever(url=live_url, api_key=tenant.key, mode="assemble").invoke("x")


async def test_both_modes_keep_to_the_conversations_named(live_url: str, tenant: Tenant) -> None:
    agent = f"lc-{uuid4().hex[:8]}"
    seed(live_url, tenant.key, agent)
    ines, noor = f"chat-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        mine = str(pg.append_messages(ines, [{"role": "user", "content": "My sister loves peanut butter."}],
                                      agent_id=agent).messages[0].id)
        other = str(pg.append_messages(noor, [{"role": "user", "content": "My brother hates peanut butter."}],
                                       agent_id=agent).messages[0].id)
    for mode in ("search", "assemble"):
        kept = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=agent, mode=mode, k=10,
                                  conversations=[ines])
        found = {d.metadata["id"] for d in await kept.ainvoke("who likes peanut butter?")}
        assert mine in found and other not in found, mode
        assert found - {mine}, mode  # the agent's facts as always
    every = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=agent, k=10)
    assert {mine, other} <= {d.metadata["id"] for d in every.invoke("who likes peanut butter?")}


def test_a_retrieval_chain_hands_the_model_the_retrieved_facts(live_url: str, tenant: Tenant) -> None:
    agent = f"lc-{uuid4().hex[:8]}"
    seed(live_url, tenant.key, agent)
    retriever = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=agent, k=2)
    seen: list[str] = []

    def capture(prompt: PromptValue) -> PromptValue:
        seen.append(prompt.to_string())
        return prompt

    def facts(docs: list[Document]) -> str:
        return "\n".join(f"- {d.page_content}" for d in docs)

    prompt = ChatPromptTemplate.from_messages([("system", "What you know:\n{facts}"), ("human", "{question}")])
    model = FakeListChatModel(responses=["No peanuts tonight."])
    chain = ({"facts": retriever | facts, "question": RunnablePassthrough()} | prompt | RunnableLambda(capture)
             | model | StrOutputParser())
    assert chain.invoke("Is there anything the user is allergic to?") == "No peanuts tonight."
    assert "- The user is allergic to peanuts." in seen[0] and "Human: Is there anything" in seen[0]


def test_chat_history_round_trips_messages_in_a_conversation(live_url: str, tenant: Tenant) -> None:
    agent, chat = f"lc-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    history = PgcontextChatMessageHistory(chat, agent_id=agent, url=live_url, api_key=tenant.key)
    assert history.messages == []
    history.clear()  # nothing to clear yet
    sent = [SystemMessage("Be brief."), HumanMessage("What's 2+2?", id="m-1"),
            AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "call-1"}]),
            ToolMessage("4", tool_call_id="call-1"), AIMessage("4.")]
    history.add_messages(sent)
    history.add_messages(sent[1:2])  # the same id again: written once
    back = history.messages
    assert [type(m) for m in back] == [type(m) for m in sent] and [m.text for m in back] == [m.text for m in sent]
    assert back[1].id == "m-1" and isinstance(back[2], AIMessage) and back[2].tool_calls[0]["args"] == {"a": 2, "b": 2}
    assert isinstance(back[3], ToolMessage) and back[3].tool_call_id == "call-1"
    with Client(live_url, tenant.key) as pg:
        conversation = pg.get_conversation(chat)
        stored = pg.list_messages(chat).items
    assert conversation.agent_id == agent and conversation.message_count == 5
    assert [m.role for m in stored] == ["system", "user", "assistant", "tool", "assistant"]
    history.clear()
    assert history.messages == []


async def test_chat_history_async_and_with_message_history(live_url: str, tenant: Tenant,
                                                           other_tenant: Tenant) -> None:
    agent = f"lc-{uuid4().hex[:8]}"
    histories: dict[str, PgcontextChatMessageHistory] = {}

    def history_for(session_id: str) -> BaseChatMessageHistory:
        return histories.setdefault(session_id, PgcontextChatMessageHistory(
            session_id, agent_id=agent, url=live_url, api_key=tenant.key))

    prompt = ChatPromptTemplate.from_messages([("placeholder", "{history}"), ("human", "{question}")])
    model = FakeListChatModel(responses=["Hello Ana!", "Your name is Ana."])
    chat = RunnableWithMessageHistory(prompt | model, history_for, input_messages_key="question",
                                      history_messages_key="history")
    config: Any = {"configurable": {"session_id": f"s-{uuid4().hex[:8]}"}}
    await chat.ainvoke({"question": "Hi, I'm Ana."}, config=config)
    await chat.ainvoke({"question": "What's my name?"}, config=config)
    session = config["configurable"]["session_id"]
    messages = await histories[session].aget_messages()
    assert [(m.type, m.text) for m in messages] == [("human", "Hi, I'm Ana."), ("ai", "Hello Ana!"),
                                                    ("human", "What's my name?"), ("ai", "Your name is Ana.")]
    theirs = PgcontextChatMessageHistory(session, url=live_url, api_key=other_tenant.key)
    assert await theirs.aget_messages() == []  # another org's conversation of that id does not exist for them
    await theirs.aclear()
    assert len(await histories[session].aget_messages()) == 4
    await histories[session].aclear()
    assert await histories[session].aget_messages() == []


async def test_chat_history_of_another_agent_does_not_clear_the_conversation(live_url: str,
                                                                             tenant: Tenant) -> None:
    agent, chat = f"lc-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    owner = PgcontextChatMessageHistory(chat, agent_id=agent, url=live_url, api_key=tenant.key)
    owner.add_messages([HumanMessage("Hi, I'm Ana."), AIMessage("Hello Ana!")])
    intruder = PgcontextChatMessageHistory(chat, agent_id=f"lc-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    with pytest.raises(Conflict) as mismatch:
        intruder.clear()
    assert mismatch.value.code == "conversation_agent_mismatch" and mismatch.value.details == {"agent_id": agent}
    with pytest.raises(Conflict):
        await intruder.aclear()
    assert len(owner.messages) == 2  # nothing removed
    await owner.aclear()
    assert owner.messages == []


def test_the_readme_example_runs(live_url: str, tenant: Tenant, tmp_path: Path) -> None:
    out = run_readme(ROOT / "clients" / "langchain" / "README.md", live_url, tenant.key, tmp_path).splitlines()
    assert out[0].startswith("The user is allergic to peanuts. ")
    assert out[1] == "Skip the satay: the user is allergic to peanuts."
    assert out[2] == "[('human', 'What should I not cook tonight?'), ('ai', 'Anything with peanuts.')]"


def test_a_memorys_own_metadata_never_hides_the_documents_id_and_score(live_url: str, tenant: Tenant) -> None:
    agent = f"lc-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        mid = str(pg.create_memory("The user's passport is in the blue drawer.", agent_id=agent,
                                   metadata={"id": "ext-7", "score": 99, "kind": "mine", "source": "crm"}).id)
    retriever = PgcontextRetriever(url=live_url, api_key=tenant.key, agent_id=agent)
    doc = retriever.invoke("where is the passport?")[0]
    assert doc.metadata["id"] == mid and 0.0 <= doc.metadata["score"] <= 1.0 and doc.metadata["kind"] == "fact"
    assert doc.metadata["source"] == "crm"
    assert retriever.invoke("where is the passport?", k=0) == []


def test_chat_history_keeps_long_messages_and_any_message_id(live_url: str, tenant: Tenant,
                                                             settings: Settings) -> None:
    chat = f"chat-{uuid4().hex[:8]}"
    history = PgcontextChatMessageHistory(chat, agent_id=f"lc-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    over = settings.limits.max_metadata_bytes + 2000  # longer than the metadata may be: its text is kept once
    sent = [HumanMessage("a" * over, id="msg 1/ü"), AIMessage("界" * (over // 3)),
            AIMessage([{"type": "text", "text": "b" * over}], tool_calls=[{"name": "f", "args": {}, "id": "c-1"}]),
            ToolMessage("c" * over, tool_call_id="c-1", id="x" * 300)]
    history.add_messages(sent)
    history.add_messages(sent[:1] + sent[3:])  # ids the service would refuse as they are: still written once
    back = history.messages
    assert [m.model_dump() for m in back] == [m.model_dump() for m in sent]
    with Client(live_url, tenant.key) as pg:
        assert pg.get_conversation(chat).message_count == 4


def test_chat_history_keeps_tool_calls_with_long_arguments(live_url: str, tenant: Tenant, settings: Settings) -> None:
    """A call's arguments are part of the message's text (``name({arguments})``), so long ones are kept once:
    a tool-calling agent writing a file longer than the metadata may be was refused (413 metadata_too_large)."""
    chat = f"chat-{uuid4().hex[:8]}"
    history = PgcontextChatMessageHistory(chat, agent_id=f"lc-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    body = 'line "one"\n\tline two: café, 界\\n' * ((settings.limits.max_metadata_bytes + 2000) // 30)
    raw = json.dumps({"path": "notes.md", "content": body})  # as an OpenAI-style model wrote it: ASCII-escaped
    sent = [AIMessage("Writing it.", tool_calls=[{"name": "write_file", "args": {"path": "a.md", "content": body},
                                                  "id": "call-1"}]),
            AIMessage("", tool_calls=[{"name": "write_file", "args": json.loads(raw), "id": "call-2"}],
                      additional_kwargs={"tool_calls": [{"id": "call-2", "type": "function", "function": {
                          "name": "write_file", "arguments": raw}}]}),
            ToolMessage("written", tool_call_id="call-2")]
    history.add_messages(sent)
    assert [m.model_dump() for m in history.messages] == [m.model_dump() for m in sent]
    with Client(live_url, tenant.key) as pg:
        stored = pg.list_messages(chat).items
        found = pg.search("write_file notes.md", filters=SearchFilters(conversations=[chat])).results
    assert stored[0].content.startswith("Writing it.\nwrite_file({") and stored[1].content == f"write_file({raw})"
    assert found and found[0].id == stored[1].id


def test_chat_history_appends_more_messages_than_one_append_takes(live_url: str, tenant: Tenant,
                                                                  settings: Settings) -> None:
    history = PgcontextChatMessageHistory(f"chat-{uuid4().hex[:8]}", url=live_url, api_key=tenant.key)
    sent = [HumanMessage(f"message {i}") for i in range(settings.limits.max_batch + 5)]
    history.add_messages(sent)
    assert [m.text for m in history.messages] == [m.text for m in sent]


async def test_chat_history_reads_and_extends_a_conversation_written_without_it(live_url: str,
                                                                                tenant: Tenant) -> None:
    agent, chat = f"lc-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        pg.append_messages(chat, [{"role": "user", "content": "What's the weather?"},
                                  {"role": "tool", "content": "sunny, 21C"},
                                  {"role": "assistant", "content": "Sunny and 21C."}], agent_id=agent)
    history = PgcontextChatMessageHistory(chat, url=live_url, api_key=tenant.key)  # no agent_id: whoever owns it
    await history.aadd_messages([HumanMessage("Thanks!")])
    back = await history.aget_messages()
    assert [(m.type, m.text) for m in back] == [("human", "What's the weather?"), ("chat", "sunny, 21C"),
                                                 ("ai", "Sunny and 21C."), ("human", "Thanks!")]
    assert isinstance(back[1], ChatMessage) and back[1].role == "tool"
    with Client(live_url, tenant.key) as pg:
        assert pg.get_conversation(chat).agent_id == agent

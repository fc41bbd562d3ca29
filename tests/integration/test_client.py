"""The Python client (client/, ``pgcontext_client``) against a live service over real HTTP: every endpoint,
idempotent writes, typed errors, and retries on the service's own 503 ``overloaded``."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import httpx
import pytest
from pgcontext_client import (
    AsyncClient,
    Client,
    Conflict,
    FileIn,
    MemoryIn,
    MessageIn,
    NotFound,
    Overloaded,
    RetrievalOptions,
    RetryPolicy,
    SearchFilters,
    Unauthorized,
    ValidationError,
)
from pgcontext_client import errors as client_errors

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.live import live_service

pytestmark = pytest.mark.integration


class Recorder:
    """An httpx event hook pair: the requests sent and the statuses received, in order."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.statuses: list[int] = []

    def hooks(self) -> dict[str, list[Any]]:
        return {"request": [self.requests.append], "response": [lambda r: self.statuses.append(r.status_code)]}

    async def ahooks_request(self, request: httpx.Request) -> None:
        self.requests.append(request)

    async def ahooks_response(self, response: httpx.Response) -> None:
        self.statuses.append(response.status_code)


async def test_memories_search_hot_feedback_export_and_erasure(live_url: str, tenant: Tenant) -> None:
    agent = f"client-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        one = pg.create_memory("The user prefers dark roast coffee.", agent_id=agent, importance=0.9,
                               metadata={"topic": "coffee"}, occurred_at=datetime(2024, 5, 1, tzinfo=UTC))
        batch = pg.create_memories([MemoryIn(text="The espresso machine is on the third floor.", agent_id=agent),
                                    MemoryIn(text="Invoices go out on the first business day.", agent_id=agent,
                                             kind="policy", pinned=True)])
        assert len(one.ids) == 1 and len(batch.ids) == 2
        memory = pg.get_memory(one.ids[0])
        assert memory.text == "The user prefers dark roast coffee." and memory.agent_id == agent
        assert memory.importance == pytest.approx(0.9) and memory.metadata == {"topic": "coffee"}
        assert memory.occurred_at == datetime(2024, 5, 1, tzinfo=UTC)

        page = pg.list_memories(agent_id=agent, limit=2)
        assert len(page.items) == 2 and page.next_cursor is not None
        rest = pg.list_memories(agent_id=agent, limit=2, cursor=page.next_cursor)
        assert {m.id for m in page.items + rest.items} == {*one.ids, *batch.ids}
        assert [m.id for m in pg.list_memories(agent_id=agent, metadata={"topic": "coffee"}).items] == one.ids
        assert [m.id for m in pg.list_memories(agent_id=agent, kind="policy").items] == [batch.ids[1]]

        updated = pg.update_memory(batch.ids[0], text="The espresso machine moved to the fourth floor.",
                                   importance=0.7)
        assert updated.text.endswith("fourth floor.") and updated.importance == pytest.approx(0.7)
        assert updated.kind == "fact"  # untouched fields stay

        found = pg.search("espresso machine floor", filters=SearchFilters(agent_id=agent), limit=5)
        assert found.results and found.results[0].id == batch.ids[0]
        assert found.strategy in {"hybrid", "lexical", "semantic", "lexical_first"}
        lexical = pg.search("espresso", strategy="lexical", filters=SearchFilters(agent_id=agent))
        assert lexical.results[0].lexical_rank == 1 and lexical.results[0].semantic_rank is None

        hot = pg.hot_set(agent)
        assert hot.agent_id == agent and batch.ids[1] in {m.id for m in hot.items}  # pinned

        fb = pg.feedback({one.ids[0]: True, uuid4(): False})
        assert [u.id for u in fb.updated] == one.ids and fb.updated[0].usefulness > 0 and len(fb.not_found) == 1

        lines = list(pg.export(agent))
        counts = {"directive": 0, "document": 0, "conversation": 0, "memory": 3, "chunk": 0,
                  "event": 4}  # events: 3 writes, 1 update
        assert lines[0]["type"] == "export" and lines[-1] == {"type": "end", "counts": counts}

        pg.delete_memory(batch.ids[1])
        with pytest.raises(NotFound):
            pg.get_memory(batch.ids[1])
        erased = pg.erase_agent(agent)
        assert erased.agent_id == agent and erased.deleted == 2
        assert pg.erase_agent(agent).deleted == 0
        assert pg.list_memories(agent_id=agent).items == []


async def test_duplicates_keys_history_and_undo(live_url: str, tenant: Tenant) -> None:
    agent = f"client-facts-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        first = pg.create_memory("The user lives in Paris.", agent_id=agent, key="user.city",
                                 occurred_at=datetime(2023, 1, 1, tzinfo=UTC))
        assert first.items[0].status == "created"
        merged = pg.create_memory("the user lives in Paris", agent_id=agent, key="user.city")
        assert merged.items[0].status == "merged" and merged.items[0].id == first.ids[0]
        moved = pg.create_memory("The user lives in Rome.", agent_id=agent, key="user.city",
                                 occurred_at=datetime(2024, 1, 1, tzinfo=UTC))
        assert moved.items[0].status == "superseded" and moved.items[0].superseded == first.ids
        assert [m.id for m in pg.list_memories(agent_id=agent).items] == moved.ids
        old = pg.list_memories(agent_id=agent, as_of=datetime(2023, 6, 1, tzinfo=UTC)).items
        assert [m.id for m in old] == first.ids and old[0].current is False and old[0].seen_count == 2
        events = pg.memory_history(first.ids[0]).items
        assert [e.event for e in events] == ["created", "merged", "superseded"]
        undone = pg.undo_event(first.ids[0], events[1].id, reason="not the same")
        assert undone.restored is not None and undone.undone == events[1].id
        assert pg.org_settings().on_duplicate in ("merge", "keep", "reject")


async def test_directives_assembly_and_documents_with_the_async_client(live_url: str, tenant: Tenant) -> None:
    agent = f"client-{uuid4().hex[:8]}"
    async with AsyncClient(live_url, tenant.key) as pg:
        first = await pg.put_directive(agent, "Answer in one sentence.")
        second = await pg.put_directive(agent, "Answer in one short sentence.")
        assert (first.version, second.version) == (1, 2)
        assert (await pg.get_directive(agent)).content == "Answer in one short sentence."
        ids = (await pg.create_memories([MemoryIn(text="The user prefers dark roast coffee.", agent_id=agent),
                                         MemoryIn(text="The user is allergic to oat milk.", agent_id=agent)])).ids

        ctx = await pg.assemble(agent, "what coffee should I order for them?", max_context_tokens=2000,
                                recent_messages=[{"role": "user", "content": "Order me a coffee."}],
                                retrieval=RetrievalOptions(strategy="lexical"))
        assert "<directive>" in ctx.context and "Answer in one short sentence." in ctx.context
        assert "dark roast" in ctx.context and "user: Order me a coffee." in ctx.context
        assert set(ctx.refs.values()) <= set(ids) and ids[0] in ctx.refs.values()
        assert ctx.budget.max_context_tokens == 2000 and ctx.budget.context_tokens > 0
        assert ctx.degradation_level in {"L0", "L1"} and ctx.directive is not None
        used = {m.id: m for m in ctx.memories_used}
        assert used[ids[0]].scores.relevance > 0 and used[ids[0]].justification
        selective = await pg.assemble(agent, "what coffee?", selective=True)
        assert selective.budget.mode == "selective" and selective.budget.max_context_tokens is None

        await pg.delete_directive(agent)
        with pytest.raises(NotFound) as missing:
            await pg.get_directive(agent)
        assert missing.value.code == "not_found" and missing.value.request_id

        collection = f"c-{uuid4().hex[:8]}"
        files = [FileIn(path="pkg/brew.py", content="def brew(beans):\n    return grind(beans)\n"),
                 FileIn(path="README.md", content="# Brewing\n\nUse dark roast.\n", metadata={"team": "cafe"})]
        ingested = await pg.ingest_documents(files, collection=collection)
        assert ingested.created == 2 and ingested.chunks_written > 0
        again = await pg.ingest_documents(files, collection=collection)
        assert again.unchanged == 2 and again.chunks_written == 0
        listing = await pg.list_documents(collection=collection)
        assert sorted(d.path for d in listing.items) == ["README.md", "pkg/brew.py"]
        assert (await pg.list_documents(collection=collection, path_prefix="pkg/")).items[0].path == "pkg/brew.py"
        index = await pg.documents_index()
        assert index.files >= 2 and collection in index.collections
        lookup = await pg.search("brew", modes=["symbol", "path"], filters=SearchFilters(source_prefix="pkg/"))
        assert lookup.strategy == "modes" and lookup.results[0].path == "pkg/brew.py"
        removed = await pg.delete_documents(["pkg/brew.py", "nope.py"], collection=collection)
        assert removed.deleted == ["pkg/brew.py"] and removed.missing == ["nope.py"]
        with pytest.raises(NotFound) as gone:
            await pg.delete_documents(["pkg/brew.py"], collection=collection)
        assert gone.value.code == "document_not_found"

        assert (await pg.health()).status == "ok"
        ready = await pg.ready()
        assert ready.status == "ok" and ready.checks == {"postgres": "ok", "redis": "ok", "warm": "ok"}
        lines = [line async for line in pg.export(agent)]
        assert lines[-1]["type"] == "end" and lines[-1]["counts"]["memory"] == 2


async def test_an_async_client_serves_one_event_loop_after_another(live_url: str, tenant: Tenant) -> None:
    """``asyncio.run`` twice with one client (a notebook's cells, a framework's worker threads): the
    second loop gets connections of its own instead of the first loop's dead ones."""
    agent = f"loops-{uuid4().hex[:8]}"
    pg = AsyncClient(live_url, tenant.key)

    def two_loops() -> list[str]:
        asyncio.run(pg.put_directive(agent, "First."))
        asyncio.run(pg.put_directive(agent, "Second."))
        return [asyncio.run(pg.get_directive(agent)).content]

    assert await asyncio.to_thread(two_loops) == ["Second."]
    await pg.aclose()


async def test_conversations_append_list_assemble_and_delete(live_url: str, tenant: Tenant) -> None:
    agent, chat = f"client-{uuid4().hex[:8]}", f"chat-{uuid4().hex[:8]}"
    turns: list[MessageIn | dict[str, Any]] = [
        MessageIn(content="What do you do to unwind after work?", speaker="Melanie", session_id="s1",
                  message_id="t1", occurred_at=datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        {"content": "I go swimming with the kids every evening.", "speaker": "Caroline", "session_id": "s1",
         "message_id": "t2"},
        {"content": "What should I bring to the pool?", "role": "user", "message_id": "t3"}]
    async with AsyncClient(live_url, tenant.key) as pg:
        out = await pg.append_messages(chat, turns, agent_id=agent)
        assert out.created and out.agent_id == agent and [m.position for m in out.messages] == [1, 2, 3]
        again = await pg.append_messages(chat, turns[:2])  # a retry: nothing written twice
        assert [m.created for m in again.messages] == [False, False] and again.message_count == 3
        page = await pg.list_messages(chat, limit=2)
        rest = await pg.list_messages(chat, cursor=page.next_cursor)
        assert [m.speaker for m in page.items] == ["Melanie", "Caroline"] and rest.items[0].role == "user"
        assert page.items[0].occurred_at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
        assert [m.position for m in (await pg.list_messages(chat, session_id="s1")).items] == [1, 2]
        conversation = await pg.get_conversation(chat)
        assert conversation.message_count == 3 and conversation.agent_id == agent
        assert [c.id for c in (await pg.list_conversations(agent_id=agent)).items] == [chat]

        found = await pg.search("What does Caroline do to unwind?", filters=SearchFilters(agent_id=agent))
        reply = next(r for r in found.results if r.id == out.messages[1].id)
        assert reply.kind == "message" and reply.message is not None and reply.message.speaker == "Caroline"
        assert (reply.message.conversation_id, reply.message.position) == (chat, 2)
        ctx = await pg.assemble(agent, "What does Caroline do to unwind?", max_context_tokens=1000,
                                retrieval=RetrievalOptions(strategy="lexical"))
        assert "Caroline: I go swimming with the kids every evening." in ctx.context
        history = await pg.assemble(agent, "What does Caroline do to unwind?", max_context_tokens=1000,
                                    retrieval=RetrievalOptions(strategy="lexical"), conversation_id=chat,
                                    history_turns=2)
        assert out.messages[1].id not in {m.id for m in history.memories_used}
        assert {d.id: d.reason for d in history.dropped}[out.messages[1].id] == "in_history"

        newest = await pg.list_messages(chat, limit=1, order="desc")
        assert [m.message_id for m in newest.items] == ["t3"] and newest.next_cursor
        with pytest.raises(Conflict) as changed:
            await pg.truncate_conversation(chat, 3, message_count=2)
        assert changed.value.code == "conversation_changed" and changed.value.details == {"message_count": 3}
        with pytest.raises(Conflict) as mismatch:
            await pg.truncate_conversation(chat, 3, agent_id="someone-else")
        assert mismatch.value.code == "conversation_agent_mismatch" and mismatch.value.details == {"agent_id": agent}
        with pytest.raises(Conflict) as mismatch:
            await pg.delete_conversation(chat, agent_id="someone-else")
        assert mismatch.value.code == "conversation_agent_mismatch"
        cut = await pg.truncate_conversation(chat, 3, message_count=3, agent_id=agent)
        assert (cut.messages_deleted, cut.message_count) == (1, 2)
        deleted = await pg.delete_conversation(chat, agent_id=agent)
        assert deleted.messages_deleted == 2
        with pytest.raises(NotFound):
            await pg.get_conversation(chat)
    with Client(live_url, tenant.key) as sync:
        with pytest.raises(Conflict) as taken:
            sync.append_messages(chat, [MessageIn(content="hello", role="user")], agent_id=agent)
            sync.append_messages(chat, [MessageIn(content="hello again", role="user")], agent_id="someone-else")
        assert taken.value.code == "conversation_agent_mismatch"
        assert sync.delete_conversation(chat).messages_deleted == 1


async def test_writes_carry_an_idempotency_key_and_a_replay_creates_nothing(live_url: str, tenant: Tenant) -> None:
    recorder = Recorder()
    agent = f"client-{uuid4().hex[:8]}"
    with httpx.Client(base_url=live_url, headers={"Authorization": f"Bearer {tenant.key}"},
                      event_hooks=recorder.hooks()) as http, Client(http=http) as pg:
        first = pg.create_memory("Remember the milk.", agent_id=agent)
        second = pg.create_memory("Remember the milk.", agent_id=agent, on_duplicate="keep")  # not merged
        keys = [r.headers["Idempotency-Key"] for r in recorder.requests]
        assert len(set(keys)) == 2 and first.ids != second.ids  # a new key per call: two memories
        pg.get_memory(first.ids[0])
        assert "Idempotency-Key" not in recorder.requests[-1].headers  # reads carry none

        mine = str(uuid4())
        once = pg.create_memory("Remember the eggs.", agent_id=agent, idempotency_key=mine)
        replay = pg.create_memory("Remember the eggs.", agent_id=agent, idempotency_key=mine)
        assert replay.ids == once.ids
        assert len(pg.list_memories(agent_id=agent).items) == 3
        with pytest.raises(Conflict) as conflict:
            pg.create_memory("Remember the bread.", agent_id=agent, idempotency_key=mine)
        assert conflict.value.status == 409 and conflict.value.request_id


async def test_errors_are_typed_and_carry_code_message_details_and_request_id(live_url: str, tenant: Tenant) -> None:
    with Client(live_url, "pgc_not_a_key") as anonymous, pytest.raises(Unauthorized) as unauthorized:
        anonymous.list_memories()
    assert unauthorized.value.status == 401 and unauthorized.value.request_id

    with Client(live_url, tenant.key) as pg:
        missing = uuid4()
        with pytest.raises(NotFound) as not_found:
            pg.get_memory(missing)
        error = not_found.value
        assert (error.status, error.code) == (404, "not_found") and str(missing) in error.message
        assert error.request_id is not None and len(error.request_id) >= 16 and error.request_id in str(error)

        with pytest.raises(ValidationError) as invalid:
            pg.create_memory("x", agent_id="not a valid agent id!")
        assert invalid.value.status == 400 and invalid.value.code == "validation_error"

        with pytest.raises(client_errors.BadRequest) as bad:
            pg.assemble("a", "q", model="no-such-model", max_context_tokens=1000)
        assert bad.value.code == "unknown_model" and "no-such-model" in bad.value.message

        with pytest.raises(client_errors.Unprocessable) as small:
            pg.assemble("a", "q", max_context_tokens=5)
        assert small.value.code == "context_budget_too_small" and small.value.status == 422

    with Client(f"http://127.0.0.1:{_closed_port()}", tenant.key, retry=RetryPolicy(attempts=2, backoff_s=0.01)) as pg:
        with pytest.raises(client_errors.TransportError) as down:
            pg.health()
        assert isinstance(down.value.__cause__, httpx.ConnectError)


def _closed_port() -> int:
    from service.embedded.postgres import free_port

    return free_port()  # nothing listens there


async def test_the_services_own_503_overloaded_is_retried_after_retry_after(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """One assembly at a time and no room to wait: a concurrent second one is refused with 503 ``overloaded``
    and ``Retry-After: 1``; the client waits that second and tries again, and both answer."""
    agent = f"client-{uuid4().hex[:8]}"
    with live_service(settings, endpoints, embedder, retrieval={"branch_delay_ms": 600},
                      assembly={"max_in_flight": 1, "max_queued": 0}) as url:
        recorder = Recorder()
        http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {tenant.key}"}, timeout=30,
                                 event_hooks={"request": [recorder.ahooks_request],
                                              "response": [recorder.ahooks_response]})
        async with AsyncClient(http=http) as pg:
            await pg.create_memory("The espresso machine is on the third floor.", agent_id=agent)
            recorder.statuses.clear()
            started = time.monotonic()
            both = await asyncio.gather(*(pg.assemble(agent, "where is the espresso machine?",
                                                      max_context_tokens=2000) for _ in range(2)))
            elapsed = time.monotonic() - started
            assert all("espresso" in ctx.context for ctx in both)
            assert 503 in recorder.statuses and recorder.statuses.count(200) == 2, recorder.statuses
            assert elapsed >= 1.0  # the refused one waited the service's Retry-After (1 s)

            no_retry = AsyncClient(http=http, retry=RetryPolicy(attempts=1))
            results = await asyncio.gather(*(no_retry.assemble(agent, "espresso?", max_context_tokens=2000)
                                             for _ in range(2)), return_exceptions=True)
            refused = [r for r in results if isinstance(r, Exception)]
            assert len(refused) == 1 and isinstance(refused[0], Overloaded), results
            assert refused[0].code == "overloaded" and refused[0].retry_after_s == 1 and refused[0].status == 503
        await http.aclose()

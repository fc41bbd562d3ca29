"""Conversations under concurrent requests, on real Postgres + Redis: two deletes of one conversation at
once, and retried appends that find their messages already written."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import numpy as np
import numpy.typing as npt
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.conversations import store
from service.db import TenantTx
from service.db.queries import query
from service.embeddings import Embedder, EmbeddingError
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_conversations import TURNS, all_messages, append, held_until_waited_on
from tests.integration.test_memories_api import assert_error

LONG = 2500
"""Messages of the long conversation: more than one batch of a delete (1000)."""


async def _lengthen(owner_dsn: str, org_id: UUID, conversation: str, total: int) -> None:
    """Grow a one-message conversation to ``total`` messages, as appends would leave it (copies of its
    first message at the next positions, and its count), without embedding thousands of texts."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        async with conn.transaction():
            await conn.execute(
                "INSERT INTO memories (org_id, id, agent_id, kind, text, embedding, conversation_id, position) "
                "SELECT org_id, pgcontext_uuidv7(), agent_id, kind, text || ' ' || n, embedding, conversation_id, n "
                "  FROM memories, generate_series(2, $3::int) AS n "
                " WHERE org_id = $1 AND conversation_id = $2 AND position = 1", org_id, conversation, total)
            await conn.execute(query("conversations.advance"), org_id, conversation, total)
    finally:
        await conn.close()


def _delete_under_way(owner_dsn: str, org_id: UUID, conversation: str, holding: threading.Event) -> None:
    """Another delete of ``conversation`` caught half-way: it has removed one batch of its messages and
    commits once another session waits for it (on a thread and loop of its own: the test client runs a
    request to its end before its caller's loop goes on)."""
    async def run() -> None:
        conn = await asyncpg.connect(owner_dsn)
        try:
            async with conn.transaction():
                await conn.fetchval(query("conversations.delete_messages"), org_id, conversation, 1000)
                holding.set()
                await held_until_waited_on(conn, "the other delete")
        finally:
            await conn.close()

    asyncio.run(run())


async def test_a_delete_racing_another_counts_every_message_the_conversation_held(
        client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    await append(client, tenant, "twice-deleted", TURNS[:1], agent_id="coach")
    await _lengthen(owner_dsn, tenant.org_id, "twice-deleted", LONG)
    r = await client.get("/v1/conversations/twice-deleted", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["message_count"] == LONG, r.text
    holding = threading.Event()
    racer = asyncio.get_running_loop().run_in_executor(
        None, _delete_under_way, owner_dsn, tenant.org_id, "twice-deleted", holding)
    assert await asyncio.to_thread(holding.wait, 30)
    r = await client.delete("/v1/conversations/twice-deleted", headers=tenant.headers)
    await racer
    # once 1500: the messages the other delete had removed were missing from the count
    assert r.status_code == 200 and r.json() == {"conversation_id": "twice-deleted", "messages_deleted": LONG}, r.text
    assert_error(await client.get("/v1/conversations/twice-deleted", headers=tenant.headers), 404)
    conn = await asyncpg.connect(owner_dsn)
    try:
        left = await conn.fetchval("SELECT count(*) FROM memories WHERE org_id = $1 AND conversation_id = $2",
                                   tenant.org_id, "twice-deleted")
    finally:
        await conn.close()
    assert left == 0


async def test_two_deletes_of_a_long_conversation_remove_it_in_bounded_batches(
        client: AsyncTestClient[Any], live_url: str, tenant: Tenant, owner_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    await append(client, tenant, "long-twice", TURNS[:1], agent_id="coach")
    await _lengthen(owner_dsn, tenant.org_id, "long-twice", LONG)
    monkeypatch.setattr(store, "_DELETE_BATCH", 100)
    removed: list[int] = []  # the messages each removal statement took
    fetchval = TenantTx.fetchval

    async def counted(tx: TenantTx, name: str, *args: Any) -> Any:
        if name == "conversations.delete":  # the row's cascade: the messages still there go with it
            removed.append(int(await fetchval(tx, "conversations.delete_messages", *args, None)))
        value = await fetchval(tx, name, *args)
        if name == "conversations.delete_messages":
            removed.append(int(value))
        return value

    monkeypatch.setattr(TenantTx, "fetchval", counted)
    async with httpx.AsyncClient(base_url=live_url, headers=tenant.headers, timeout=60) as http:
        answers = await asyncio.gather(*(http.delete("/v1/conversations/long-twice") for _ in range(2)))
    # once: the second delete, finding a short batch, removed what was left in one statement (100K
    # messages ran into the statement timeout)
    assert sorted(r.status_code for r in answers) == [200, 404], [r.text for r in answers]
    assert next(r.json() for r in answers if r.status_code == 200)["messages_deleted"] == LONG
    assert max(removed) <= 100 and sum(removed) == LONG, removed


class SwitchedEmbedder:
    """The real embedder, failing every call while ``broken`` is set; ``before``, when set, runs once
    before the next call embeds (what happens elsewhere while an append is embedding)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim, self.broken = inner, "switched", inner.dim, False
        self.before: Any = None
        self.embedded: list[str] = []

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.broken:
            raise EmbeddingError("provider down")
        if self.before is not None:
            before, self.before = self.before, None
            await before()
        self.embedded += texts
        return await self.inner.embed(texts)

    async def aclose(self) -> None:
        return None


@contextlib.asynccontextmanager
async def switched_client(settings: Settings, endpoints: Endpoints,
                          embedder: SwitchedEmbedder) -> AsyncIterator[AsyncTestClient[Any]]:
    async with AsyncTestClient(app=create_app(settings, endpoints, embedder=embedder)) as client:
        yield client


async def test_a_retried_append_embeds_nothing_it_already_wrote(settings: Settings, endpoints: Endpoints,
                                                                embedder: Embedder, tenant: Tenant) -> None:
    switched = SwitchedEmbedder(embedder)
    sent = [{**t, "message_id": f"m{i}"} for i, t in enumerate(TURNS)]
    async with switched_client(settings, endpoints, switched) as client:
        first = await append(client, tenant, "resent", sent[:3], agent_id="coach")
        switched.broken = True  # the provider is down: only what is already written can be answered
        again = await append(client, tenant, "resent", sent[:3])
        assert again["messages"] == [m | {"created": False} for m in first["messages"]], again
        r = await client.post("/v1/conversations/resent/messages", headers=tenant.headers, json={"messages": sent})
        assert_error(r, 503, "embedding_unavailable")  # the fourth is new: it needs its vector
        assert len(await all_messages(client, tenant, "resent")) == 3
        switched.broken, switched.embedded = False, []
        out = await append(client, tenant, "resent", sent)  # the whole transcript again, one turn longer
        assert [m["created"] for m in out["messages"]] == [False, False, False, True]
        assert [m["position"] for m in out["messages"]] == [1, 2, 3, 4] and out["message_count"] == 4
        assert switched.embedded == [f"{TURNS[3]['speaker']}: {TURNS[3]['content']}"]
        changed = [{**sent[0], "content": "Other words."}, {"content": "A new turn."}]
        r = await client.post("/v1/conversations/resent/messages", headers=tenant.headers, json={"messages": changed})
        assert_error(r, 409, "message_id_reused")
    assert len(switched.embedded) == 1  # a reused message_id is refused before anything is embedded


async def test_an_append_whose_conversation_is_deleted_while_it_embeds_writes_every_message(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, owner_dsn: str) -> None:
    switched = SwitchedEmbedder(embedder)
    sent = [{**t, "message_id": f"m{i}"} for i, t in enumerate(TURNS[:2])]

    async def delete_it() -> None:
        conn = await asyncpg.connect(owner_dsn)
        try:
            await conn.execute("DELETE FROM conversations WHERE org_id = $1 AND id = 'vanishing'", tenant.org_id)
        finally:
            await conn.close()

    async with switched_client(settings, endpoints, switched) as client:
        await append(client, tenant, "vanishing", sent[:1], agent_id="coach")
        switched.before = delete_it  # while the second turn is embedded, the conversation goes
        out = await append(client, tenant, "vanishing", sent, agent_id="coach")
        assert out["created"] is True and out["message_count"] == 2
        assert [(m["position"], m["created"]) for m in out["messages"]] == [(1, True), (2, True)]
        listed = await all_messages(client, tenant, "vanishing")
        assert [(m["message_id"], m["content"]) for m in listed] == [("m0", TURNS[0]["content"]),
                                                                      ("m1", TURNS[1]["content"])]

"""Concurrent changes of facts over real HTTP (a uvicorn server: the in-process test client answers one
request at a time) on real Postgres + Redis: every path takes the agent scopes' locks before any row's,
so PATCHes, writes and undos of one scope never deadlock; an event is undone once however many undo
it at once; a keyed memory moved onto a key its new agent holds is refused with a clear code."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.embeddings.lanes import lanes_of
from service.memories.facts import dedup, undo
from service.memories.facts import patch as fact_patch
from service.memories.facts import write as fact_write
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.live import live_service
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all


class Rendezvous:
    """Hold each of the first ``parties`` callers until all have arrived, or ``timeout`` passed (a caller
    waiting for a lock another holds never arrives), so concurrent requests go for their next lock
    together: where each holds a lock the other wants, that is a deadlock."""

    def __init__(self, parties: int, timeout: float = 1.5) -> None:
        self.parties, self.timeout, self.arrived = parties, timeout, 0
        self.all_here: asyncio.Event | None = None

    async def arrive(self) -> None:
        if self.all_here is None:  # made on the server's event loop
            self.all_here = asyncio.Event()
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_here.set()
        if self.arrived <= self.parties:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.all_here.wait(), self.timeout)

    def wrap(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def held(*args: Any, **kwargs: Any) -> Any:
            await self.arrive()
            return await fn(*args, **kwargs)
        return held


@pytest.fixture
async def http(settings: Settings, endpoints: Endpoints, embedder: Embedder,
               tenant: Tenant) -> Any:
    with live_service(settings, endpoints, embedder) as url:
        async with httpx.AsyncClient(base_url=url, headers=tenant.headers, timeout=30) as client:
            yield client


async def created(http: httpx.AsyncClient, body: dict[str, Any]) -> str:
    r = await http.post("/v1/memories", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["ids"][0])


async def test_concurrent_patches_swapping_texts_do_not_deadlock(http: httpx.AsyncClient,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Each PATCH holds its first lock while the other catches up: taken in one order (scope, then row)
    one waits for the other; taken row first, each then waits for the other's (40P01, a 503)."""
    original = fact_write.org_policy  # what the PATCH path calls once it holds its first lock
    for round_ in range(3):
        monkeypatch.setattr(fact_patch, "org_policy", Rendezvous(2).wrap(original))
        agent = f"swap{round_}"
        x = await created(http, {"text": "The user drinks green tea.", "agent_id": agent})
        y = await created(http, {"text": "The user plays the violin.", "agent_id": agent})
        results = await asyncio.gather(http.patch(f"/v1/memories/{x}", json={"text": "the user plays the violin"}),
                                       http.patch(f"/v1/memories/{y}", json={"text": "the user drinks green tea"}))
        assert [r.status_code for r in results] == [200, 200], [r.text for r in results]
        assert sorted(r.json()["status"] for r in results) == ["merged", "updated"]
        (left,) = (await http.get("/v1/memories", params={"agent_id": agent})).json()["items"]
        assert left["seen_count"] == 2  # one merged into the other


async def test_a_patch_racing_a_duplicate_write_does_not_deadlock(http: httpx.AsyncClient,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The PATCH of Y's text and a write duplicating Y meet after their first lock (the PATCH at its
    policy lookup, the write at its duplicate search), then each goes for the other's."""
    policy, find = fact_write.org_policy, dedup.find
    for round_ in range(3):
        meet = Rendezvous(2)
        monkeypatch.setattr(fact_patch, "org_policy", meet.wrap(policy))
        agent = f"race{round_}"
        y = await created(http, {"text": "The user reads science fiction.", "agent_id": agent})
        x = await created(http, {"text": "The user keeps two cats.", "agent_id": agent})
        monkeypatch.setattr(dedup, "find", meet.wrap(find))
        results = await asyncio.gather(
            http.patch(f"/v1/memories/{y}", json={"text": "the user plays chess on sundays"}),
            http.post("/v1/memories", json={"text": "the user reads science fiction!", "agent_id": agent}),
            http.patch(f"/v1/memories/{x}", json={"importance": 0.9}))
        monkeypatch.setattr(dedup, "find", find)
        assert [r.status_code for r in results] == [200, 201, 200], [r.text for r in results]


async def test_concurrent_undos_of_one_merge_undo_it_once(http: httpx.AsyncClient,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The four undos all pass the first look at the event (not undone yet) before any of them writes."""
    meet = Rendezvous(4)

    class HeldLanes:
        def __init__(self, services: Any) -> None:
            self.lanes = lanes_of(services)

        async def embed_bulk(self, *args: Any) -> Any:
            await meet.arrive()
            return await self.lanes.embed_bulk(*args)

    monkeypatch.setattr(undo, "lanes_of", HeldLanes)
    kept = await created(http, {"text": "Omar is allergic to shellfish.", "agent_id": "u4"})
    await created(http, {"text": "omar is allergic to shellfish", "agent_id": "u4"})
    event = (await http.get(f"/v1/memories/{kept}/history")).json()["items"][-1]
    results = await asyncio.gather(*(http.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={})
                                     for _ in range(4)))
    assert sorted(r.status_code for r in results) == [200, 409, 409, 409], [r.text for r in results]
    assert {r.json()["error"]["code"] for r in results if r.status_code == 409} == {"already_undone"}
    assert len((await http.get("/v1/memories", params={"agent_id": "u4"})).json()["items"]) == 2


async def test_moving_a_keyed_memory_onto_a_taken_key_is_refused(client: AsyncTestClient[Any],
                                                                 tenant: Tenant) -> None:
    (mine,) = (await write(client, tenant, {"text": "The user works at Acme.", "agent_id": "k1",
                                            "key": "user.job"}))["ids"]
    (theirs,) = (await write(client, tenant, {"text": "The user works at Globex.", "agent_id": "k2",
                                              "key": "user.job"}))["ids"]
    r = await client.patch(f"/v1/memories/{mine}", json={"agent_id": "k2"}, headers=tenant.headers)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "key_taken" and error["details"] == {"field": "agent_id", "key": "user.job",
                                                                 "id": theirs}
    assert "memories_current_key" not in r.text
    r = await client.patch(f"/v1/memories/{mine}", json={"agent_id": "k3"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["agent_id"] == "k3", r.text
    assert [e["event"] for e in await history(client, tenant, mine)] == ["created", "updated"]
    assert [m["id"] for m in await list_all(client, tenant, agent_id="k3")] == [mine]

"""Supersession on two clocks over HTTP on real Postgres + Redis: a key's newest value (by event time)
is its only current memory, also under concurrent writers (the database's partial unique index holds it);
late values are kept as history; ``supersedes`` retires named memories; list answers ``as_of`` and
``include_superseded``."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all


async def test_a_newer_value_retires_the_current_one(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    paris = (await write(client, tenant, {"text": "The user lives in Paris.", "agent_id": "u", "key": "user.city",
                                          "occurred_at": "2023-01-01T00:00:00Z"}))["items"][0]
    london = (await write(client, tenant, {"text": "The user lives in London.", "agent_id": "u", "key": "user.city",
                                           "occurred_at": "2024-06-01T00:00:00Z"}))["items"][0]
    assert paris["status"] == "created" and london["status"] == "superseded"
    assert london["superseded"] == [paris["id"]]
    assert [m["id"] for m in await list_all(client, tenant, agent_id="u")] == [london["id"]]
    every = {m["id"]: m for m in await list_all(client, tenant, agent_id="u", include_superseded="true")}
    assert every[paris["id"]]["current"] is False and every[paris["id"]]["superseded_by"] == london["id"]
    assert every[paris["id"]]["valid_until"].startswith("2024-06-01")
    assert every[london["id"]]["current"] is True and every[london["id"]]["valid_until"] is None
    as_of = await list_all(client, tenant, agent_id="u", as_of="2023-07-01T00:00:00Z")
    assert [m["id"] for m in as_of] == [paris["id"]]
    assert (await history(client, tenant, paris["id"]))[-1]["event"] == "superseded"
    # the same value again is a duplicate of the current one, not a new value
    again = (await write(client, tenant, {"text": "the user lives in London", "agent_id": "u",
                                          "key": "user.city"}))["items"][0]
    assert again["status"] == "merged" and again["id"] == london["id"]


async def test_a_late_older_value_does_not_retire_a_newer_one(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    def value(text: str, at: str) -> dict[str, Any]:
        return {"text": text, "agent_id": "late", "key": "user.employer", "occurred_at": at}

    acme = (await write(client, tenant, value("Works at Acme.", "2020-01-01T00:00:00Z")))["items"][0]
    globex = (await write(client, tenant, value("Works at Globex.", "2022-01-01T00:00:00Z")))["items"][0]
    initech = (await write(client, tenant, value("Works at Initech.", "2021-01-01T00:00:00Z")))["items"][0]
    assert initech["status"] == "created" and initech["current"] is False
    assert initech["superseded_by"] == globex["id"] and initech["superseded"] == []
    assert [m["id"] for m in await list_all(client, tenant, agent_id="late")] == [globex["id"]]
    timeline = {"2020-06-01": acme["id"], "2021-06-01": initech["id"], "2022-06-01": globex["id"]}
    for day, expected in timeline.items():
        got = await list_all(client, tenant, agent_id="late", as_of=f"{day}T00:00:00Z")
        assert [m["id"] for m in got] == [expected], day
    assert await list_all(client, tenant, agent_id="late", as_of="2019-01-01T00:00:00Z") == []


async def test_explicit_supersedes(client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    old = (await write(client, tenant, {"text": "The user prefers dark roast.", "agent_id": "b"}))["ids"][0]
    new = (await write(client, tenant, {"text": "The user now prefers medium roast.", "agent_id": "b",
                                        "supersedes": [old]}))["items"][0]
    assert new["status"] == "superseded" and new["superseded"] == [old]
    assert [m["text"] for m in await list_all(client, tenant, agent_id="b")] == ["The user now prefers medium roast."]
    r = await client.post("/v1/memories", json={"text": "Light roast then.", "agent_id": "b", "supersedes": [old]},
                          headers=tenant.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "already_superseded"
    r = await client.post("/v1/memories", json={"text": "Another org's.", "supersedes": [new["id"]]},
                          headers=other_tenant.headers)
    assert r.status_code == 422 and r.json()["error"]["code"] == "unknown_memory"
    r = await client.post("/v1/memories", json={"text": "Back in 2001 it was tea.", "agent_id": "b",
                                                "occurred_at": "2001-01-01T00:00:00Z", "supersedes": [new["id"]]},
                          headers=tenant.headers)
    assert r.status_code == 422 and r.json()["error"]["code"] == "supersedes_newer"
    assert len(await list_all(client, tenant, agent_id="b")) == 1


async def test_valid_until_ends_a_fact(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    written = await write(client, tenant, {"text": "The spring sale gives 20% off.", "agent_id": "shop",
                                           "occurred_at": "2024-03-01T00:00:00Z",
                                           "valid_until": "2024-04-01T00:00:00Z"})
    offer = written["ids"][0]
    assert written["items"][0]["current"] is False, written
    assert await list_all(client, tenant, agent_id="shop") == []
    # its valid time has ended: not current, wherever it is read
    r = await client.get(f"/v1/memories/{offer}", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["current"] is False
    [retired] = await list_all(client, tenant, agent_id="shop", include_superseded="true")
    assert retired["id"] == offer and retired["current"] is False
    r = await client.post("/v1/memories/search", json={"query": "spring sale", "filters": {
        "agent_id": "shop", "include_superseded": True}}, headers=tenant.headers)
    assert [(x["id"], x["current"]) for x in r.json()["results"]] == [(offer, False)], r.json()
    assert [m["id"] for m in await list_all(client, tenant, agent_id="shop", as_of="2024-03-15T00:00:00Z")] == [offer]
    r = await client.patch(f"/v1/memories/{offer}", json={"valid_until": None}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["valid_until"] is None and r.json()["current"] is True
    assert [m["id"] for m in await list_all(client, tenant, agent_id="shop")] == [offer]
    r = await client.patch(f"/v1/memories/{offer}", json={"valid_until": "2020-01-01T00:00:00Z"},
                           headers=tenant.headers)
    assert r.status_code == 422
    r = await client.post("/v1/memories", json={"text": "x", "occurred_at": "2024-03-01T00:00:00Z",
                                                "valid_until": "2024-02-01T00:00:00Z"}, headers=tenant.headers)
    assert r.status_code == 422


@pytest.mark.parametrize("writers", [8, 12])
async def test_concurrent_writers_of_one_key_leave_one_current(client: AsyncTestClient[Any], tenant: Tenant,
                                                               writers: int) -> None:
    bodies = [{"text": f"The thermostat is set to {18 + i} degrees.", "agent_id": "home", "key": "home.thermostat",
               "occurred_at": f"2024-01-01T00:{i:02d}:00Z"} for i in range(writers)]
    results = await asyncio.gather(*(write(client, tenant, b) for b in bodies))
    current = await list_all(client, tenant, agent_id="home")
    assert len(current) == 1 and current[0]["text"] == bodies[-1]["text"]  # the newest by event time
    every = await list_all(client, tenant, agent_id="home", include_superseded="true")
    assert len(every) == writers and {r["items"][0]["id"] for r in results} == {m["id"] for m in every}


async def test_the_database_refuses_a_second_current_value(owner_dsn: str, tenant: Tenant) -> None:
    """Without the service's locks, two transactions inserting a current value of one key: the partial
    unique index makes the second wait for the first and then fail."""
    async def insert(conn: asyncpg.Connection, text: str) -> None:
        await conn.execute("INSERT INTO memories (org_id, agent_id, text, key) VALUES ($1, 'db', $2, 'k')",
                           UUID(str(tenant.org_id)), text)

    first, second = await asyncpg.connect(owner_dsn), await asyncpg.connect(owner_dsn)
    try:
        async with first.transaction():
            await insert(first, "one")
            racing = asyncio.ensure_future(_in_tx(second, lambda c: insert(c, "two")))
            await asyncio.sleep(0.3)
            assert not racing.done()  # waits on the first's uncommitted row
        with pytest.raises(asyncpg.UniqueViolationError):
            await racing
    finally:
        await first.close()
        await second.close()


async def _in_tx(conn: asyncpg.Connection, work: Any) -> None:
    async with conn.transaction():
        await work(conn)


@pytest.mark.parametrize("strategy", ["lexical", "semantic", "hybrid", "lexical_first"])
async def test_search_leaves_retired_memories_out_unless_asked(client: AsyncTestClient[Any], tenant: Tenant,
                                                               strategy: str) -> None:
    agent = f"search-{strategy}"
    old = (await write(client, tenant, {"text": "The team standup happens in room Alder.", "agent_id": agent,
                                        "key": "team.standup_room", "occurred_at": "2024-01-01T09:00:00Z"}))["ids"][0]
    new = (await write(client, tenant, {"text": "The team standup happens in room Birch.", "agent_id": agent,
                                        "key": "team.standup_room", "occurred_at": "2024-02-01T09:00:00Z"}))["ids"][0]

    async def search(**filters: Any) -> list[dict[str, Any]]:
        r = await client.post("/v1/memories/search", json={
            "query": "team standup room", "strategy": strategy, "filters": {"agent_id": agent, **filters}},
            headers=tenant.headers)
        assert r.status_code == 200, r.text
        return list(r.json()["results"])

    assert [h["id"] for h in await search()] == [new]
    every = {h["id"]: h for h in await search(include_superseded=True)}
    assert set(every) == {old, new}
    assert every[old]["current"] is False and every[old]["superseded_by"] == new and every[new]["current"] is True
    then = await search(as_of="2024-01-15T00:00:00Z")
    assert [h["id"] for h in then] == [old] and then[0]["current"] is False


async def test_assembly_packs_the_current_value_or_what_was_valid_then(settings: Settings, endpoints: Endpoints,
                                                                       embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        old = (await write(client, tenant, {"text": "The user's favourite tea is jasmine.", "agent_id": "tea",
                                            "key": "user.tea", "occurred_at": "2023-01-01T00:00:00Z"}))["ids"][0]
        new = (await write(client, tenant, {"text": "The user's favourite tea is sencha.", "agent_id": "tea",
                                            "key": "user.tea", "occurred_at": "2024-01-01T00:00:00Z"}))["ids"][0]

        async def assemble(**filters: Any) -> dict[str, Any]:
            r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
                "agent_id": "tea", "query": "which tea does the user like?", "model": "gpt-4o",
                "max_context_tokens": 2000, "retrieval": {"strategy": "lexical", "filters": filters}})
            assert r.status_code == 200, r.text
            return dict(r.json())

        now = await assemble()
        assert {m["id"] for m in now["memories_used"]} == {new}
        then = await assemble(as_of="2023-06-01T00:00:00Z")
        assert {m["id"] for m in then["memories_used"]} == {old}
        assert then["branches"]["hot"]["outcome"] == "skipped"
        every = await assemble(include_superseded=True)
        assert {m["id"] for m in every["memories_used"]} == {old, new}

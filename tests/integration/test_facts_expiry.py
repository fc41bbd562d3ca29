"""Keyed facts and ``expires_at`` over HTTP on real Postgres + Redis: an expired value is forgotten, not
undone, and the purge of expired rows is storage cleanup that changes no answer. Each case is played on
two agents of one org, one of them purged after the value expired, and must answer alike on both."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.live import live_service
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all

EXPIRED = "2020-01-01T00:00:00Z"  # a retention time already past: the value is expired as soon as written
PURGE = Path(__file__).parents[2] / "sql" / "memories" / "purge_expired.sql"
DAYS = ("2021-06-01", "2022-06-01", "2023-03-01", "2023-09-01", "2024-06-01", "2025-06-01")


def city(agent: str, name: str, at: str, **more: Any) -> dict[str, Any]:
    return {"text": f"The user lives in {name}.", "agent_id": agent, "key": "user.city",
            "occurred_at": f"{at}T00:00:00Z", **more}


class Timeline:
    """One agent's key: its writes (id -> name) and every answer a reader can get about it."""

    def __init__(self, client: AsyncTestClient[Any], tenant: Tenant, agent: str) -> None:
        self.client, self.tenant, self.agent = client, tenant, agent
        self.names: dict[str, str] = {}

    async def put(self, name: str, at: str, **more: Any) -> str:
        (item,) = (await write(self.client, self.tenant, city(self.agent, name, at, **more)))["items"]
        self.names[item["id"]] = name
        return str(item["id"])

    def name(self, memory_id: str | None) -> str | None:
        return None if memory_id is None else self.names.get(memory_id, memory_id)

    async def answers(self) -> dict[str, Any]:
        async def texts(**params: Any) -> list[str]:
            return sorted(str(self.name(m["id"])) for m in await list_all(self.client, self.tenant,
                                                                          agent_id=self.agent, **params))

        every = await list_all(self.client, self.tenant, agent_id=self.agent, include_superseded="true")
        found = {self.name(m["id"]) for m in every}
        out: dict[str, Any] = {
            "current": await texts(),
            "as_of": {day: await texts(as_of=f"{day}T00:00:00Z") for day in DAYS},
            "all": sorted((str(self.name(m["id"])), m["current"], self.name(m["superseded_by"]), m["valid_until"])
                          for m in every),
            "history": {self.name(m["id"]): [(e["event"], self.name(e["related_id"]))
                                              for e in await history(self.client, self.tenant, m["id"])]
                        for m in every},
        }
        for filters in ({}, {"include_superseded": True}, {"as_of": "2023-09-01T00:00:00Z"}):
            r = await self.client.post("/v1/memories/search", json={
                "query": "where does the user live", "filters": {"agent_id": self.agent, **filters}},
                headers=self.tenant.headers)
            assert r.status_code == 200, r.text
            out.setdefault("search", []).append(sorted(str(self.name(h["id"])) for h in r.json()["results"]))
        for memory_id, name in self.names.items():  # what is gone reads as gone
            r = await self.client.get(f"/v1/memories/{memory_id}", headers=self.tenant.headers)
            out.setdefault("readable", {})[name] = r.status_code == 200 and name in found
        return out


async def purge(owner_dsn: str, tenant: Tenant) -> None:
    """The service's own purge (sql/memories/purge_expired.sql) of the org's expired rows."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute(PURGE.read_text(), tenant.org_id, 1000)
    finally:
        await conn.close()


Case = Callable[[Timeline], Awaitable[None]]


async def _late_value_after_expiry(t: Timeline) -> None:
    await t.put("Rome", "2023-06-01")  # between Paris and the expired Lisbon


async def _older_value_after_expiry(t: Timeline) -> None:
    await t.put("Berlin", "2021-01-01")  # before Paris


async def _newer_value_after_expiry(t: Timeline) -> None:
    await t.put("Oslo", "2025-01-01")


async def _repeat_of_the_expired_value(t: Timeline) -> None:
    await t.put("Lisbon again", "2024-06-01")


async def _delete_the_expired_value(t: Timeline) -> None:
    lisbon = next(i for i, n in t.names.items() if n == "Lisbon")
    r = await t.client.delete(f"/v1/memories/{lisbon}", headers=t.tenant.headers)
    assert r.status_code == 404, r.text  # an expired memory is not there to delete: the one before stays retired


async def _erase_the_expired_value(t: Timeline) -> None:
    lisbon = next(i for i, n in t.names.items() if n == "Lisbon")
    r = await t.client.delete(f"/v1/memories/{lisbon}", params={"erase": "true"}, headers=t.tenant.headers)
    assert r.status_code == 204, r.text  # its text goes, row and history
    r = await t.client.get(f"/v1/memories/{lisbon}/history", headers=t.tenant.headers)
    assert r.status_code == 404 or r.json()["items"] == [], r.text


async def _delete_the_value_before_the_expired_one(t: Timeline) -> None:
    paris = next(i for i, n in t.names.items() if n == "Paris")
    r = await t.client.delete(f"/v1/memories/{paris}", headers=t.tenant.headers)
    assert r.status_code == 204, r.text


async def _nothing(t: Timeline) -> None:
    return None


CASES: dict[str, Case] = {
    "nothing": _nothing, "late": _late_value_after_expiry, "older": _older_value_after_expiry,
    "newer": _newer_value_after_expiry, "repeat": _repeat_of_the_expired_value,
    "delete-expired": _delete_the_expired_value, "erase-expired": _erase_the_expired_value,
    "delete-before": _delete_the_value_before_the_expired_one,
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_purge_changes_no_answer_about_a_key(client: AsyncTestClient[Any], tenant: Tenant,
                                                     owner_dsn: str, case: str) -> None:
    lines = {}
    for agent, purged in (("kept", False), ("purged", True)):
        t = Timeline(client, tenant, f"exp-{case}-{agent}")
        await t.put("Madrid", "2022-01-01")
        await t.put("Paris", "2023-01-01")
        await t.put("Lisbon", "2024-01-01", expires_at=EXPIRED)
        if purged:
            await purge(owner_dsn, tenant)
        await CASES[case](t)
        if purged:
            await purge(owner_dsn, tenant)
        lines[agent] = await t.answers()
    assert lines["kept"] == lines["purged"]


async def test_an_expired_current_value_leaves_the_key_without_one(client: AsyncTestClient[Any], tenant: Tenant,
                                                                   owner_dsn: str) -> None:
    t = Timeline(client, tenant, "exp-rule")
    await t.put("Paris", "2023-01-01")
    await t.put("Lisbon", "2024-01-01", expires_at=EXPIRED)
    answers = await t.answers()
    assert answers["current"] == [] and answers["as_of"]["2024-06-01"] == []
    assert answers["as_of"]["2023-03-01"] == ["Paris"]
    # a value written after the expiry is placed among the values still held: the newest is current
    rome = await t.put("Rome", "2023-06-01")
    answers = await t.answers()
    assert answers["current"] == ["Rome"] and answers["as_of"]["2023-03-01"] == ["Paris"]
    assert ("Paris", False, "Rome", "2023-06-01T00:00:00Z") in answers["all"], answers["all"]
    berlin = await t.put("Berlin", "2021-01-01")
    every = {m["id"]: m for m in await list_all(client, tenant, agent_id="exp-rule", include_superseded="true")}
    assert every[berlin]["superseded_by"] != rome and t.name(every[berlin]["superseded_by"]) == "Paris"
    assert every[rome]["current"] is True


@pytest.fixture
async def http(settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> Any:
    with live_service(settings, endpoints, embedder) as url:
        async with httpx.AsyncClient(base_url=url, headers=tenant.headers, timeout=30) as client:
            yield client


async def test_writes_racing_the_purge_keep_one_value_at_a_time(http: httpx.AsyncClient, tenant: Tenant,
                                                                 owner_dsn: str) -> None:
    agent = "exp-race"
    for name, at, more in (("Paris", "2020-01-01", {}), ("Lisbon", "2024-01-01", {"expires_at": EXPIRED})):
        r = await http.post("/v1/memories", json=city(agent, name, at, **more))
        assert r.status_code == 201, r.text
    years = [2019, 2021, 2022, 2023, 2025, 2026]

    async def put(year: int) -> int:
        r = await http.post("/v1/memories", json=city(agent, f"City {year}", f"{year}-01-01"))
        return r.status_code

    answers = await asyncio.gather(*(put(y) for y in years), purge(owner_dsn, tenant), purge(owner_dsn, tenant))
    assert answers[:len(years)] == [201] * len(years), answers
    every = (await http.get("/v1/memories", params={"agent_id": agent, "include_superseded": "true",
                                                    "limit": 100})).json()["items"]
    assert sorted(m["text"] for m in every if m["current"]) == ["The user lives in City 2026."]
    spans = sorted((m["occurred_at"], m["valid_until"] or "9999") for m in every)
    assert all(end <= start for (_, end), (start, _) in pairwise(spans)), spans

"""Event time (``occurred_at``) over HTTP on real Postgres + Redis: set on create, batch and PATCH,
defaulting to the write time, validated (400), filtered in list and search, returned by GET, list,
search, the hot set and assembly, and never a way to see another org's rows."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_memories_api import assert_error, create, list_all
from tests.integration.test_migrations import alembic
from tests.servers import fresh_database

STRATEGIES = ["hybrid", "lexical", "semantic", "lexical_first"]
TURNS = [  # a conversation imported long after it took place
    ("Caroline went to the LGBTQ support group on Sunday.", "2023-05-07T13:56:00+00:00"),
    ("Melanie painted a sunrise over the lake last year.", "2023-05-25T10:00:00+02:00"),
    ("Caroline is researching adoption agencies for her family.", "2023-06-09T18:30:00Z"),
    ("Melanie signed up for a pottery class in July.", "2023-07-03T09:15:00-05:00"),
]


def parse(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def seed_turns(client: AsyncTestClient[Any], tenant: Tenant, agent_id: str | None = "chat") -> list[str]:
    body = {"memories": [{"text": t, "agent_id": agent_id, "kind": "episode", "occurred_at": at,
                          "metadata": {"turn": i}} for i, (t, at) in enumerate(TURNS)]}
    return await create(client, tenant, body)


async def test_defaults_to_the_write_time(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (mid,) = await create(client, tenant, {"text": "The user prefers green tea."})
    body = (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()
    assert body["occurred_at"] == body["created_at"]


async def test_set_on_create_batch_and_patch(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (single,) = await create(client, tenant, {"text": "Signed the lease.", "occurred_at": "2021-03-04T05:06:07+01:00"})
    got = (await client.get(f"/v1/memories/{single}", headers=tenant.headers)).json()
    assert parse(got["occurred_at"]) == parse("2021-03-04T04:06:07Z")
    assert parse(got["created_at"]) > parse(got["occurred_at"])

    ids = await seed_turns(client, tenant)
    listed = {m["id"]: m for m in await list_all(client, tenant, agent_id="chat")}
    for mid, (_, at) in zip(ids, TURNS, strict=True):
        assert parse(listed[mid]["occurred_at"]) == parse(at)

    r = await client.patch(f"/v1/memories/{ids[0]}", json={"occurred_at": "2020-01-01T00:00:00Z"},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert parse(r.json()["occurred_at"]) == parse("2020-01-01T00:00:00Z")
    assert r.json()["text"] == TURNS[0][0]  # nothing else changed
    again = (await client.get(f"/v1/memories/{ids[0]}", headers=tenant.headers)).json()
    assert parse(again["occurred_at"]) == parse("2020-01-01T00:00:00Z")
    # A PATCH that does not name it leaves it alone.
    r = await client.patch(f"/v1/memories/{ids[0]}", json={"importance": 0.9}, headers=tenant.headers)
    assert parse(r.json()["occurred_at"]) == parse("2020-01-01T00:00:00Z")


@pytest.mark.parametrize("value", [
    "2023-05-07T13:56:00",  # no timezone
    "2023-05-07",  # a date, not a timestamp
    "yesterday",
    "1899-12-31T23:59:59Z",  # before the sane range
    "2200-01-01T00:00:00Z",  # past it
    "1900-01-01T00:00:00+01:00",  # 1899-12-31T23:00Z: the bounds hold in UTC, not only as written
    "2199-12-31T23:30:00-01:00",  # 2200-01-01T00:30Z
    "1899-12-31T23:00:00-01:00",  # 1900-01-01T00:00Z, but written before 1900 (the schema's pattern)
    12345,
    None,  # PATCH: cannot be cleared (create: means "now", see below)
])
async def test_bad_values_are_400(client: AsyncTestClient[Any], tenant: Tenant, value: object) -> None:
    (mid,) = await create(client, tenant, {"text": "A memory to patch."})
    if not isinstance(value, int):  # Litestar decodes PATCH bodies laxly: a number there is Unix seconds
        r = await client.patch(f"/v1/memories/{mid}", json={"occurred_at": value}, headers=tenant.headers)
        assert_error(r, 400)
    if value is None:
        return
    assert_error(await client.post("/v1/memories", json={"text": "x", "occurred_at": value},
                                   headers=tenant.headers), 400, "validation_error")
    batch = {"memories": [{"text": "fine"}, {"text": "bad", "occurred_at": value}]}
    error = assert_error(await client.post("/v1/memories", json=batch, headers=tenant.headers), 400,
                         "validation_error")
    assert "occurred_at" in error["message"] + str(error["details"])
    assert len(await list_all(client, tenant)) == 1  # the whole batch was refused


async def test_explicit_null_on_create_means_now(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (mid,) = await create(client, tenant, {"text": "Written now.", "occurred_at": None})
    body = (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()
    assert body["occurred_at"] == body["created_at"]


async def test_list_filters_on_occurred_at(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    ids = await seed_turns(client, tenant)
    await create(client, tenant, {"text": "Written today, about today.", "agent_id": "chat"})
    june = await list_all(client, tenant, occurred_after="2023-06-01T00:00:00Z",
                          occurred_before="2023-07-01T00:00:00Z")
    assert [m["id"] for m in june] == [ids[2]]
    # Bounds: after is inclusive, before exclusive.
    at = TURNS[2][1]
    assert [m["id"] for m in await list_all(client, tenant, occurred_after=at, agent_id="chat",
                                            occurred_before="2023-12-31T00:00:00Z")] == [ids[3], ids[2]]
    assert ids[2] not in {m["id"] for m in await list_all(client, tenant, occurred_before=at)}
    assert len(await list_all(client, tenant, occurred_before="2024-01-01T00:00:00Z")) == 4
    assert_error(await client.get("/v1/memories", params={"occurred_after": "2023-06-01T00:00:00"},
                                  headers=tenant.headers), 400, "validation_error")
    assert_error(await client.get("/v1/memories", params={"occurred_before": "june"},
                                  headers=tenant.headers), 400)


async def search(client: AsyncTestClient[Any], tenant: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/memories/search", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_search_results_carry_the_memory_fields(client: AsyncTestClient[Any], tenant: Tenant,
                                                      strategy: str) -> None:
    ids = await seed_turns(client, tenant)
    body = await search(client, tenant, query="Caroline adoption agencies family", strategy=strategy, limit=10)
    assert body["results"], body
    by_id = {r["id"]: r for r in body["results"]}
    assert ids[2] in by_id
    for index, mid in enumerate(ids):
        if mid in by_id:
            hit = by_id[mid]
            assert hit["agent_id"] == "chat" and hit["kind"] == "episode"
            assert hit["metadata"] == {"turn": index}
            assert parse(hit["occurred_at"]) == parse(TURNS[index][1])


async def test_modes_search_results_carry_the_memory_fields(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    ids = await seed_turns(client, tenant)
    body = await search(client, tenant, query="pottery class", modes=["lexical", "semantic"], limit=5)
    hit = next(r for r in body["results"] if r["id"] == ids[3])
    assert hit["agent_id"] == "chat" and hit["metadata"] == {"turn": 3}
    assert parse(hit["occurred_at"]) == parse(TURNS[3][1])


@pytest.mark.parametrize("strategy", [*STRATEGIES, "auto"])
async def test_search_filters_on_occurred_at(client: AsyncTestClient[Any], tenant: Tenant, strategy: str) -> None:
    ids = await seed_turns(client, tenant)
    window = {"occurred_after": "2023-05-20T00:00:00Z", "occurred_before": "2023-06-30T00:00:00Z"}
    body = await search(client, tenant, query="Caroline Melanie painted adoption support group pottery",
                        strategy=strategy, limit=10, filters=window)
    assert {r["id"] for r in body["results"]} <= {ids[1], ids[2]}
    assert body["results"], body
    if strategy == "auto":
        assert body["strategy"] == "lexical_first" and "occurred_after" in body["reason"]


async def test_search_rejects_bad_occurred_filters(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    for filters, status in (({"occurred_after": "2023-06-01T00:00:00"}, 400),  # naive
                            ({"occurred_before": "soon"}, 400),
                            ({"occurred_after": "2023-06-02T00:00:00Z", "occurred_before": "2023-06-01T00:00:00Z"},
                             422)):  # an empty range: each bound is valid, together they select nothing
        r = await client.post("/v1/memories/search", json={"query": "adoption", "filters": filters},
                              headers=tenant.headers)
        assert_error(r, status)


async def test_occurred_filters_never_reach_another_org(client: AsyncTestClient[Any], tenant: Tenant,
                                                        other_tenant: Tenant) -> None:
    await seed_turns(client, tenant)
    window = {"occurred_after": "2023-01-01T00:00:00Z", "occurred_before": "2024-01-01T00:00:00Z"}
    assert await list_all(client, other_tenant, occurred_after=window["occurred_after"]) == []
    for strategy in [*STRATEGIES, "auto"]:
        body = await search(client, other_tenant, query="Caroline adoption pottery", strategy=strategy,
                            filters=window)
        assert body["results"] == [], strategy


async def test_migration_backfilled_and_indexed(owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        column = await conn.fetchrow(
            "SELECT is_nullable, column_default FROM information_schema.columns "
            "WHERE table_name = 'memories' AND column_name = 'occurred_at'")
        index = await conn.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = 'memories_org_agent_occurred'")
    finally:
        await conn.close()
    assert column is not None and column["is_nullable"] == "NO" and column["column_default"] == "now()"
    assert index is not None and "(org_id, agent_id, occurred_at DESC, id DESC)" in index


async def _backfill_check(dsn: str, stage: str) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        if stage == "seed":
            org = await conn.fetchval("INSERT INTO orgs (name) VALUES ('backfill') RETURNING id")
            await conn.execute("INSERT INTO memories (org_id, text, created_at) VALUES "
                               "($1, 'written long ago', '2021-02-03T04:05:06Z'), ($1, 'written now', now())", org)
            return None
        columns = {r[0] for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memories'")}
        index = await conn.fetchval("SELECT to_regclass('memories_org_agent_occurred') IS NOT NULL")
        if stage == "down":
            return "occurred_at" in columns, index
        rows = await conn.fetch("SELECT created_at, occurred_at FROM memories")
        trigger = await conn.fetchval("SELECT tgenabled::text FROM pg_trigger WHERE tgname = 'memories_lex_update'")
        return [(r["created_at"], r["occurred_at"]) for r in rows], index, trigger
    finally:
        await conn.close()


def test_migration_backfills_from_created_at_and_downgrades(pg_server: str) -> None:
    with fresh_database(pg_server) as dsn:
        alembic(dsn, "upgrade", "0004")
        asyncio.run(_backfill_check(dsn, "seed"))
        alembic(dsn, "upgrade", "0005")
        rows, index, trigger = asyncio.run(_backfill_check(dsn, "up"))
        assert len(rows) == 2 and all(created == occurred for created, occurred in rows)
        assert index and trigger == "O"  # the lexical trigger is left enabled
        alembic(dsn, "downgrade", "0004")
        assert asyncio.run(_backfill_check(dsn, "down")) == (False, False)


async def test_hot_set_and_assembly_carry_occurred_at(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                      tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed_turns(client, tenant)
        hot = (await client.get("/v1/memories/hot", params={"agent_id": "chat"}, headers=tenant.headers)).json()
        stamps = {i["id"]: i["occurred_at"] for i in hot["items"]}
        for mid, (_, at) in zip(ids, TURNS, strict=True):
            assert parse(stamps[mid]) == parse(at)
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "chat", "query": "What is Caroline researching?", "model": "gpt-4o",
            "max_context_tokens": 1000, "retrieval": {"use_hot": False}})
        assert r.status_code == 200, r.text
        used = {m["id"]: m for m in r.json()["memories_used"]}
        # Assembly's retrieval filters are the search filters: an event-time window narrows the cold branch.
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "chat", "query": "What did Caroline and Melanie do?", "model": "gpt-4o",
            "max_context_tokens": 1000, "retrieval": {"use_hot": False, "filters": {
                "occurred_after": "2023-06-01T00:00:00Z", "occurred_before": "2023-08-01T00:00:00Z"}}})
        assert r.status_code == 200, r.text
        windowed = {m["id"] for m in r.json()["memories_used"]}
    assert ids[2] in used
    for index, mid in enumerate(ids):
        if mid in used:
            assert parse(used[mid]["occurred_at"]) == parse(TURNS[index][1])
    assert windowed and windowed <= {ids[2], ids[3]}


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+01:00", "1899-12-31T23:59:59Z", "2200-01-01T00:00:00Z",
                                   "1900-01-01T00:00:00+01:00", "2199-12-31T23:30:00-01:00"])
async def test_expires_at_out_of_range_is_400_not_a_date_the_response_cannot_carry(
        client: AsyncTestClient[Any], tenant: Tenant, value: str) -> None:
    # Found by `make fuzz`: PATCH with expires_at 0001-01-01 (+01:00, i.e. a year-0 UTC time) answered
    # 200 with "0001-01-01T00:00:00", no timezone: not a date-time the schema allows.
    (mid,) = await create(client, tenant, {"text": "A memory that expires."})
    error = assert_error(await client.patch(f"/v1/memories/{mid}", json={"expires_at": value},
                                            headers=tenant.headers), 400, "validation_error")
    assert error["details"]["field"] == "expires_at"
    batch = {"memories": [{"text": "fine"}, {"text": "bad", "expires_at": value}]}
    error = assert_error(await client.post("/v1/memories", json=batch, headers=tenant.headers), 400,
                         "validation_error")
    assert error["details"]["field"] == "memories[1].expires_at"
    assert len(await list_all(client, tenant)) == 1  # the whole batch was refused
    r = await client.patch(f"/v1/memories/{mid}", json={"expires_at": "2199-12-31T00:00:00Z"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["expires_at"].startswith("2199-12-31T00:00:00"), r.text

"""Valid time and merges over HTTP on real Postgres + Redis: only current memories (not superseded,
valid_until not passed, not expired) take merges; a late value keeps its predecessor's own earlier
end; a merged write still retires what it names; valid_until must follow the (default) occurred_at;
a keyed value's time (and a retired one's agent) is its place on the key's timeline; a PATCH that
changes nothing records nothing."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all


async def test_a_memory_whose_valid_time_ended_takes_no_merge(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (ended,) = (await write(client, tenant, {"text": "The user is on parental leave.", "agent_id": "vu1",
                                             "occurred_at": "2024-01-01T00:00:00Z",
                                             "valid_until": "2024-06-01T00:00:00Z"}))["ids"]
    item = (await write(client, tenant, {"text": "The user is on parental leave!", "agent_id": "vu1"}))["items"][0]
    assert item["status"] == "created" and item["id"] != ended, item
    assert [m["id"] for m in await list_all(client, tenant, agent_id="vu1")] == [item["id"]]
    # a PATCH into the ended memory's text is no merge either
    (other,) = (await write(client, tenant, {"text": "The user has a dog.", "agent_id": "vu1"}))["ids"]
    r = await client.patch(f"/v1/memories/{ended}", json={"text": "The user has a dog!"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["id"] == ended, r.text
    assert [e["event"] for e in await history(client, tenant, other)] == ["created"]


async def test_a_late_value_keeps_its_predecessors_earlier_end(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    def value(text: str, at: str, **more: Any) -> dict[str, Any]:
        return {"text": text, "agent_id": "late5", "key": "user.job", "occurred_at": at, **more}

    acme = (await write(client, tenant, value("Works at Acme.", "2020-01-01T00:00:00Z",
                                              valid_until="2020-06-01T00:00:00Z")))["ids"][0]
    await write(client, tenant, value("Works at Globex.", "2022-01-01T00:00:00Z"))
    initech = (await write(client, tenant, value("Works at Initech.", "2021-01-01T00:00:00Z")))["ids"][0]
    every = {m["id"]: m for m in await list_all(client, tenant, agent_id="late5", include_superseded="true")}
    assert every[acme]["valid_until"].startswith("2020-06-01") and every[acme]["superseded_by"] == initech
    assert await list_all(client, tenant, agent_id="late5", as_of="2020-09-01T00:00:00Z") == []
    assert (await history(client, tenant, acme))[-1]["detail"]["valid_until"].startswith("2020-06-01")


async def test_a_merged_write_still_retires_what_it_names(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (tea,) = (await write(client, tenant, {"text": "The user drinks oolong tea.", "agent_id": "bat1"}))["ids"]
    (coffee,) = (await write(client, tenant, {"text": "The user drinks black coffee.", "agent_id": "bat1"}))["ids"]
    item = (await write(client, tenant, {"text": "the user drinks oolong tea", "agent_id": "bat1",
                                         "supersedes": [coffee]}))["items"][0]
    assert item["status"] == "merged" and item["id"] == tea and item["superseded"] == [coffee], item
    assert [m["id"] for m in await list_all(client, tenant, agent_id="bat1")] == [tea]
    every = {m["id"]: m for m in await list_all(client, tenant, agent_id="bat1", include_superseded="true")}
    assert every[coffee]["superseded_by"] == tea and every[coffee]["current"] is False
    merge = (await history(client, tenant, tea))[-1]
    assert merge["event"] == "merged" and merge["detail"]["superseded"] == [coffee]
    assert (await history(client, tenant, coffee))[-1]["event"] == "superseded"
    # naming the very memory it duplicates: that one is replaced, not reinforced
    item = (await write(client, tenant, {"text": "The user drinks oolong tea!", "agent_id": "bat1",
                                         "supersedes": [tea]}))["items"][0]
    assert item["status"] == "superseded" and item["superseded"] == [tea], item
    # and what a merge cannot retire is still refused
    r = await client.post("/v1/memories", json={"text": "the user drinks oolong tea", "agent_id": "bat1",
                                                "supersedes": [coffee]}, headers=tenant.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "already_superseded", r.text


async def test_valid_until_before_the_default_occurred_at_is_refused(client: AsyncTestClient[Any],
                                                                     tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "The user is vegetarian.", "agent_id": "vx",
                                                "valid_until": "2020-01-01T00:00:00Z"}, headers=tenant.headers)
    assert r.status_code == 422 and r.json()["error"]["details"] == {"field": "valid_until"}, r.text
    r = await client.post("/v1/memories", json={"memories": [
        {"text": "The user is vegan.", "agent_id": "vx", "occurred_at": "2019-01-01T00:00:00Z",
         "valid_until": "2020-01-01T00:00:00Z"},
        {"text": "The user is vegetarian.", "agent_id": "vx", "valid_until": "2020-01-01T00:00:00Z"}]},
        headers=tenant.headers)
    assert r.status_code == 422 and r.json()["error"]["details"] == {"field": "memories[1].valid_until"}, r.text
    assert await list_all(client, tenant, agent_id="vx", include_superseded="true") == []


async def test_a_keyed_values_time_is_its_place_on_the_timeline(client: AsyncTestClient[Any],
                                                                tenant: Tenant) -> None:
    def value(text: str, at: str) -> dict[str, Any]:
        return {"text": text, "agent_id": "kt", "key": "user.city", "occurred_at": at}

    paris = (await write(client, tenant, value("Lives in Paris.", "2020-01-01T00:00:00Z")))["ids"][0]
    rome = (await write(client, tenant, value("Lives in Rome.", "2022-01-01T00:00:00Z")))["ids"][0]
    for memory_id, change in ((paris, {"valid_until": "2023-01-01T00:00:00Z"}), (paris, {"valid_until": None}),
                              (paris, {"occurred_at": "2022-06-01T00:00:00Z"}),
                              (rome, {"occurred_at": "2019-01-01T00:00:00Z"}), (paris, {"agent_id": "other"})):
        r = await client.patch(f"/v1/memories/{memory_id}", json=change, headers=tenant.headers)
        assert r.status_code == 422, (change, r.text)
        assert r.json()["error"]["details"] == {"field": next(iter(change))}, r.text
    for day in ("2021-06-01", "2022-06-01"):  # one value at every time
        assert len(await list_all(client, tenant, agent_id="kt", as_of=f"{day}T00:00:00Z")) == 1
    # ending the current value, or a retired one earlier, leaves no overlap: allowed
    r = await client.patch(f"/v1/memories/{rome}", json={"valid_until": "2030-01-01T00:00:00Z"},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    r = await client.patch(f"/v1/memories/{paris}", json={"valid_until": "2021-01-01T00:00:00Z"},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert await list_all(client, tenant, agent_id="kt", as_of="2021-06-01T00:00:00Z") == []


async def test_a_patch_that_changes_nothing_records_nothing(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (memory,) = (await write(client, tenant, {"text": "The user is left-handed.", "agent_id": "np",
                                              "importance": 0.5}))["ids"]
    for change in ({}, {"importance": 0.5}, {"on_duplicate": "keep"}, {"text": "The user is left-handed."}):
        r = await client.patch(f"/v1/memories/{memory}", json=change, headers=tenant.headers)
        assert r.status_code == 200 and r.json()["status"] == "updated", r.text
    assert [e["event"] for e in await history(client, tenant, memory)] == ["created"]
    r = await client.patch(f"/v1/memories/{memory}", json={"importance": 0.7, "pinned": False},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    events = await history(client, tenant, memory)
    assert [e["event"] for e in events] == ["created", "updated"] and events[1]["detail"]["changes"] == {
        "importance": 0.7}


async def test_a_patch_cannot_date_a_memory_before_one_it_superseded(client: AsyncTestClient[Any],
                                                                     tenant: Tenant) -> None:
    (old,) = (await write(client, tenant, {"text": "The user drives a Volvo.", "agent_id": "ord1",
                                           "occurred_at": "2023-01-01T00:00:00Z"}))["ids"]
    (new,) = (await write(client, tenant, {"text": "The user drives a Tesla.", "agent_id": "ord1",
                                           "occurred_at": "2024-01-01T00:00:00Z", "supersedes": [old]}))["ids"]
    r = await client.patch(f"/v1/memories/{new}", json={"occurred_at": "2022-06-01T00:00:00Z"},
                           headers=tenant.headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "supersedes_newer" and r.json()["error"]["details"] == {
        "field": "occurred_at", "id": old}, r.text
    # the same instant, or any time after what it superseded, is fine
    for at in ("2023-01-01T00:00:00Z", "2023-06-01T00:00:00Z"):
        r = await client.patch(f"/v1/memories/{new}", json={"occurred_at": at}, headers=tenant.headers)
        assert r.status_code == 200 and r.json()["occurred_at"] == at, r.text
    # the retired one cannot move past its successor either (its valid time would end before it began)
    r = await client.patch(f"/v1/memories/{old}", json={"occurred_at": "2025-01-01T00:00:00Z"},
                           headers=tenant.headers)
    assert r.status_code == 422, r.text


async def test_a_merge_keeps_the_memory_as_long_as_the_repeat_asked(client: AsyncTestClient[Any],
                                                                    tenant: Tenant) -> None:
    base = {"text": "The user is training for a marathon.", "agent_id": "ext1"}

    async def kept_now(memory_id: str) -> dict[str, Any]:
        r = await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers)
        assert r.status_code == 200, r.text
        return dict(r.json())

    (kept,) = (await write(client, tenant, {**base, "expires_at": "2100-01-01T00:00:00Z",
                                            "valid_until": "2090-01-01T00:00:00Z"}))["ids"]
    # an earlier expiry or end in a repeat shortens nothing
    item = (await write(client, tenant, {**base, "expires_at": "2099-01-01T00:00:00Z",
                                         "valid_until": "2080-01-01T00:00:00Z"}))["items"][0]
    assert item["status"] == "merged" and item["id"] == kept, item
    now = await kept_now(kept)
    assert now["expires_at"].startswith("2100-01-01") and now["valid_until"].startswith("2090-01-01"), now
    # a later one extends them
    await write(client, tenant, {**base, "expires_at": "2150-01-01T00:00:00Z", "valid_until": "2095-01-01T00:00:00Z"})
    now = await kept_now(kept)
    assert now["expires_at"].startswith("2150-01-01") and now["valid_until"].startswith("2095-01-01"), now
    # a repeat without expires_at is to be kept for good; one without valid_until says nothing of the end
    await write(client, tenant, base)
    now = await kept_now(kept)
    assert now["expires_at"] is None and now["valid_until"].startswith("2095-01-01") and now["seen_count"] == 4, now
    merges = [e for e in await history(client, tenant, kept) if e["event"] == "merged"]
    assert "extended" not in merges[0]["detail"] and set(merges[2]["detail"]["extended"]) == {"expires_at"}
    # undoing a merge gives back the ends it moved, where they still hold what it set
    for event, expires in ((merges[2], "2150-01-01"), (merges[1], "2100-01-01")):
        r = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={}, headers=tenant.headers)
        assert r.status_code == 200, r.text
        assert (await kept_now(kept))["expires_at"].startswith(expires)
    assert (await kept_now(kept))["valid_until"].startswith("2090-01-01")

"""A key's timeline over HTTP on real Postgres + Redis, as writes and deletes change it: a batch ends as its
items written one at a time would (a value an earlier item retired takes no merge), and deleting a key's
value leaves the newest remaining value current."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all


def city(agent: str, name: str, year: int) -> dict[str, Any]:
    return {"text": f"The user lives in {name}.", "agent_id": agent, "key": "user.city",
            "occurred_at": f"{year}-01-01T00:00:00Z"}


async def current_texts(client: AsyncTestClient[Any], tenant: Tenant, agent: str, **params: Any) -> list[str]:
    return [m["text"] for m in await list_all(client, tenant, agent_id=agent, **params)]


async def test_a_batch_returning_to_an_earlier_value_makes_it_current(client: AsyncTestClient[Any],
                                                                      tenant: Tenant) -> None:
    out = await write(client, tenant, {"memories": [city("seq1", "Paris", 2023), city("seq1", "Lisbon", 2024),
                                                    city("seq1", "Paris", 2025)]})
    paris, lisbon, back = out["items"]
    assert back["status"] == "superseded" and back["superseded"] == [lisbon["id"]] and back["current"], back
    assert len(set(out["ids"])) == 3
    listed = await list_all(client, tenant, agent_id="seq1")
    assert [(m["id"], m["seen_count"]) for m in listed] == [(back["id"], 1)]
    assert await current_texts(client, tenant, "seq1", as_of="2023-06-01T00:00:00Z") == ["The user lives in Paris."]
    assert await current_texts(client, tenant, "seq1", as_of="2024-06-01T00:00:00Z") == ["The user lives in Lisbon."]
    every = {m["id"]: m for m in await list_all(client, tenant, agent_id="seq1", include_superseded="true")}
    assert every[paris["id"]]["seen_count"] == 1 and every[paris["id"]]["superseded_by"] == lisbon["id"]

    # the duplicate found is a value already current before the batch, which an earlier item retires
    await write(client, tenant, city("seq2", "Paris", 2022))
    out = await write(client, tenant, {"memories": [city("seq2", "Lisbon", 2024), city("seq2", "Paris", 2025),
                                                    city("seq2", "Paris", 2026)]})
    lisbon, back, again = out["items"]
    assert back["status"] == "superseded" and back["superseded"] == [lisbon["id"]], back
    assert again["status"] == "merged" and again["id"] == back["id"], again  # the value written just before
    listed = await list_all(client, tenant, agent_id="seq2")
    assert [(m["id"], m["seen_count"]) for m in listed] == [(back["id"], 2)]


async def test_a_batch_item_merges_into_nothing_an_earlier_item_retired(client: AsyncTestClient[Any],
                                                                        tenant: Tenant) -> None:
    (tea,) = (await write(client, tenant, {"text": "The user drinks oolong tea.", "agent_id": "seq3"}))["ids"]
    out = await write(client, tenant, {"memories": [
        {"text": "The user drinks black coffee.", "agent_id": "seq3", "supersedes": [tea]},
        {"text": "the user drinks oolong tea", "agent_id": "seq3"}]})
    coffee, again = out["items"]
    assert coffee["superseded"] == [tea] and again["status"] == "created" and again["id"] != tea, out
    assert sorted(await current_texts(client, tenant, "seq3")) == ["The user drinks black coffee.",
                                                                   "the user drinks oolong tea"]
    # one before the item that retires it is still merged (as two requests in that order would)
    (milk,) = (await write(client, tenant, {"text": "The user takes oat milk.", "agent_id": "seq4"}))["ids"]
    out = await write(client, tenant, {"memories": [
        {"text": "the user takes oat milk", "agent_id": "seq4"},
        {"text": "The user takes no milk.", "agent_id": "seq4", "supersedes": [milk]}]})
    assert [i["status"] for i in out["items"]] == ["merged", "superseded"] and out["ids"][0] == milk, out
    assert await current_texts(client, tenant, "seq4") == ["The user takes no milk."]


async def test_deleting_the_current_value_of_a_key_makes_the_one_before_current(client: AsyncTestClient[Any],
                                                                               tenant: Tenant) -> None:
    (paris,) = (await write(client, tenant, city("del1", "Paris", 2023)))["ids"]
    (lisbon,) = (await write(client, tenant, city("del1", "Lisbon", 2024)))["ids"]
    r = await client.delete(f"/v1/memories/{lisbon}", headers=tenant.headers)
    assert r.status_code == 204, r.text
    (kept,) = await list_all(client, tenant, agent_id="del1")
    assert kept["id"] == paris and kept["current"] and kept["valid_until"] is None and kept["superseded_by"] is None
    assert kept["superseded_at"] is None
    last = (await history(client, tenant, paris))[-1]
    assert last["event"] == "updated" and last["related_id"] == lisbon, last
    assert last["detail"]["changes"] == {"superseded_by": None, "valid_until": None}, last
    # the key's timeline goes on from it: an older value arriving late is history, not the current value
    (item,) = (await write(client, tenant, city("del1", "Rome", 2022)))["items"]
    assert item["current"] is False and item["superseded_by"] == paris, item
    assert await current_texts(client, tenant, "del1") == ["The user lives in Paris."]
    assert await current_texts(client, tenant, "del1", as_of="2023-06-01T00:00:00Z") == ["The user lives in Paris."]


async def test_deleting_a_past_value_joins_its_neighbours(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (paris,) = (await write(client, tenant, city("del2", "Paris", 2023)))["ids"]
    (berlin,) = (await write(client, tenant, city("del2", "Berlin", 2024)))["ids"]
    (lisbon,) = (await write(client, tenant, city("del2", "Lisbon", 2025)))["ids"]
    r = await client.delete(f"/v1/memories/{berlin}?erase=true", headers=tenant.headers)
    assert r.status_code == 204, r.text
    every = {m["id"]: m for m in await list_all(client, tenant, agent_id="del2", include_superseded="true")}
    assert set(every) == {paris, lisbon}
    assert every[paris]["superseded_by"] == lisbon and every[paris]["valid_until"].startswith("2025-01-01")
    assert await current_texts(client, tenant, "del2", as_of="2024-06-01T00:00:00Z") == ["The user lives in Paris."]
    assert await current_texts(client, tenant, "del2") == ["The user lives in Lisbon."]
    # a value that had ended on its own before the next one began keeps its own end
    (acme,) = (await write(client, tenant, {"text": "Works at Acme.", "agent_id": "del3", "key": "user.job",
                                            "occurred_at": "2020-01-01T00:00:00Z",
                                            "valid_until": "2020-06-01T00:00:00Z"}))["ids"]
    (globex,) = (await write(client, tenant, {"text": "Works at Globex.", "agent_id": "del3", "key": "user.job",
                                              "occurred_at": "2022-01-01T00:00:00Z"}))["ids"]
    assert (await client.delete(f"/v1/memories/{globex}", headers=tenant.headers)).status_code == 204
    (ended,) = await list_all(client, tenant, agent_id="del3", include_superseded="true")
    assert ended["id"] == acme and ended["superseded_by"] is None and ended["valid_until"].startswith("2020-06-01")
    assert await list_all(client, tenant, agent_id="del3") == []


async def test_moving_the_current_value_to_another_agent_leaves_the_one_before_current(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (paris,) = (await write(client, tenant, city("mv1", "Paris", 2023)))["ids"]
    (lisbon,) = (await write(client, tenant, city("mv1", "Lisbon", 2024)))["ids"]
    r = await client.patch(f"/v1/memories/{lisbon}", json={"agent_id": "mv2"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert [m["id"] for m in await list_all(client, tenant, agent_id="mv1")] == [paris]
    assert [m["id"] for m in await list_all(client, tenant, agent_id="mv2")] == [lisbon]
    (item,) = (await write(client, tenant, city("mv1", "Rome", 2022)))["items"]
    assert item["current"] is False and item["superseded_by"] == paris, item


async def test_a_repeat_of_the_current_value_from_before_it_began_is_history(client: AsyncTestClient[Any],
                                                                            tenant: Tenant) -> None:
    (paris,) = (await write(client, tenant, city("late1", "Paris", 2023)))["ids"]
    (lisbon,) = (await write(client, tenant, city("late1", "Lisbon", 2024)))["ids"]
    # the user lived in Lisbon before Paris too: that is a past value, not one more sighting of today's
    (item,) = (await write(client, tenant, city("late1", "Lisbon", 2022)))["items"]
    assert item["status"] == "created" and item["id"] not in (paris, lisbon), item
    assert item["current"] is False and item["superseded_by"] == paris, item
    assert await current_texts(client, tenant, "late1", as_of="2022-06-01T00:00:00Z") == ["The user lives in Lisbon."]
    (now,) = await list_all(client, tenant, agent_id="late1")
    assert now["id"] == lisbon and now["seen_count"] == 1
    # a later sighting of the current value still reinforces it
    (item,) = (await write(client, tenant, city("late1", "Lisbon", 2025)))["items"]
    assert item["status"] == "merged" and item["id"] == lisbon, item


async def test_reject_refuses_only_what_merge_would_merge(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (paris,) = (await write(client, tenant, city("rej1", "Paris", 2023)))["ids"]
    (lisbon,) = (await write(client, tenant, city("rej1", "Lisbon", 2024)))["ids"]
    # a repeat from before the current value began is a past value of its own under merge: so under reject
    (item,) = (await write(client, tenant, {**city("rej1", "Lisbon", 2022), "on_duplicate": "reject"}))["items"]
    assert item["status"] == "created" and item["current"] is False and item["superseded_by"] == paris, item
    # a repeat from then on is a sighting of the current value: refused, nothing written
    r = await client.post("/v1/memories", json={**city("rej1", "Lisbon", 2025), "on_duplicate": "reject"},
                          headers=tenant.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "duplicate", r.text
    assert r.json()["error"]["details"]["items"][0]["duplicate_of"] == lisbon, r.text
    # a batch going back to a value an earlier item retired writes it, as one request at a time would
    out = await write(client, tenant, {"memories": [city("rej2", "Paris", 2023), city("rej2", "Lisbon", 2024),
                                                    city("rej2", "Paris", 2025)], "on_duplicate": "reject"})
    assert [i["status"] for i in out["items"]] == ["created", "superseded", "superseded"], out
    assert await current_texts(client, tenant, "rej2") == ["The user lives in Paris."]
    assert len(await list_all(client, tenant, agent_id="rej1", include_superseded="true")) == 3

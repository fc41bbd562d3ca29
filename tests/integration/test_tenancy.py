"""Two orgs against every endpoint: another org's objects are 404, never shown, never changed."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant


async def _memory(client: AsyncTestClient[Any], tenant: Tenant, text: str, agent_id: str = "shared-agent") -> str:
    r = await client.post("/v1/memories", json={"text": text, "agent_id": agent_id, "metadata": {"org": tenant.name}},
                          headers=tenant.headers)
    assert r.status_code == 201, r.text
    return str(r.json()["ids"][0])


async def _list_ids(client: AsyncTestClient[Any], tenant: Tenant, **params: Any) -> set[str]:
    r = await client.get("/v1/memories", params={"limit": 200, **params}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["next_cursor"] is None
    return {m["id"] for m in r.json()["items"]}


async def test_memories_of_another_org_are_404_and_untouched(client: AsyncTestClient[Any], tenant: Tenant,
                                                              other_tenant: Tenant) -> None:
    a_id = await _memory(client, tenant, "Org A's secret: the launch is on Tuesday.")
    b_id = await _memory(client, other_tenant, "Org B's own note.")
    before = (await client.get(f"/v1/memories/{a_id}", headers=tenant.headers)).json()

    r = await client.get(f"/v1/memories/{a_id}", headers=other_tenant.headers)
    assert r.status_code == 404 and "secret" not in r.text
    r = await client.patch(f"/v1/memories/{a_id}", json={"text": "Overwritten by B", "agent_id": None},
                           headers=other_tenant.headers)
    assert r.status_code == 404 and "secret" not in r.text
    r = await client.delete(f"/v1/memories/{a_id}", headers=other_tenant.headers)
    assert r.status_code == 404

    after = (await client.get(f"/v1/memories/{a_id}", headers=tenant.headers)).json()
    assert after == before

    assert await _list_ids(client, other_tenant) == {b_id}
    assert await _list_ids(client, other_tenant, agent_id="shared-agent") == {b_id}
    assert await _list_ids(client, other_tenant, metadata=f'{{"org": "{tenant.name}"}}') == set()
    assert await _list_ids(client, tenant) == {a_id}
    # And the other way round.
    assert (await client.get(f"/v1/memories/{b_id}", headers=tenant.headers)).status_code == 404


async def test_pagination_cursor_of_another_org_reveals_nothing(client: AsyncTestClient[Any], tenant: Tenant,
                                                                 other_tenant: Tenant) -> None:
    for i in range(3):
        await _memory(client, tenant, f"A's memory {i}")
    r = await client.get("/v1/memories", params={"limit": 1}, headers=tenant.headers)
    cursor = r.json()["next_cursor"]
    assert cursor
    r = await client.get("/v1/memories", params={"cursor": cursor}, headers=other_tenant.headers)
    assert r.status_code == 200 and r.json()["items"] == []


async def test_directives_are_per_org(client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    path = "/v1/agents/support-bot/directive"
    r = await client.get(path, headers=other_tenant.headers)
    assert r.status_code == 404
    assert (await client.put(path, json={"content": "A: be formal."}, headers=tenant.headers)).status_code == 200
    assert (await client.get(path, headers=other_tenant.headers)).status_code == 404
    assert (await client.delete(path, headers=other_tenant.headers)).status_code == 404

    r = await client.put(path, json={"content": "B: be casual."}, headers=other_tenant.headers)
    assert r.status_code == 200 and r.json()["version"] == 1  # B's own, independent of A's
    a = (await client.get(path, headers=tenant.headers)).json()
    b = (await client.get(path, headers=other_tenant.headers)).json()
    assert a["content"] == "A: be formal." and a["version"] == 1
    assert b["content"] == "B: be casual." and b["version"] == 1

    assert (await client.put(path, json={"content": "A: v2"}, headers=tenant.headers)).json()["version"] == 2
    assert (await client.get(path, headers=other_tenant.headers)).json()["content"] == "B: be casual."

    assert (await client.delete(path, headers=other_tenant.headers)).status_code == 204
    assert (await client.get(path, headers=other_tenant.headers)).status_code == 404
    r = await client.get(path, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["content"] == "A: v2"


async def test_idempotency_replay_never_crosses_orgs(client: AsyncTestClient[Any], tenant: Tenant,
                                                      other_tenant: Tenant) -> None:
    body = {"text": "Same body, same key, two orgs."}
    a = await client.post("/v1/memories", json=body, headers={**tenant.headers, "Idempotency-Key": "k1"})
    b = await client.post("/v1/memories", json=body, headers={**other_tenant.headers, "Idempotency-Key": "k1"})
    assert a.status_code == b.status_code == 201
    assert "idempotent-replayed" not in b.headers
    assert a.json()["ids"] != b.json()["ids"]
    assert (await client.get(f"/v1/memories/{a.json()['ids'][0]}", headers=other_tenant.headers)).status_code == 404

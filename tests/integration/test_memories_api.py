"""Memory CRUD over HTTP against real Postgres + Redis."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant


async def test_create_get_roundtrip(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "The user prefers dark roast coffee.", "agent_id": "a1",
                                                "metadata": {"topic": "coffee"}}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    (mid,) = r.json()["ids"]
    got = await client.get(f"/v1/memories/{mid}", headers=tenant.headers)
    assert got.status_code == 200
    body = got.json()
    assert body["text"] == "The user prefers dark roast coffee."
    assert body["agent_id"] == "a1" and body["metadata"] == {"topic": "coffee"} and body["kind"] == "fact"

"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient


async def test_healthz(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


async def test_readyz_checks_postgres_and_redis(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok", "checks": {"postgres": "ok", "redis": "ok"}}


async def test_openapi_schema_is_served(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert "/v1/memories" in paths and "/v1/agents/{agent_id}/directive" in paths

"""Liveness and readiness."""

from __future__ import annotations

import gc
import sys
from typing import Any

from litestar.testing import AsyncTestClient

from service.app import GIL_SWITCH_INTERVAL_S, create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings


async def test_healthz(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


async def test_readyz_checks_postgres_redis_and_the_warm_up(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ok", "checks": {"postgres": "ok", "redis": "ok", "warm": "ok"}}


async def test_openapi_schema_is_served(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert "/v1/memories" in paths and "/v1/agents/{agent_id}/directive" in paths


async def test_startup_objects_are_frozen_out_of_full_collections_while_the_app_runs(
        settings: Settings, endpoints: Endpoints, embedder: Embedder) -> None:
    async with AsyncTestClient(app=create_app(settings, endpoints, embedder=embedder)) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert gc.get_freeze_count() > 10_000  # modules, settings, pools, tokenizers, ...
    assert gc.get_freeze_count() == 0  # unfrozen at shutdown: collectable again


async def test_threads_get_the_gil_back_sooner_while_the_app_runs(
        settings: Settings, endpoints: Endpoints, embedder: Embedder) -> None:
    outer = sys.getswitchinterval()  # another app of this session may be running and have set it
    sys.setswitchinterval(0.004)
    try:
        async with AsyncTestClient(app=create_app(settings, endpoints, embedder=embedder)) as http:
            assert (await http.get("/healthz")).status_code == 200
            assert sys.getswitchinterval() == GIL_SWITCH_INTERVAL_S  # process-wide, set in the lifespan
        assert sys.getswitchinterval() == 0.004  # what it was before the app started, restored at shutdown
    finally:
        sys.setswitchinterval(outer)

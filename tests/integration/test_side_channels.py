"""Tenant side channels and noisy neighbours (issue 13): shared caches and circuits must not let one
org observe or degrade another."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from litestar.testing import AsyncTestClient

from service.retrieval.engine import RetrievalEngine
from service.runtime import Services
from tests.conftest import Tenant


async def _search(client: AsyncTestClient[Any], tenant: Tenant, query: str) -> dict[str, Any]:
    r = await client.post("/v1/memories/search", json={"query": query, "strategy": "semantic"},
                          headers=tenant.headers)
    assert r.status_code == 200, r.text
    metrics: dict[str, Any] = r.json()["metrics"]
    return metrics


async def test_query_embedding_cache_is_per_org(client: AsyncTestClient[Any], services: Services,
                                                tenant: Tenant, other_tenant: Tenant) -> None:
    engine = services.extras["retrieval"]
    assert isinstance(engine, RetrievalEngine)
    phrase = f"favourite hiking trail {uuid4().hex[:8]}"
    assert (await _search(client, tenant, phrase))["embedding_cached"] is False
    assert (await _search(client, tenant, phrase))["embedding_cached"] is True  # A's repeat hits
    misses = engine.cache.misses
    # B's first search of the phrase A just searched is a miss: nothing reveals A's query.
    assert (await _search(client, other_tenant, phrase))["embedding_cached"] is False
    assert engine.cache.misses == misses + 1
    assert all(engine.cache.peek(t.org_id, phrase) is not None for t in (tenant, other_tenant))

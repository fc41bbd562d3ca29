"""Tenant side channels and noisy neighbours: shared caches and circuits must not let one
org observe or degrade another."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import numpy as np
import numpy.typing as npt
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.assembly.hot import hot_key
from service.embeddings import Embedder, EmbeddingError
from service.retrieval.engine import RetrievalEngine
from service.retrieval.planner import EMBEDDER_DOWN
from service.retrieval.query_embedding import EMBED_QUERY_CHARS
from service.runtime import Endpoints, Services
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_search_faults import app_client


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


async def test_hot_set_rejects_bad_agent_ids(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    for bad in ("café", "a b", "x" * 5000, "", "a\n"):
        r = await client.get("/v1/memories/hot", params={"agent_id": bad}, headers=tenant.headers)
        assert r.status_code == 400, (bad[:20], r.status_code, r.text[:200])
        assert set(r.json()["error"]) >= {"code", "message"}, r.text[:200]


async def test_hot_set_of_an_agent_without_memories_is_not_cached(
        client: AsyncTestClient[Any], redis_url: str, tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"memories": [
        {"text": "the office closes at six", "agent_id": None},
        {"text": "likes window seats", "agent_id": "known-agent"}]}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    redis = Redis.from_url(redis_url)
    try:
        for agent in ("ghost-1", "ghost-2"):
            body = (await client.get("/v1/memories/hot", params={"agent_id": agent}, headers=tenant.headers)).json()
            assert [item["text"] for item in body["items"]] == ["the office closes at six"]  # still answered
            assert not await redis.exists(hot_key(tenant.org_id, agent))
        r = await client.get("/v1/memories/hot", params={"agent_id": "known-agent"}, headers=tenant.headers)
        assert r.status_code == 200 and len(r.json()["items"]) == 2
        assert await redis.ttl(hot_key(tenant.org_id, "known-agent")) > 0  # an agent's set is cached, with a TTL
    finally:
        await redis.aclose()


class PoisonedEmbedder:
    """Embeds normally and records what it was asked, but fails every text containing ``poison``."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim = inner, "poisoned", inner.dim
        self.lengths: list[int] = []
        self.texts: list[str] = []

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.lengths += [len(t) for t in texts]
        self.texts += list(texts)
        if any("poison" in t for t in texts):
            raise EmbeddingError("this org's queries miss the deadline")
        return await self.inner.embed(texts)

    async def aclose(self) -> None:
        return None


async def test_long_queries_are_cut_before_embedding(settings: Settings, endpoints: Endpoints,
                                                     embedder: Embedder, tenant: Tenant) -> None:
    wrapper = PoisonedEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper) as client:
        query = " ".join(["the long meandering question about hiking trails"] * 80)  # ~3,900 characters
        r = await client.post("/v1/memories/search", json={"query": query, "strategy": "semantic"},
                              headers=tenant.headers)
        assert r.status_code == 200, r.text
        asked = [n for n, text in zip(wrapper.lengths, wrapper.texts, strict=True) if "hiking" in text]
        assert len(query) > 3800 and asked == [EMBED_QUERY_CHARS]  # (the start's warm-up embeds texts of its own)


async def test_one_orgs_embedding_failures_do_not_open_the_circuit_for_others(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, other_tenant: Tenant) -> None:
    wrapper = PoisonedEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper, embedder_failures_to_open=3) as client:
        for i in range(4):  # org A's queries fail: its circuit opens
            r = await client.post("/v1/memories/search", json={"query": f"poison question {i}", "strategy": "semantic"},
                                  headers=tenant.headers)
            assert r.status_code in (200, 503), r.text
        a = (await client.post("/v1/memories/search", json={"query": "tea"}, headers=tenant.headers)).json()
        assert a["reason"] == EMBEDDER_DOWN
        b = (await client.post("/v1/memories/search", json={"query": "tea"}, headers=other_tenant.headers)).json()
        assert b["reason"] != EMBEDDER_DOWN and b["metrics"]["embedding_cached"] is False  # B still embeds

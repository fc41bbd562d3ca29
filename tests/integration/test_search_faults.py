"""Search under failure and delay: embedder that raises or hangs, slow branches, parallelism proven.

Each test builds its own app (own settings, own embedder wrapper); the fault knobs are settings only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.db import Database, create_pool
from service.embeddings import Embedder, EmbeddingError
from service.errors import ServiceUnavailable
from service.retrieval import RetrievalEngine, SearchRequest
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_search import TEXTS, seed

pytestmark = pytest.mark.serial


class RaisingEmbedder:
    """Embeds memories normally, fails every query embedding once ``broken`` is set."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim, self.broken = inner, "raising", inner.dim, False

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.broken:
            raise EmbeddingError("provider exploded")
        return await self.inner.embed(texts)

    async def aclose(self) -> None:
        return None


class HangingEmbedder(RaisingEmbedder):
    """Hangs while ``broken`` (up to 30 s); calls hanging when it is mended complete, as a recovered
    embedder's would."""

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        for _ in range(3000):
            if not self.broken:
                break
            await asyncio.sleep(0.01)
        return await self.inner.embed(texts)


@contextlib.asynccontextmanager
async def app_client(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                     **retrieval: Any) -> AsyncIterator[AsyncTestClient[Any]]:
    custom = dataclasses.replace(settings, retrieval=dataclasses.replace(settings.retrieval, **retrieval))
    async with AsyncTestClient(app=create_app(custom, endpoints, embedder=embedder)) as client:
        yield client


async def post(client: AsyncTestClient[Any], tenant: Tenant, **body: Any) -> Any:
    return await client.post("/v1/memories/search", json=body, headers=tenant.headers)


async def test_embedder_that_raises_falls_back_to_lexical(settings: Settings, endpoints: Endpoints,
                                                          embedder: Embedder, tenant: Tenant) -> None:
    wrapper = RaisingEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper) as client:
        await seed(client, tenant)
        wrapper.broken = True
        for strategy in ("hybrid", "semantic", "lexical_first", "auto"):
            r = await post(client, tenant, query="dark roast coffee", strategy=strategy, limit=3)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["strategy"] == "lexical", strategy
            assert body["results"][0]["text"] == TEXTS[0]
            if strategy != "auto":
                assert "embedding failed" in body["fallback_reason"]
        # Within the cooldown auto does not even try the embedder, and says so.
        body = (await post(client, tenant, query="a new question about tea")).json()
        assert body["strategy"] == "lexical" and "embedder failed recently" in body["reason"]


async def test_auto_pauses_the_embedder_only_after_consecutive_failures(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    wrapper = RaisingEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper, embedder_failures_to_open=3) as client:
        await seed(client, tenant)
        wrapper.broken = True
        for i in range(2):  # one or two failures: each request tries the embedder, then falls back alone
            body = (await post(client, tenant, query=f"question number {i} about coffee")).json()
            assert body["strategy"] == "lexical" and "embedding failed" in body["fallback_reason"]
        wrapper.broken = False  # a success resets the count
        assert (await post(client, tenant, query="a healthy question about tea")).json()["strategy"] == "hybrid"
        wrapper.broken = True
        for i in range(3):
            body = (await post(client, tenant, query=f"another question {i} about espresso")).json()
            assert "embedding failed" in body["fallback_reason"]
        body = (await post(client, tenant, query="yet another question about milk")).json()
        assert body["strategy"] == "lexical" and "embedder failed recently" in body["reason"]
        assert body["fallback_reason"] is None  # it did not even try


async def test_auto_sheds_the_embedder_only_while_it_is_busy_and_slow(settings: Settings, endpoints: Endpoints,
                                                                      embedder: Embedder, tenant: Tenant) -> None:
    # The engine itself, on this test's event loop: requests through the test client do not overlap.
    wrapper = HangingEmbedder(embedder)
    async with app_client(settings, endpoints, embedder) as client:
        await seed(client, tenant)
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=4)
    try:
        def build(timeout_ms: int) -> RetrievalEngine:
            return RetrievalEngine(Database(pool, statement_timeout_ms=5000), wrapper, dataclasses.replace(
                settings.retrieval, embedder_max_in_flight=1, embedding_timeout_ms=timeout_ms,
                embedder_failures_to_open=5), max_limit=100)

        # One embedding in flight, but recent ones were quick: the next one waits its turn, in full.
        engine = build(1500)
        assert (await engine.search(tenant.org_id, SearchRequest(query="a warm-up question"))).strategy == "hybrid"
        wrapper.broken = True
        stuck = asyncio.ensure_future(engine.search(tenant.org_id, SearchRequest(query="a question it is stuck on")))
        await asyncio.sleep(0.2)
        assert not stuck.done() and engine.embedder_busy(tenant.org_id) is False
        # Recent embeddings took longer than 80% of their deadline (they timed out): now it sheds.
        engine = build(300)
        first = await engine.search(tenant.org_id, SearchRequest(query="a question that times out"))
        assert first.strategy == "lexical" and first.retrieval.reason == "embedder_timeout"
        stuck2 = asyncio.ensure_future(engine.search(tenant.org_id, SearchRequest(query="stuck again")))
        await asyncio.sleep(0.05)
        shed = await engine.search(tenant.org_id, SearchRequest(query="dark roast coffee beans", limit=3))
        assert shed.strategy == "lexical" and "embedder is busy" in shed.reason
        assert shed.retrieval.reason == "embedder_busy" and shed.retrieval.planned == "hybrid"
        assert shed.metrics.embedding_ms is None and shed.results[0].text == TEXTS[0]  # did not queue behind it
        # Either it embedded and timed out, or (its org's lane still held by the first's shielded,
        # still running embedding) it was shed as busy: lexical both ways, never waiting past its deadline.
        assert (await stuck2).retrieval.reason in ("embedder_timeout", "embedder_busy")
        wrapper.broken = False
        await asyncio.sleep(0.1)  # the hung embeddings complete and free the org's query lane
        assert (await engine.search(tenant.org_id, SearchRequest(query="a question about tea"))).strategy == "hybrid"
        # The first stuck search had 1.5 s: it got its embedding once mended, or fell back at its deadline.
        assert (await stuck).retrieval.reason in ("planned", "embedder_timeout")
    finally:
        await pool.close()


async def test_no_fallback_starts_once_the_callers_budget_is_spent(settings: Settings, endpoints: Endpoints,
                                                                   embedder: Embedder, tenant: Tenant) -> None:
    async with app_client(settings, endpoints, embedder) as client:
        await seed(client, tenant)
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=4)
    try:
        engine = RetrievalEngine(Database(pool, statement_timeout_ms=5000), embedder, dataclasses.replace(
            settings.retrieval, branch_delay_ms=400, lexical_timeout_ms=100), max_limit=100)
        request = SearchRequest(query="dark roast coffee", strategy="lexical", limit=3)
        # Without a budget the slow lexical branch (Postgres stops it at its statement_timeout) falls back ...
        fell_back = await engine.search(tenant.org_id, request)
        assert fell_back.strategy == "semantic"
        assert "lexical timed out after 100 ms" in (fell_back.fallback_reason or "")
        # ... with 50 ms to spend (an assembly's cold branch) nothing new starts after it.
        with pytest.raises(ServiceUnavailable) as caught:
            await engine.search(tenant.org_id, request, budget_ms=50)
        assert "out of time" in caught.value.details["semantic"]
        assert "lexical timed out" in caught.value.details["lexical"]
        assert caught.value.details["timed_out"] is True
    finally:
        await pool.close()


async def test_embedder_that_hangs_times_out_and_falls_back(settings: Settings, endpoints: Endpoints,
                                                            embedder: Embedder, tenant: Tenant) -> None:
    wrapper = HangingEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper, embedding_timeout_ms=200) as client:
        await seed(client, tenant)
        wrapper.broken = True
        r = await post(client, tenant, query="espresso descaling", strategy="hybrid", limit=3)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["strategy"] == "lexical" and "timed out after 200 ms" in body["fallback_reason"]
        assert body["results"][0]["text"] == TEXTS[1]
        assert body["metrics"]["total_ms"] < 1000


async def test_slow_lexical_falls_back_to_semantic_and_both_failing_is_503(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    wrapper = RaisingEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper, branch_delay_ms=400, lexical_timeout_ms=100,
                          semantic_timeout_ms=3000) as client:
        await seed(client, tenant)
        r = await post(client, tenant, query="dark roast coffee", strategy="hybrid", limit=3)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["strategy"] == "semantic" and "lexical timed out" in body["fallback_reason"]
        assert body["results"] and all(x["lexical_rank"] is None for x in body["results"])
        wrapper.broken = True  # a new query: a cached embedding would still serve the old one
        r = await post(client, tenant, query="roasted coffee beans", strategy="hybrid", limit=3)
        assert r.status_code == 503, r.text
        error = r.json()["error"]
        assert error["code"] == "search_unavailable"
        assert set(error["details"]) == {"lexical", "semantic", "timed_out"}
        assert error["details"]["timed_out"] is False  # the embedder failed: not a matter of time


async def test_branches_run_in_parallel(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                        tenant: Tenant) -> None:
    delay = 300
    async with app_client(settings, endpoints, embedder, branch_delay_ms=delay) as client:
        await seed(client, tenant)
        for _ in range(2):  # the second run has the query embedding cached: only the branches remain
            r = await post(client, tenant, query="coffee the user likes", strategy="hybrid", limit=5)
            assert r.status_code == 200, r.text
        m = r.json()["metrics"]
        assert r.json()["strategy"] == "hybrid"
        assert m["lexical_ms"] >= delay and m["semantic_ms"] >= delay
        slowest = max(m["lexical_ms"], m["semantic_ms"])
        assert m["total_ms"] < 1.5 * slowest, m
        assert m["total_ms"] < m["lexical_ms"] + m["semantic_ms"], m


async def test_a_slow_lexical_branch_delays_only_queries_that_name_a_speaker(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """The semantic branch walks HNSW with the query's own embedding without waiting for the lexical
    branch; only when the lexical candidates show that the query names a speaker does it search the
    query without the name (that walk replacing the first)."""
    from tests.integration.test_search import TURNS

    delay = 300
    async with app_client(settings, endpoints, embedder, branch_delay_ms=delay) as client:
        r = await client.post("/v1/memories", headers=tenant.headers, json={"memories": [
            {"text": f"{who}: {text}", "metadata": {"speaker": who}} for who, text in TURNS]})
        assert r.status_code == 201, r.text
        for query in ("what do people do to relax", "what does Melanie do to relax"):
            await post(client, tenant, query=query, strategy="semantic", limit=10)  # embeddings cached
        r = await post(client, tenant, query="what do people do to relax", strategy="hybrid", limit=10)
        m = r.json()["metrics"]
        assert "names left out" not in r.json()["reason"]
        assert m["total_ms"] < 1.5 * max(m["lexical_ms"], m["semantic_ms"]), m  # in parallel, as without speakers

        named = await post(client, tenant, query="what does Melanie do to relax", strategy="hybrid", limit=10)
        body = named.json()
        assert body["reason"].endswith("the semantic branch searched 'what does do to relax' (the names left out)")
        assert body["metrics"]["total_ms"] >= 2 * delay  # the lexical branch, then the topic's walk
        topic = (await post(client, tenant, query="what does do to relax", strategy="semantic", limit=10)).json()
        scores = {x["id"]: x["final_score"] for x in topic["results"]}
        assert body["results"] and all(x["semantic_score"] == pytest.approx(scores[x["id"]], abs=1e-6)
                                       for x in body["results"] if x["semantic_score"] is not None)

"""The ``retrieval`` report of a search: planned vs ran and why, for each reason a retrieval is reduced.

Every reason is provoked for real on the real Postgres and Redis: only the embedder is a test double
(one that fails, hangs, is slow, or returns vectors Postgres refuses).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import structlog

from service.db import Database, create_pool
from service.embeddings import Embedder
from service.retrieval import RetrievalEngine, SearchRequest
from service.retrieval.types import RetrievalReport
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_search import TEXTS, seed
from tests.integration.test_search_faults import RaisingEmbedder, app_client, post


class SlowEmbedder(RaisingEmbedder):
    """Query embeddings whose text contains ``slow`` take ``delay`` seconds first (memories embed normally)."""

    delay = 0.0

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) == 1 and "slow" in texts[0]:
            await asyncio.sleep(self.delay)
        return await self.inner.embed(texts)


class MisshapenEmbedder(RaisingEmbedder):
    """Once ``broken``, query embeddings come back with 3 dimensions: Postgres refuses the vector query."""

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.broken:
            return np.ones((len(texts), 3), dtype=np.float32)
        return await self.inner.embed(texts)


def report(body: dict[str, Any]) -> dict[str, Any]:
    found = body["retrieval"]
    assert isinstance(found, dict) and set(found) == {"planned", "ran", "reduced", "reason"}, found
    return found


@pytest.fixture
async def engine_for(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                     tenant: Tenant) -> AsyncIterator[Any]:
    """Seeds the tenant, then builds engines (on this test's loop, so searches can overlap) with the
    given embedder and retrieval settings."""
    async with app_client(settings, endpoints, embedder) as client:
        await seed(client, tenant)
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=8)

    def build(wrapper: Embedder, **retrieval: Any) -> RetrievalEngine:
        return RetrievalEngine(Database(pool, statement_timeout_ms=5000), wrapper,
                               dataclasses.replace(settings.retrieval, **retrieval), max_limit=100)

    try:
        yield build
    finally:
        await pool.close()


async def test_as_planned_the_report_says_so_and_the_log_line_carries_it(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with app_client(settings, endpoints, embedder) as client:
        await seed(client, tenant)
        with structlog.testing.capture_logs() as logs:
            body = (await post(client, tenant, query="how does the user like coffee")).json()
        assert body["strategy"] == "hybrid"
        assert report(body) == {"planned": "hybrid", "ran": "hybrid", "reduced": False, "reason": "planned"}
        line = next(e for e in logs if e["event"] == "memories_searched")
        assert (line["retrieval_planned"], line["retrieval_ran"], line["retrieval_reason"]) == (
            "hybrid", "hybrid", "planned")
        assert "query" not in line  # the query text never reaches the logs
        # auto's own choice for the query is the plan: an identifier query plans lexical.
        body = (await post(client, tenant, query="parse_config")).json()
        assert report(body) == {"planned": "lexical", "ran": "lexical", "reduced": False, "reason": "planned"}
        body = (await post(client, tenant, query="coffee", modes="all")).json()
        assert report(body) == {"planned": "modes", "ran": "modes", "reduced": False, "reason": "planned"}
        # The cascade with no lexical match ranks semantically instead, and says why.
        body = (await post(client, tenant, query="zyxwv qwertz", strategy="lexical_first")).json()
        assert report(body) == {"planned": "lexical_first", "ran": "semantic", "reduced": True,
                                "reason": "no_lexical_candidates"}


async def test_embedder_errors_then_the_open_circuit(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                     tenant: Tenant) -> None:
    wrapper = RaisingEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper, embedder_failures_to_open=2) as client:
        await seed(client, tenant)
        wrapper.broken = True
        for i in range(2):
            body = (await post(client, tenant, query=f"question {i} about coffee", strategy="hybrid")).json()
            assert report(body) == {"planned": "hybrid", "ran": "lexical", "reduced": True,
                                    "reason": "embedder_error"}
        body = (await post(client, tenant, query="a question about tea")).json()
        assert report(body) == {"planned": "hybrid", "ran": "lexical", "reduced": True,
                                "reason": "embedder_circuit_open"}
        body = (await post(client, tenant, query="a question about tea", modes="all")).json()
        assert body["modes"] is not None and "semantic" not in body["modes"]
        assert report(body) == {"planned": "modes", "ran": "modes", "reduced": True,
                                "reason": "embedder_circuit_open"}


async def test_embedding_timeouts_open_the_circuit_only_when_no_embedding_completes(
        engine_for: Any, embedder: Embedder, tenant: Tenant) -> None:
    wrapper = SlowEmbedder(embedder)
    wrapper.delay = 2.0
    engine: RetrievalEngine = engine_for(wrapper, embedding_timeout_ms=300, embedder_failures_to_open=2,
                                         embedder_stall_ms=450)
    # Load: three slow embeddings time out while another query's embedding completes: a queue, not
    # a broken embedder. Each falls back alone; the circuit stays closed.
    slow = [asyncio.ensure_future(engine.search(tenant.org_id, SearchRequest(query=f"slow question {i}",
                                                                             strategy="hybrid")))
            for i in range(3)]
    await asyncio.sleep(0.05)
    fast = await engine.search(tenant.org_id, SearchRequest(query="a quick question about coffee"))
    assert fast.retrieval == RetrievalReport(planned="hybrid", ran="hybrid", reduced=False, reason="planned")
    for response in await asyncio.gather(*slow):
        assert response.retrieval == RetrievalReport(planned="hybrid", ran="lexical", reduced=True,
                                                     reason="embedder_timeout")
    assert engine.embedder_available(tenant.org_id)
    # A hung embedder: timeouts while no embedding has completed for the stall time (450 ms) open it.
    await asyncio.sleep(0.3)
    hung = await asyncio.gather(*(engine.search(tenant.org_id, SearchRequest(query=f"slow hung {i}"))
                                  for i in range(2)))
    assert all(r.retrieval.reason == "embedder_timeout" for r in hung)
    assert not engine.embedder_available(tenant.org_id)
    shed = await engine.search(tenant.org_id, SearchRequest(query="another question about tea"))
    assert shed.retrieval == RetrievalReport(planned="hybrid", ran="lexical", reduced=True,
                                             reason="embedder_circuit_open")


async def test_a_burst_of_timeouts_from_a_working_embedder_does_not_open_the_circuit(
        engine_for: Any, embedder: Embedder, tenant: Tenant) -> None:
    # Every embedding takes 100 ms against a 30 ms deadline (assembly's are a few ms): each search
    # falls back, but embeddings keep completing, so it is a slow queue, not a broken embedder.
    # Before, three timeouts with no completion inside their own 30 ms opened the circuit.
    wrapper = SlowEmbedder(embedder)
    wrapper.delay = 0.1
    # (no busy shedding, so every search tries the embedder: each timeout could count)
    engine: RetrievalEngine = engine_for(wrapper, embedding_timeout_ms=30, embedder_failures_to_open=3,
                                         embedder_max_in_flight=0, embedder_stall_ms=400)
    for i in range(8):
        found = await engine.search(tenant.org_id, SearchRequest(query=f"slow burst question {i}"))
        assert found.retrieval == RetrievalReport(planned="hybrid", ran="lexical", reduced=True,
                                                  reason="embedder_timeout")
        assert engine.embedder_available(tenant.org_id)
    await asyncio.sleep(0.9)  # the queued ones complete (one org, one query slot): the next embeds in time
    wrapper.delay = 0.0
    quick = await engine.search(tenant.org_id, SearchRequest(query="a quick question about coffee"))
    assert quick.retrieval == RetrievalReport(planned="hybrid", ran="hybrid", reduced=False, reason="planned")


async def test_a_failed_or_late_vector_query_is_reported(engine_for: Any, embedder: Embedder,
                                                         tenant: Tenant) -> None:
    wrapper = MisshapenEmbedder(embedder)
    engine: RetrievalEngine = engine_for(wrapper)
    wrapper.broken = True  # Postgres itself refuses the 3-dimension vector: a real branch error
    failed = await engine.search(tenant.org_id, SearchRequest(query="coffee beans storage", strategy="hybrid"))
    assert failed.retrieval == RetrievalReport(planned="hybrid", ran="lexical", reduced=True, reason="branch_error")
    assert failed.fallback_reason is not None and "semantic failed" in failed.fallback_reason
    late = engine_for(embedder, branch_delay_ms=400, semantic_timeout_ms=100, lexical_timeout_ms=3000)
    response = await late.search(tenant.org_id, SearchRequest(query="coffee beans storage", strategy="semantic"))
    assert response.retrieval == RetrievalReport(planned="semantic", ran="lexical", reduced=True,
                                                 reason="branch_timeout")
    assert response.results and response.results[0].text in TEXTS

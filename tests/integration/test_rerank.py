"""The optional reranker stage against a real HTTP server on loopback (aiohttp) speaking each
provider's ``/rerank`` format, with real Postgres behind the search: applied, skipped for lack of
time, and failed (slow, erroring, nonsense) with the fused order kept and the reason reported."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from litestar.testing import AsyncTestClient

from service.db import Database
from service.embeddings import Embedder
from service.retrieval import RetrievalEngine, SearchRequest, SearchResponse
from service.runtime import Endpoints
from service.settings import RerankProvider, RerankSettings, Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_search import seed

QUERY = "coffee beans espresso dark roast"


def stub_score(text: str) -> float:
    """The stub's 'model': shorter texts are more relevant, an order fusion does not produce."""
    return round(1.0 / (1 + len(text)), 6)


@dataclass
class Stub:
    provider: RerankProvider
    mode: str = "ok"
    """ok | slow | error | garbage | partial"""
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""

    async def rerank(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"body": body, "auth": request.headers.get("Authorization"), "path": request.path})
        if self.mode == "slow":
            await asyncio.sleep(2)
        if self.mode == "error":
            return web.json_response({"error": "model not loaded"}, status=503)
        if self.mode == "garbage":
            return web.Response(text="<html>gateway</html>", content_type="text/html")
        texts: list[str] = body["texts"] if self.provider == "tei" else body["documents"]
        scored = sorted(((i, stub_score(t)) for i, t in enumerate(texts)), key=lambda p: -p[1])
        if self.mode == "partial":
            scored = scored[:-1]
        if self.provider == "tei":  # TEI answers a bare list, best first
            return web.json_response([{"index": i, "score": s} for i, s in scored])
        results: list[dict[str, Any]] = [{"index": i, "relevance_score": s} for i, s in scored]
        if self.provider == "jina":
            for item in results:
                item["document"] = {"text": texts[int(item["index"])]}
        return web.json_response({"model": body["model"], "results": results})


@pytest.fixture
def stub_server() -> Iterator[Stub]:
    """The stub on its own event loop in a thread: Litestar's test client runs the app in a portal
    thread and blocks the test's loop while it waits, so a server on that loop could not answer."""
    stub = Stub(provider="tei")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/rerank", stub.rerank)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        stub.url = f"http://{host}:{port}"
        return runner

    runner = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield stub
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()




def rerank_settings(stub: Stub, provider: RerankProvider, **kw: Any) -> RerankSettings:
    stub.provider = provider
    model = None if provider == "tei" else f"{provider}-rerank-test"
    return RerankSettings(provider=provider, api_base=stub.url, api_key="sekret", model=model, **kw)


async def run_search(db: Database, embedder: Embedder, settings: Settings, rerank: RerankSettings, tenant: Tenant,
                     budget_ms: float | None = None, **request: Any) -> SearchResponse:
    engine = RetrievalEngine(db, embedder, dataclasses.replace(settings.retrieval, rerank=rerank), max_limit=50)
    try:
        return await engine.search(tenant.org_id, SearchRequest(query=QUERY, **request), budget_ms=budget_ms)
    finally:
        await engine.aclose()


@pytest.mark.parametrize("provider", ["tei", "cohere", "jina"])
async def test_each_provider_format_reorders_the_fused_top_n(
        client: AsyncTestClient[Any], db: Database, embedder: Embedder, settings: Settings, tenant: Tenant,
        stub_server: Stub, provider: RerankProvider) -> None:
    await seed(client, tenant)
    fused = await run_search(db, embedder, settings, RerankSettings(), tenant, strategy="hybrid", limit=8)
    assert fused.rerank is None and all(r.fused_score is None for r in fused.results)

    response = await run_search(db, embedder, settings, rerank_settings(stub_server, provider, top_n=8), tenant,
                                strategy="hybrid", limit=3)
    (sent,) = stub_server.requests
    assert sent["path"] == "/rerank" and sent["auth"] == "Bearer sekret"
    if provider == "tei":
        assert sent["body"]["query"] == QUERY and sent["body"]["texts"] == [r.text for r in fused.results]
    else:
        body = sent["body"]
        assert body["model"] == f"{provider}-rerank-test" and body["query"] == QUERY
        assert body["documents"] == [r.text for r in fused.results] and body["top_n"] == len(fused.results)
    assert response.rerank is not None and response.rerank.outcome == "applied", response.rerank
    assert response.rerank.candidates == len(fused.results) and provider in response.rerank.detail
    expected = sorted(fused.results, key=lambda r: stub_score(r.text), reverse=True)[:3]
    assert [r.id for r in response.results] == [r.id for r in expected]
    fused_scores = {r.id: r.final_score for r in fused.results}
    for r in response.results:
        assert r.final_score == pytest.approx(stub_score(r.text))
        assert r.fused_score == pytest.approx(fused_scores[r.id])
        assert r.lexical_rank is not None or r.semantic_rank is not None  # the fusion's view is kept
    assert response.metrics.final_count == 3 and response.metrics.rerank_ms is not None


@pytest.mark.parametrize(("mode", "why"), [
    ("slow", "timed out after 150 ms"),
    ("error", "returned HTTP 503"),
    ("garbage", "malformed JSON"),
    ("partial", "scored 7 of 8 candidates"),
])
async def test_a_failing_reranker_keeps_the_fused_order_and_says_why(
        client: AsyncTestClient[Any], db: Database, embedder: Embedder, settings: Settings, tenant: Tenant,
        stub_server: Stub, mode: str, why: str) -> None:
    await seed(client, tenant)
    fused = await run_search(db, embedder, settings, RerankSettings(), tenant, strategy="hybrid", limit=3)
    stub_server.mode = mode
    loop = asyncio.get_running_loop()
    started = loop.time()
    response = await run_search(db, embedder, settings, rerank_settings(stub_server, "cohere", top_n=8,
                                                                        timeout_ms=150), tenant,
                                strategy="hybrid", limit=3)
    assert loop.time() - started < 1.5  # the slow stub sleeps 2 s: the search did not wait for it
    assert len(stub_server.requests) == 1
    assert response.rerank is not None and response.rerank.outcome == "failed"
    assert why in response.rerank.detail and "fused order kept" in response.rerank.detail
    assert [(r.id, r.final_score) for r in response.results] == [(r.id, r.final_score) for r in fused.results]
    assert all(r.fused_score is None for r in response.results)


async def test_skipped_when_the_search_has_less_time_left_than_the_reranker_needs(
        client: AsyncTestClient[Any], db: Database, embedder: Embedder, settings: Settings, tenant: Tenant,
        stub_server: Stub) -> None:
    await seed(client, tenant)
    response = await run_search(db, embedder, settings, rerank_settings(stub_server, "tei", timeout_ms=5000),
                                tenant, budget_ms=2000, strategy="lexical", limit=3)
    assert stub_server.requests == []
    assert response.rerank is not None and response.rerank.outcome == "skipped"
    assert "ms left in the search's budget" in response.rerank.detail and "5000 ms" in response.rerank.detail
    assert len(response.results) == 3 and response.metrics.rerank_ms is None
    # With time to spare, the same search is reranked.
    response = await run_search(db, embedder, settings, rerank_settings(stub_server, "tei", timeout_ms=500),
                                tenant, budget_ms=2000, strategy="lexical", limit=3)
    assert response.rerank is not None and response.rerank.outcome == "applied"


async def test_over_http_and_in_assembly(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                         tenant: Tenant, stub_server: Stub) -> None:
    rerank = dataclasses.asdict(rerank_settings(stub_server, "jina", timeout_ms=1000))
    async with assembly_client(settings, endpoints, embedder, retrieval={"rerank": RerankSettings(**rerank)},
                               **GENEROUS) as client:
        await seed(client, tenant, agent_id="helper")
        r = await client.post("/v1/memories/search", json={"query": QUERY, "limit": 2}, headers=tenant.headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["rerank"]["outcome"] == "applied" and body["rerank"]["provider"] == "jina"
        assert all(x["fused_score"] is not None for x in body["results"])
        # Assembly's cold search reranks within its budget (generous here) and says so in the branch detail.
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "helper", "query": QUERY, "model": "gpt-4o", "max_context_tokens": 1000})
        assert r.status_code == 200, r.text
        assert "rerank applied: jina reranked" in r.json()["branches"]["cold"]["detail"]
    slow = RerankSettings(**{**rerank, "timeout_ms": 10_000})
    async with assembly_client(settings, endpoints, embedder, retrieval={"rerank": slow}, **GENEROUS) as client:
        # The cold budget (3 s here, tens of ms by default) is shorter than the reranker's 10 s timeout:
        # skipped, and assembly still answers from the fused order.
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "helper", "query": QUERY, "model": "gpt-4o", "max_context_tokens": 1000})
        assert r.status_code == 200, r.text
        assert "rerank skipped" in r.json()["branches"]["cold"]["detail"]

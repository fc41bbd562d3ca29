"""``score`` on search results and assembled memories: in [0, 1], the hit's own evidence (the same under every
fusion method), falling with the rank in single-branch searches, and what assembly reports for its items."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.retrieval.score import hit_score
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_search import search, seed

pytestmark = pytest.mark.integration

DRINKS = [
    "The user drinks dark roast coffee every morning before work.",
    "The user switched to oat milk in coffee last spring.",
    "Green tea with jasmine is the user's afternoon drink.",
    "The user avoids coffee after four in the afternoon.",
    "Cold brew coffee is the user's summer favourite drink.",
    "The user's partner prefers black tea with lemon.",
    "The user grinds coffee beans fresh each morning.",
    "Decaf coffee tastes flat to the user.",
    "The user keeps a tin of rooibos tea at the office.",
    "The office coffee machine needs descaling every two months.",
    "The user drinks a glass of water before coffee.",
    "Herbal tea helps the user sleep.",
    "The deployment pipeline runs integration tests before each release.",
    "Our Postgres cluster uses pgvector for nearest neighbour search.",
]
QUERY = "what coffee or tea does the user drink in the morning"


def in_unit_range(values: list[float]) -> bool:
    return all(0.0 <= v <= 1.0 for v in values)


async def test_search_scores_are_the_hits_own_evidence_whatever_the_fusion(client: AsyncTestClient[Any],
                                                                           tenant: Tenant) -> None:
    await seed(client, tenant, DRINKS)
    by_fusion: dict[str, dict[str, float]] = {}
    for fusion in ("auto", "rrf", "convex"):
        body = await search(client, tenant, query=QUERY, strategy="hybrid", limit=10, tuning={"fusion": fusion})
        results = body["results"]
        assert len(results) == 10
        if fusion == "auto":
            assert {r["fusion_method"] for r in results} == {"zscore"}, body["reason"]
        scores = [r["score"] for r in results]
        assert in_unit_range(scores) and max(scores) > 0.3, scores
        for r in results:  # exactly the documented function of the hit's lexical and semantic scores
            assert r["score"] == hit_score(r["lexical_score"], r["semantic_score"])
        by_fusion[fusion] = {r["id"]: r["score"] for r in results}
    finals = {fusion: [r["final_score"] for r in (await search(client, tenant, query=QUERY, strategy="hybrid",
                                                                limit=3, tuning={"fusion": fusion}))["results"]]
              for fusion in ("auto", "rrf")}
    assert max(finals["rrf"]) < 0.05 < max(finals["auto"])  # the ranking scores' scales differ by the fusion
    for fusion in ("rrf", "convex"):  # the same memory scores the same under every fusion
        shared = by_fusion["auto"].keys() & by_fusion[fusion].keys()
        assert len(shared) >= 7
        assert all(by_fusion["auto"][i] == by_fusion[fusion][i] for i in shared)
    off_topic = await search(client, tenant, query="pgvector nearest neighbour search in Postgres", strategy="hybrid",
                             limit=14, tuning={"fusion": "rrf"})
    scored = {r["text"]: r["score"] for r in off_topic["results"]}
    best = scored["Our Postgres cluster uses pgvector for nearest neighbour search."]
    assert best == max(scored.values()) and best > scored.get("Herbal tea helps the user sleep.", 0.0) + 0.2


async def test_single_branch_scores_fall_with_the_rank(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await seed(client, tenant, DRINKS)
    for strategy in ("lexical", "semantic"):
        results = (await search(client, tenant, query=QUERY, strategy=strategy, limit=10))["results"]
        scores = [r["score"] for r in results]
        assert len(scores) >= 5 and in_unit_range(scores)
        assert scores == sorted(scores, reverse=True), (strategy, scores)


async def test_assembled_memories_carry_their_search_score(settings: Settings, endpoints: Endpoints,
                                                           embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant, DRINKS, agent_id="barista")
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "barista", "query": QUERY, "model": "gpt-4o", "max_context_tokens": 120,
            "reserve_tokens": 0})
        assert r.status_code == 200, r.text
        body = r.json()
        hits = {h["id"]: h for h in (await search(client, tenant, query=QUERY, strategy=body["retrieval"]["ran"],
                                                   limit=14, filters={"agent_id": "barista"}))["results"]}
    used, dropped = body["memories_used"], body["dropped"]
    assert body["branches"]["cold"]["outcome"] == "ok", body["branches"]["cold"]
    assert used and dropped and in_unit_range([m["score"] for m in used + dropped])
    both = 0
    for m in used:
        hit = hits.get(m["id"])
        if m["origin"] == "cold":  # the search hit's own score
            assert hit is not None and m["score"] == hit["score"], (m, hit)
        elif m["in_hot_and_cold"]:  # the higher of the hot set's cosine and the hit's score, which holds that cosine
            assert hit is not None and abs(m["score"] - hit["score"]) <= 1e-3, (m, hit)
            both += 1
    assert both  # this agent's memories are all in its hot set, and the search found them
    texts = {m["text"]: m["score"] for m in used}
    coffee = texts.get("The user drinks dark roast coffee every morning before work.")
    assert coffee is not None and coffee > 0.3

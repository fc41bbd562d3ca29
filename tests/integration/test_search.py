"""POST /v1/memories/search against real Postgres + Redis: ranks, cascade ids, filters, isolation, auto."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np
import pytest
from litestar.testing import AsyncTestClient

from service.db import Database, create_pool
from service.embeddings import Embedder
from service.retrieval import SearchRequest, branches
from service.retrieval.engine import RetrievalEngine
from service.runtime import Endpoints, Services
from service.settings import Settings
from tests.conftest import Tenant

TEXTS = [
    "The user prefers dark roast coffee in the morning.",
    "Espresso machines need descaling every two months.",
    "The deployment pipeline runs integration tests before release.",
    "Our Postgres cluster uses pgvector for nearest neighbour search.",
    "The user is allergic to peanuts and avoids nut-based snacks.",
    "Coffee beans should be stored in an airtight container away from light.",
    "The config parser lives in service/settings.py and reads PGCONTEXT variables.",
    "A green tea with jasmine is the user's afternoon drink.",
]
STRATEGIES = ["hybrid", "lexical", "semantic", "lexical_first", "auto"]


async def seed(client: AsyncTestClient[Any], tenant: Tenant, texts: list[str] = TEXTS,
               **extra: Any) -> list[UUID]:
    r = await client.post("/v1/memories", json={"memories": [{"text": t, **extra} for t in texts]},
                          headers=tenant.headers)
    assert r.status_code == 201, r.text
    return [UUID(i) for i in r.json()["ids"]]


async def search(client: AsyncTestClient[Any], tenant: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/memories/search", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def check_shape(body: dict[str, Any], limit: int) -> None:
    scores = [r["final_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["metrics"]["final_count"] == len(body["results"]) <= limit
    assert body["metrics"]["total_ms"] > 0


async def test_hybrid_results_carry_both_ranks(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await seed(client, tenant)
    body = await search(client, tenant, query="what coffee does the user like", strategy="hybrid", limit=5)
    check_shape(body, 5)
    assert body["strategy"] == "hybrid" and body["fallback_reason"] is None
    both = [r for r in body["results"] if r["lexical_rank"] is not None and r["semantic_rank"] is not None]
    assert both, body["results"]
    top = both[0]
    assert top["lexical_score"] > 0 and -1 <= top["semantic_score"] <= 1
    # 4 of the 8 memories say "coffee" or "user": too few to standardise, so auto fusion says it used RRF
    assert {r["fusion_method"] for r in body["results"]} == {"rrf"}
    assert body["reason"] == ("requested; fusion rrf (k 60): the lexical branch returned 4 candidates "
                              "(z-scores need 5)"), body["reason"]
    assert body["results"][0]["text"] in (TEXTS[0], TEXTS[5])
    metrics = body["metrics"]
    assert metrics["lexical_candidates"] >= 1 and metrics["semantic_candidates"] >= 1
    assert set(body["results"][0]) >= {"id", "text", "kind", "source", "level", "breadcrumb", "final_score",
                                       "lexical_rank", "semantic_rank", "lexical_score", "semantic_score",
                                       "fusion_method"}


async def test_convex_fusion_is_reported(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await seed(client, tenant)
    body = await search(client, tenant, query="coffee storage", strategy="hybrid", limit=3,
                        tuning={"fusion": "convex", "convex_alpha": 0.3})
    check_shape(body, 3)
    assert {r["fusion_method"] for r in body["results"]} == {"convex"}
    assert all(0.0 <= r["final_score"] <= 1.0 for r in body["results"])


async def test_auto_fusion_standardises_scores_and_says_so(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    notes = [f"Note {i}: the user drank {n} cups of coffee on day {i}." for i, n in
             enumerate(["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"])]
    await seed(client, tenant, [*TEXTS, *notes])
    body = await search(client, tenant, query="how much coffee does the user drink", limit=5)
    check_shape(body, 5)
    assert body["strategy"] == "hybrid" and body["reason"].startswith(
        "auto: natural-language query, hybrid; fusion zscore (semantic weight 0.4): best hit "), body["reason"]
    assert {r["fusion_method"] for r in body["results"]} == {"zscore"}
    assert all(r["final_score"] >= 0 for r in body["results"])
    rrf = await search(client, tenant, query="how much coffee does the user drink", limit=5, strategy="hybrid",
                       tuning={"fusion": "rrf"})
    assert rrf["reason"] == "requested" and {r["fusion_method"] for r in rrf["results"]} == {"rrf"}


TURNS = [
    ("Caroline", "Melanie, how do you relax after a long week with the kids?"),
    ("Melanie", "I'm off to go swimming with the kids, it's how I unwind."),
    ("Caroline", "Melanie said painting helps her relax, and I want to try it too."),
    ("Melanie", "Pottery class on Fridays is my way to relax and recharge."),
    ("Caroline", "I relax by reading and walking my dog in the park."),
    ("Melanie", "Camping with the family last weekend was so relaxing."),
    ("Caroline", "Melanie and I talked about relaxing hobbies for an hour."),
    ("Caroline", "The support group meets on Tuesdays."),
    ("Melanie", "The kids love the beach in summer."),
    ("Caroline", "My counselor suggested journaling to relax."),
]


async def test_auto_fusion_ranks_up_turns_said_by_someone_the_query_names(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", headers=tenant.headers, json={"memories": [
        {"text": f"{who}: {text}", "kind": "episode", "metadata": {"speaker": who}} for who, text in TURNS]})
    assert r.status_code == 201, r.text
    speaker = {i: who for i, (who, _text) in zip(r.json()["ids"], TURNS, strict=True)}
    query = "How does Melanie relax?"
    boosted = await search(client, tenant, query=query, strategy="auto", limit=10)
    plain = await search(client, tenant, query=query, strategy="auto", limit=10, tuning={"speaker_boost": 0})
    assert boosted["strategy"] == plain["strategy"] == "hybrid"
    assert boosted["reason"].endswith(
        "candidates said by someone the query names (speaker or metadata.speaker) +1.5 sd; "
        "the semantic branch searched 'How does relax?' (the names left out)"), boosted["reason"]
    assert "names" not in plain["reason"]
    # The semantic branch searched the topic: each result's semantic score is that of the query
    # without the name, and the lexical one that of the query as asked.
    topic = await search(client, tenant, query="How does relax?", strategy="semantic", limit=10)
    as_asked = await search(client, tenant, query=query, strategy="semantic", limit=10)
    words = await search(client, tenant, query=query, strategy="lexical", limit=10)
    topic_scores = {x["id"]: x["final_score"] for x in topic["results"]}
    own_scores = {x["id"]: x["final_score"] for x in as_asked["results"]}
    lexical_scores = {x["id"]: x["final_score"] for x in words["results"]}
    assert topic_scores != own_scores
    for x in boosted["results"]:
        assert x["semantic_score"] == pytest.approx(topic_scores[x["id"]], abs=1e-6)
        assert x["lexical_score"] == pytest.approx(lexical_scores.get(x["id"]))
    for x in plain["results"]:  # the boost off: the query as asked on both sides
        assert x["semantic_score"] == pytest.approx(own_scores[x["id"]], abs=1e-6)
    assert {x["id"] for x in plain["results"]} == {x["id"] for x in boosted["results"]} == set(speaker)
    def ranks(body: dict[str, Any]) -> list[int]:
        return [n for n, x in enumerate(body["results"]) if speaker[x["id"]] == "Melanie"]
    assert ranks(boosted)[:2] == [0, 1] and sum(ranks(boosted)) < sum(ranks(plain))
    # no one named, or a branch alone: no boost
    neutral = await search(client, tenant, query="how do people relax?", strategy="auto", limit=10)
    assert "names" not in neutral["reason"]
    lexical = await search(client, tenant, query=query, strategy="lexical", limit=10)
    assert {x["fusion_method"] for x in lexical["results"]} == {"none"}


async def test_single_branch_strategies(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await seed(client, tenant)
    lexical = await search(client, tenant, query="peanuts allergy", strategy="lexical", limit=3)
    assert lexical["strategy"] == "lexical" and lexical["results"][0]["text"] == TEXTS[4]
    assert all(r["semantic_rank"] is None and r["lexical_rank"] is not None for r in lexical["results"])
    assert lexical["metrics"]["semantic_ms"] is None
    semantic = await search(client, tenant, query="food the user must not eat", strategy="semantic", limit=3)
    assert semantic["strategy"] == "semantic" and semantic["results"][0]["text"] == TEXTS[4]
    assert all(r["lexical_rank"] is None and r["fusion_method"] == "none" for r in semantic["results"])
    for body in (lexical, semantic):
        check_shape(body, 3)


async def test_cascade_vector_step_receives_only_lexical_ids(
        client: AsyncTestClient[Any], tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    await seed(client, tenant)
    seen: list[list[UUID]] = []
    real = branches.search_l1_by_ids

    async def spy(tx: Any, embedding: Any, ids: list[UUID], *, limit: int) -> Any:
        seen.append(list(ids))
        return await real(tx, embedding, ids, limit=limit)

    monkeypatch.setattr(branches, "search_l1_by_ids", spy)
    query = "the user coffee"
    lexical = await search(client, tenant, query=query, strategy="lexical", limit=3)
    lexical_ids = [UUID(r["id"]) for r in lexical["results"]]
    assert len(lexical_ids) == 3  # the cascade width below really narrows (more rows match "user")
    body = await search(client, tenant, query=query, strategy="lexical_first", limit=2, tuning={"cascade_width": 3})
    assert body["strategy"] == "lexical_first"
    assert seen == [lexical_ids]
    assert {UUID(r["id"]) for r in body["results"]} <= set(lexical_ids)
    assert all(r["fusion_method"] == "cascade" and r["lexical_rank"] is not None and r["semantic_rank"] is not None
               for r in body["results"])
    check_shape(body, 2)
    assert body["metrics"]["lexical_candidates"] == 3


async def test_filters_are_respected_by_every_strategy(client: AsyncTestClient[Any], tenant: Tenant,
                                                       owner_dsn: str) -> None:
    a_ids = await seed(client, tenant, agent_id="agent-a", kind="preference", metadata={"team": "x"})
    b_ids = await seed(client, tenant, agent_id="agent-b", kind="fact", metadata={"team": "y"})
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("UPDATE memories SET source_path = 'docs/a/' || id, level = 1 WHERE id = ANY($1)",
                           a_ids[:4])
        await conn.execute("UPDATE memories SET created_at = now() - interval '10 days' WHERE id = ANY($1)",
                           a_ids[4:])
    finally:
        await conn.close()
    query = "coffee the user likes"
    week_ago = (datetime.now(UTC) - timedelta(days=7)).isoformat()
    cases: list[tuple[dict[str, Any], set[UUID]]] = [
        ({"agent_id": "agent-a"}, set(a_ids)),
        ({"kinds": ["fact"]}, set(b_ids)),
        ({"metadata": {"team": "y"}}, set(b_ids)),
        ({"source_prefix": "docs/a/"}, set(a_ids[:4])),
        ({"source_prefix": "docs/%"}, set()),  # wildcards are literal
        ({"levels": [1]}, set(a_ids[:4])),
        ({"created_before": week_ago}, set(a_ids[4:])),
        ({"created_after": week_ago, "agent_id": "agent-a"}, set(a_ids[:4])),
    ]
    for filters, allowed in cases:
        for strategy in STRATEGIES:
            body = await search(client, tenant, query=query, strategy=strategy, limit=8, filters=filters)
            got = {UUID(r["id"]) for r in body["results"]}
            assert got <= allowed, (filters, strategy)
            if allowed and strategy != "lexical":
                assert got, (filters, strategy)


async def test_expired_memories_never_appear(client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    ids = await seed(client, tenant)
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("UPDATE memories SET expires_at = now() - interval '1 second' WHERE id = $1", ids[0])
    finally:
        await conn.close()
    for strategy in STRATEGIES:
        body = await search(client, tenant, query="dark roast coffee morning", strategy=strategy, limit=8)
        assert ids[0] not in {UUID(r["id"]) for r in body["results"]}, strategy


async def test_another_orgs_rows_never_appear(client: AsyncTestClient[Any], tenant: Tenant,
                                              other_tenant: Tenant) -> None:
    mine = set(await seed(client, tenant))
    theirs = set(await seed(client, other_tenant))
    for strategy in STRATEGIES:
        body = await search(client, tenant, query="dark roast coffee", strategy=strategy, limit=20)
        got = {UUID(r["id"]) for r in body["results"]}
        assert got and got <= mine and not got & theirs, strategy


async def test_auto_explains_its_choice(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await seed(client, tenant)
    natural = await search(client, tenant, query="what does the user drink in the afternoon")
    assert natural["requested_strategy"] == "auto" and natural["strategy"] == "hybrid"
    assert natural["reason"].startswith("auto:")
    ident = await search(client, tenant, query="service/settings.py")
    assert ident["strategy"] == "lexical" and "identifier" in ident["reason"]
    assert ident["results"][0]["text"] == TEXTS[6]
    filtered = await search(client, tenant, query="coffee", filters={"metadata": {}})
    assert filtered["strategy"] == "lexical_first" and "metadata" in filtered["reason"]


async def test_no_lexical_match_cascade_falls_back_to_semantic(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await seed(client, tenant)
    body = await search(client, tenant, query="beverage", strategy="lexical_first", limit=3)
    assert body["strategy"] == "semantic" and "no candidates" in body["fallback_reason"]
    assert body["results"]


async def test_an_empty_time_range_is_a_422(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """Each bound matches the schema; only together do they select nothing: 422, not 400."""
    body = {"query": "x",
            "filters": {"created_after": "2026-01-02T00:00:00Z", "created_before": "2026-01-01T00:00:00Z"}}
    r = await client.post("/v1/memories/search", json=body, headers=tenant.headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["message"] == "filters.created_after must be before filters.created_before"


@pytest.mark.parametrize("body", [
    {"query": "x", "bogus": 1},
    {"query": ""},
    {"query": "   "},
    {"query": "x", "limit": 0},
    {"query": "x", "limit": 100_000},
    {"query": "x", "strategy": "magic"},
    {"query": "x", "filters": {"levels": [7]}},
    {"query": "x", "filters": {"kinds": []}},
    {"query": "x", "tuning": {"fusion": "max"}},
    {"query": "x", "tuning": {"rrf_k": 0}},
    {"query": "x", "tuning": {"speaker_boost": -1}},
    {"query": "x", "tuning": {"speaker_boost": 11}},
    {"query": "a\u0000b"},
])
async def test_invalid_requests_are_clear_400s(client: AsyncTestClient[Any], tenant: Tenant,
                                               body: dict[str, Any]) -> None:
    r = await client.post("/v1/memories/search", json=body, headers=tenant.headers)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_error" and error["message"]


async def test_search_needs_a_key(client: AsyncTestClient[Any]) -> None:
    r = await client.post("/v1/memories/search", json={"query": "x"})
    assert r.status_code == 401


async def test_python_api_for_other_features(client: AsyncTestClient[Any], services: Services, tenant: Tenant,
                                             endpoints: Endpoints, settings: Settings, embedder: Embedder) -> None:
    await seed(client, tenant)
    assert isinstance(services.extras["retrieval"], RetrievalEngine)
    # The app's pool belongs to the test client's event loop: build an engine on this loop's own pool.
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=4), statement_timeout_ms=5000)
    try:
        engine = RetrievalEngine(db, embedder, settings.retrieval, max_limit=50)
        response = await engine.search(tenant.org_id, SearchRequest(query="airtight container", limit=2))
        assert response.strategy == "hybrid" and response.results[0].text == TEXTS[5]
        assert response.metrics.final_count == len(response.results) <= 2
        cached = engine.cache.peek(tenant.org_id, "airtight container")  # the same text is not embedded twice
        assert isinstance(cached, np.ndarray) and cached.shape == (384,)
    finally:
        await db.close()


async def test_hybrid_fuses_at_least_twice_the_limit_from_each_branch(
        client: AsyncTestClient[Any], tenant: Tenant, endpoints: Endpoints, settings: Settings,
        embedder: Embedder) -> None:
    # 80 notes that all match the query's words, so each branch can offer every row.
    topics = ["garden", "invoice", "backup", "recipe", "flight", "meeting", "printer", "budget"]
    await seed(client, tenant, [f"Project note {i}: the {topics[i % 8]} list item {i}." for i in range(80)])
    deep = await search(client, tenant, query="project note item", strategy="hybrid", limit=30)
    assert (deep["metrics"]["lexical_candidates"], deep["metrics"]["semantic_candidates"]) == (60, 60)
    assert len(deep["results"]) == 30
    default = await search(client, tenant, query="project note item", strategy="hybrid", limit=10)
    assert (default["metrics"]["lexical_candidates"], default["metrics"]["semantic_candidates"]) == (50, 50)
    floor = await search(client, tenant, query="project note item", strategy="hybrid", limit=30,
                         tuning={"lexical_candidates": 70, "semantic_candidates": 20})
    assert (floor["metrics"]["lexical_candidates"], floor["metrics"]["semantic_candidates"]) == (70, 60)
    # Context assembly's search (rows with their scoring fields) keeps max(candidates, limit) of the lexical
    # branch and half as many (at least 20) of the semantic one.
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=4), statement_timeout_ms=5000)
    try:
        engine = RetrievalEngine(db, embedder, settings.retrieval, max_limit=200)
        request = SearchRequest(query="project note item", strategy="hybrid", limit=60)
        response, rows = await engine.search_rows(tenant.org_id, request, ("someone", True, True))
        assert (response.metrics.lexical_candidates, response.metrics.semantic_candidates) == (60, 30)
        assert len(response.results) == 60 and set(rows) >= {r.id for r in response.results}
    finally:
        await db.close()

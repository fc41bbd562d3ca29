"""POST /v1/memories/search with ``modes``: exact, path, symbol, lexical and semantic as modes of one
machine — one query shape, one result shape, RRF across modes — against real Postgres + Redis."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.db import Database
from service.embeddings import Embedder
from service.retrieval import SearchRequest, modes
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_documents_lookup import FILES, LEDGER, SLUG, SPHERE, line_of
from tests.integration.test_search_faults import RaisingEmbedder, app_client

ALL = ["exact", "path", "symbol", "lexical", "semantic"]
RESULT_FIELDS = {"id", "text", "kind", "source", "level", "breadcrumb", "final_score", "lexical_rank",
                 "semantic_rank", "lexical_score", "semantic_score", "fusion_method", "path", "line_start",
                 "line_end", "excerpt", "excerpt_line_start", "excerpt_line_end", "mode", "modes"}
EXTRA = '''"""Notes that also mention the billing slug."""

NOTE = "RETRY_CACHE_SLUG is defined in billing/ledger.py"
'''


async def ingest(client: AsyncTestClient[Any], tenant: Tenant, files: dict[str, str], **extra: Any) -> None:
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": p, "content": c} for p, c in files.items()], **extra})
    assert r.status_code == 200, r.text


async def search(client: AsyncTestClient[Any], tenant: Tenant, **body: Any) -> dict[str, Any]:
    r = await client.post("/v1/memories/search", json=body, headers=tenant.headers)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


def check_shape(body: dict[str, Any], limit: int) -> None:
    assert body["strategy"] == "modes"
    scores = [r["final_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["metrics"]["final_count"] == len(body["results"]) <= limit
    for r in body["results"]:
        assert set(r) >= RESULT_FIELDS
        assert r["fusion_method"] == "rrf" and r["path"] == r["source"]
        ranks = r["modes"]
        assert ranks and r["mode"] == ranks[0]["mode"] and ranks[0]["rank"] == min(m["rank"] for m in ranks)
        assert r["final_score"] == pytest.approx(sum(1 / (60 + m["rank"]) for m in ranks))
        assert r["lexical_rank"] == next((m["rank"] for m in ranks if m["mode"] == "lexical"), None)
        assert r["semantic_rank"] == next((m["rank"] for m in ranks if m["mode"] == "semantic"), None)
        if {m["mode"] for m in ranks} & {"exact", "path", "symbol"}:
            assert r["kind"] == "document_chunk"


def lines_with(content: str, needle: str) -> set[int]:
    return {i for i, line in enumerate(content.splitlines(), start=1) if needle in line}




@pytest.fixture(scope="module")
async def corpus(client: AsyncTestClient[Any], make_tenant: Any) -> Tenant:
    tenant: Tenant = await make_tenant("modes")
    await ingest(client, tenant, FILES)
    return tenant


async def test_exact_returns_the_line_anchored_chunk(client: AsyncTestClient[Any], corpus: Tenant) -> None:
    body = await search(client, corpus, query="RETRY_CACHE_SLUG", modes=["exact"], case_sensitive=True, limit=5)
    check_shape(body, 5)
    assert body["modes"] == ["exact"] and body["reason"].startswith("modes requested")
    top = body["results"][0]
    uses = lines_with(LEDGER, "RETRY_CACHE_SLUG")
    assert top["path"] == "billing/ledger.py" and top["mode"] == "exact" and top["level"] == 2
    assert top["modes"] == [{"mode": "exact", "rank": 1, "score": top["modes"][0]["score"]}]
    assert top["line_start"] <= min(uses) and max(uses) <= top["line_end"]
    assert "RETRY_CACHE_SLUG" in top["excerpt"]
    ledger = LEDGER.splitlines(keepends=True)
    assert top["excerpt"] == "".join(ledger[top["excerpt_line_start"] - 1 : top["excerpt_line_end"]])
    assert top["line_start"] <= top["excerpt_line_start"] <= top["excerpt_line_end"] <= top["line_end"]
    metrics = body["metrics"]["modes"]
    assert set(metrics) == {"exact"} and metrics["exact"]["candidates"] == len(body["results"]) >= 1
    assert metrics["exact"]["ms"] > 0 and metrics["exact"]["error"] is None
    # case sensitivity is the request's
    assert (await search(client, corpus, query="retry_cache_slug", modes=["exact"], case_sensitive=True))[
        "results"] == []
    folded = await search(client, corpus, query="retry_cache_slug", modes=["exact"])
    assert folded["results"][0]["path"] == "billing/ledger.py"
    # all modes that apply: the exact hit still leads, reinforced by the lexical branch
    everything = await search(client, corpus, query="RETRY_CACHE_SLUG", modes="all", limit=5)
    check_shape(everything, 5)
    assert everything["modes"] == ["exact", "symbol", "lexical", "semantic"]
    best = everything["results"][0]
    assert best["path"] == "billing/ledger.py" and best["mode"] == "exact"
    assert "RETRY_CACHE_SLUG" in best["excerpt"]


async def test_semantic_finds_what_exact_misses(client: AsyncTestClient[Any], corpus: Tenant) -> None:
    query = "great-circle distance between two coordinates on earth"
    body = await search(client, corpus, query=query, modes=["exact", "semantic"], limit=5)
    check_shape(body, 5)
    assert body["metrics"]["modes"]["exact"]["candidates"] == 0
    assert body["metrics"]["modes"]["semantic"]["candidates"] >= 5
    assert body["metrics"]["semantic_candidates"] == body["metrics"]["modes"]["semantic"]["candidates"]
    sphere = [i for i, r in enumerate(body["results"]) if r["path"] == "geo/sphere.py"]
    assert sphere and sphere[0] <= 1, [(r["path"], r["level"]) for r in body["results"]]
    hit = body["results"][sphere[0]]
    assert hit["mode"] == "semantic" and [m["mode"] for m in hit["modes"]] == ["semantic"]
    assert hit["lexical_rank"] is None and hit["semantic_rank"] == sphere[0] + 1
    # a semantic-only hit's excerpt is the chunk's first lines, with their line numbers
    if hit["level"] != 0:
        lines = SPHERE.splitlines(keepends=True)
        assert hit["excerpt"] == "".join(lines[hit["excerpt_line_start"] - 1 : hit["excerpt_line_end"]])
        assert hit["excerpt_line_start"] == hit["line_start"]


async def test_exact_and_semantic_reinforce_each_other(client: AsyncTestClient[Any], corpus: Tenant) -> None:
    body = await search(client, corpus, query="slugify", modes=["exact", "semantic"], limit=20)
    check_shape(body, 20)
    found_by = [{m["mode"] for m in r["modes"]} for r in body["results"]]
    both = [i for i, s in enumerate(found_by) if s == {"exact", "semantic"}]
    single = [i for i, s in enumerate(found_by) if len(s) == 1]
    assert both and single, found_by
    assert max(both) < min(single)  # every reinforced chunk ranks above every single-mode chunk
    top = body["results"][0]
    assert top["path"] == "text/slug.py" and top["mode"] == "exact" and "slugify" in top["excerpt"]
    assert {m["mode"] for m in top["modes"]} == {"exact", "semantic"}
    # the semantic-only leader (rank 1 there) still ranks below the reinforced rows
    semantic_first = next(r for r in body["results"] if r["semantic_rank"] == 1)
    if {m["mode"] for m in semantic_first["modes"]} == {"semantic"}:
        assert body["results"].index(semantic_first) > max(both)


async def test_path_glob_and_symbol_modes(client: AsyncTestClient[Any], corpus: Tenant) -> None:
    glob = await search(client, corpus, query="*.py", modes=["path"], limit=10)
    check_shape(glob, 10)
    assert sorted(r["path"] for r in glob["results"]) == sorted(p for p in FILES if p.endswith(".py"))
    assert all(r["mode"] == "path" and r["level"] == 0 for r in glob["results"])
    under = await search(client, corpus, query="geo/**", modes=["path"])
    assert [r["path"] for r in under["results"]] == ["geo/sphere.py"]
    sections = await search(client, corpus, query="README.md", modes=["path"], filters={"levels": [1]})
    assert {"Setup", "Usage"} <= {t for r in sections["results"] for t in ("Setup", "Usage") if t in r["breadcrumb"]}
    assert all(r["level"] == 1 for r in sections["results"])

    symbol = await search(client, corpus, query="def record_invoice()", modes=["symbol"], limit=5)
    check_shape(symbol, 5)
    (top,) = symbol["results"]
    assert top["path"] == "billing/ledger.py" and top["mode"] == "symbol" and top["level"] == 1
    assert top["line_start"] == line_of(LEDGER, "def record_invoice(")
    assert "def record_invoice(" in top["excerpt"]
    # symbol + exact + lexical + semantic on the same definition: one result, every mode listed
    fused = await search(client, corpus, query="slugify", modes="all", limit=5)
    assert fused["modes"] == ["exact", "symbol", "lexical", "semantic"]
    definition = next(r for r in fused["results"] if {"mode": "symbol", "rank": 1, "score": 1.0} in r["modes"])
    assert definition["path"] == "text/slug.py" and definition["line_start"] == line_of(SLUG, "def slugify(")
    assert {m["mode"] for m in definition["modes"]} >= {"symbol", "semantic"}, fused["results"]
    assert definition in fused["results"][:3], [
        (r["path"], r["level"], r["line_start"], r["final_score"], r["modes"]) for r in fused["results"]]


async def test_filters_apply_to_every_mode(client: AsyncTestClient[Any], make_tenant: Any) -> None:
    tenant: Tenant = await make_tenant("modes-filters")
    await ingest(client, tenant, FILES, collection="main")
    await ingest(client, tenant, {"extra/notes.py": EXTRA}, collection="other", agent_id="agent-x")
    query = "RETRY_CACHE_SLUG"
    tomorrow = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    cases: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool], bool]] = [
        (query, {"metadata": {"collection": "other"}}, lambda r: r["path"] == "extra/notes.py", True),
        (query, {"agent_id": "agent-x"}, lambda r: r["path"] == "extra/notes.py", True),
        (query, {"metadata": {"collection": "main"}}, lambda r: r["path"] != "extra/notes.py", True),
        (query, {"source_prefix": "billing/"}, lambda r: r["path"].startswith("billing/"), True),
        (query, {"levels": [2]}, lambda r: r["level"] == 2, True),
        ("Ledger", {"metadata": {"collection": "main", "language": "markdown"}},
         lambda r: r["path"] == "README.md", True),
        (query, {"kinds": ["fact"]}, lambda r: False, False),
        (query, {"created_after": tomorrow}, lambda r: False, False),
    ]
    for q, filters, ok, expect_exact in cases:
        body = await search(client, tenant, query=q, modes=ALL, filters=filters, limit=50)
        check_shape(body, 50)
        assert all(ok(r) for r in body["results"]), (filters, [(r["path"], r["level"]) for r in body["results"]])
        exact = body["metrics"]["modes"]["exact"]["candidates"]
        assert (exact > 0) == expect_exact, (filters, body["metrics"]["modes"])
        if not expect_exact:
            assert body["results"] == []


async def test_lookup_modes_over_several_collections_find_every_match(client: AsyncTestClient[Any],
                                                                     make_tenant: Any) -> None:
    """The collections named are part of the lookup's own query: two of them were filtered after a
    fetch that a third, busier collection filled (exact found nothing; path missed a file), and a file
    summary was left out for a finer hit of the same path in another collection."""
    tenant: Tenant = await make_tenant("modes-collections")
    await ingest(client, tenant, {"a.txt": "the ZEBRA_TOKEN is here\n", "docs/long-name-here.txt": "x\n"},
                 collection="A")
    await ingest(client, tenant, {"b.txt": "and the ZEBRA_TOKEN is here too\n"}, collection="B")
    await ingest(client, tenant, {f"noise/{n:03}.txt": f"ZEBRA_TOKEN noise {n}\n" for n in range(200)},
                 collection="C")
    both = {"collections": ["A", "B"]}
    found = await search(client, tenant, query="ZEBRA_TOKEN", modes=["exact"], filters=both, limit=5)
    assert sorted(r["path"] for r in found["results"]) == ["a.txt", "b.txt"], found["results"]
    files = await search(client, tenant, query="*.txt", modes=["path"], filters=both, limit=5)
    assert sorted(r["path"] for r in files["results"]) == ["a.txt", "b.txt", "docs/long-name-here.txt"]
    alone = await search(client, tenant, query="*.txt", modes=["path"],
                         filters={"collections": ["A", "B"], "metadata": {"collection": "C"}}, limit=5)
    assert alone["results"] == []  # a collection the list does not name
    await ingest(client, tenant, {"README.md": "# Guide\n\nInstall it.\n"}, collection="A")
    await ingest(client, tenant, {"README.md": "# Other\n\nThe guide is elsewhere.\n"}, collection="B")
    summaries = await search(client, tenant, query="guide", modes=["exact"], filters=both, limit=10)
    assert {(r["metadata"]["collection"], r["path"]) for r in summaries["results"]} >= {("A", "README.md"),
                                                                                         ("B", "README.md")}


async def test_another_org_never_sees_the_chunks(client: AsyncTestClient[Any], corpus: Tenant,
                                                 make_tenant: Any) -> None:
    other: Tenant = await make_tenant("modes-other")
    for q in ("RETRY_CACHE_SLUG", "slugify", "*.py", "great-circle distance"):
        body = await search(client, other, query=q, modes=ALL)
        assert body["results"] == [], q
        assert all(m["candidates"] == 0 for m in body["metrics"]["modes"].values()), body["metrics"]
    await ingest(client, other, FILES)  # identical files
    for q in ("RETRY_CACHE_SLUG", "slugify", "*.py", "Ledger.balance"):
        mine = await search(client, corpus, query=q, modes=ALL, limit=50)
        theirs = await search(client, other, query=q, modes=ALL, limit=50)
        assert mine["results"] and theirs["results"], q
        assert not {r["id"] for r in mine["results"]} & {r["id"] for r in theirs["results"]}, q
        assert [(r["path"], r["line_start"], r["mode"]) for r in mine["results"][:3]] == \
            [(r["path"], r["line_start"], r["mode"]) for r in theirs["results"][:3]], q


async def test_every_mode_is_scoped_by_row_level_security(db: Database, corpus: Tenant, make_tenant: Any,
                                                          client: AsyncTestClient[Any], embedder: Embedder) -> None:
    """Not only the WHERE clauses: with the transaction scoped to another org and the queries naming the
    first org's id, every mode's SQL returns nothing (row-level security hides the first org's rows)."""
    other: Tenant = await make_tenant("modes-rls")
    await ingest(client, other, FILES)
    vector = (await embedder.embed(["slugify"]))[0]
    request = SearchRequest(query="slugify")
    glob = SearchRequest(query="*.py")

    async def every_mode(scope: Tenant) -> dict[str, int]:
        async with db.tenant(scope.org_id, readonly=True) as tx:
            tx.org_id = corpus.org_id  # the queries ask for the first org's rows
            return {
                "exact": len(await modes.run_lookup(tx, "exact", request, limit=50)),
                "symbol": len(await modes.run_lookup(tx, "symbol", request, limit=50)),
                "path": len(await modes.run_lookup(tx, "path", glob, limit=50)),
                "lexical": len(await modes.run_lexical(tx, request, limit=50, postings_per_term=2000, k1=1.2,
                                                       b=0.75, context_weight=0.25)),
                "semantic": len(await modes.run_semantic(tx, request, vector, limit=50, ef_search=100)),
            }

    own = await every_mode(corpus)
    assert all(n > 0 for n in own.values()), own  # the control: in its own scope the same calls find rows
    assert await every_mode(other) == dict.fromkeys(own, 0)


async def test_bad_modes_are_400_in_the_error_shape(client: AsyncTestClient[Any], corpus: Tenant) -> None:
    for body, field in ((({"modes": ["fuzzy"]}), "modes"), ({"modes": "everything"}, "modes"),
                        ({"modes": []}, "modes"), ({"modes": ["exact"], "strategy": "hybrid"}, "strategy")):
        r = await client.post("/v1/memories/search", json={"query": "slugify", **body}, headers=corpus.headers)
        assert r.status_code == 400, (body, r.text)
        error = r.json()["error"]
        assert error["code"] == "validation_error" and error["request_id"], error
        assert field in r.text, (body, r.text)


async def test_without_modes_the_strategy_search_is_unchanged(client: AsyncTestClient[Any], corpus: Tenant,
                                                              make_tenant: Any) -> None:
    body = await search(client, corpus, query="slugify a title", strategy="hybrid", limit=5)
    assert body["strategy"] == "hybrid" and body["modes"] is None and body["metrics"]["modes"] is None
    assert body["results"] and all(r["mode"] is None and r["modes"] is None and r["excerpt"] is None
                                   for r in body["results"])
    # A chunk says its file and lines as a modes search does: where to read it (a fact says none).
    found = await search(client, corpus, query="slugify a title", modes=ALL, limit=50)
    modes = {r["id"]: r for r in found["results"]}
    for r in body["results"]:
        assert r["path"] == r["source"] and r["line_start"] is not None and r["line_end"] >= r["line_start"]
        if r["id"] in modes:
            assert (r["line_start"], r["line_end"]) == (modes[r["id"]]["line_start"], modes[r["id"]]["line_end"])
    mixed: Tenant = await make_tenant("modes-mixed")
    await ingest(client, mixed, FILES)
    await client.post("/v1/memories", json={"text": "Titles are slugified in lower case."}, headers=mixed.headers)
    facts = await search(client, mixed, query="slugify a title", strategy="hybrid", limit=20,
                         filters={"kinds": ["fact"]})
    assert facts["results"] and all(r["path"] is None and r["line_start"] is None for r in facts["results"])


async def test_modes_run_concurrently_and_survive_a_failing_mode(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, make_tenant: Any) -> None:
    delay = 300
    raising = RaisingEmbedder(embedder)
    async with app_client(settings, endpoints, raising, branch_delay_ms=delay,
                          lexical_timeout_ms=5000, semantic_timeout_ms=5000) as slow:
        tenant: Tenant = await make_tenant("modes-slow")
        await ingest(slow, tenant, FILES)
        body = await search(slow, tenant, query="slugify", modes=ALL)
        per_mode = body["metrics"]["modes"]
        assert set(per_mode) == set(ALL) and all(m["ms"] >= delay for m in per_mode.values()), per_mode
        longest = max(m["ms"] for m in per_mode.values())
        assert body["metrics"]["total_ms"] < 1.5 * longest, body["metrics"]  # max of the modes, not their sum
        assert body["metrics"]["total_ms"] < sum(m["ms"] for m in per_mode.values()) / 2

        raising.broken = True
        failed = await search(slow, tenant, query="slugify_unique", modes=["exact", "semantic"])
        assert failed["metrics"]["modes"]["semantic"]["candidates"] is None
        assert "embedding failed" in failed["metrics"]["modes"]["semantic"]["error"]
        assert failed["fallback_reason"] and "embedding failed" in failed["fallback_reason"]
        assert failed["results"] and all(r["modes"] == [{"mode": "exact", "rank": r["modes"][0]["rank"],
                                                         "score": r["modes"][0]["score"]}]
                                         for r in failed["results"])
        r = await slow.post("/v1/memories/search", json={"query": "never embedded before", "modes": ["semantic"]},
                            headers=tenant.headers)
        assert r.status_code == 503 and r.json()["error"]["code"] == "search_unavailable", r.text

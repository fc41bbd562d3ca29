"""POST /v1/context/assemble end to end on real Postgres + Redis: response shape, budgets, modes,
errors, deadlines, the log line, access statistics and tenant isolation.

Functional tests run on an app with generous branch timeouts (``GENEROUS``) so their outcome does
not depend on how loaded the machine is; the deadline behaviour itself is tested in
``test_assembly_faults.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import structlog
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.assembly import Orchestrator
from service.assembly.terms import content_term_count
from service.assembly.types import AssembleRequest
from service.db import Database, create_pool
from service.embeddings import Embedder
from service.retrieval import RetrievalEngine, SearchRequest
from service.retrieval.types import Strategy
from service.runtime import Endpoints, Services
from service.settings import Settings
from service.text.tokens import Tokenizers
from tests.conftest import Tenant, is_cache_hit

GENEROUS: dict[str, Any] = {"deadline_ms": 5000, "directive_timeout_ms": 2000, "hot_timeout_ms": 2000,
                            "cold_timeout_ms": 3000}
SLACK_MS = 30
"""Allowed overrun of total_ms past the deadline: cancellation and the ranking that follows the wall,
on a shared, loaded 2-core machine (typically 3-8 ms)."""

AGENT = "helper"
MEMORIES = [
    ("The office espresso machine is on the third floor next to the kitchen.", AGENT, True),
    ("The team prefers dark roast coffee beans from Colombia.", AGENT, False),
    ("Invoices are issued on the first business day of each month.", None, False),
    ("Backups of the EU region are kept for thirty five days.", None, False),
    ("The staging database is refreshed from production every Sunday night.", AGENT, False),
    ("A private note of another agent about coffee machines and espresso.", "someone-else", False),
]


@contextlib.asynccontextmanager
async def assembly_client(settings: Settings, endpoints: Endpoints, embedder: Embedder, *,
                          retrieval: dict[str, Any] | None = None,
                          **assembly: Any) -> AsyncIterator[AsyncTestClient[Any]]:
    """An app of its own with assembly (and optionally retrieval) settings replaced."""
    custom = dataclasses.replace(
        settings,
        assembly=dataclasses.replace(settings.assembly, **assembly),
        retrieval=dataclasses.replace(settings.retrieval, **(retrieval or {})),
    )
    async with AsyncTestClient(app=create_app(custom, endpoints, embedder=embedder), timeout=30) as client:
        yield client


def orchestrator(client: AsyncTestClient[Any]) -> Orchestrator:
    services = client.app.state.services
    assert isinstance(services, Services)
    found = services.extras["assembly"]
    assert isinstance(found, Orchestrator)
    return found


async def seed(client: AsyncTestClient[Any], tenant: Tenant,
               memories: Sequence[tuple[str, str | None, bool]] = MEMORIES,
               directive: str = "You are the office helper. Answer briefly.") -> list[str]:
    r = await client.put(f"/v1/agents/{AGENT}/directive", json={"content": directive}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    body = {"memories": [{"text": t, "agent_id": a, "pinned": p} for t, a, p in memories]}
    r = await client.post("/v1/memories", json=body, headers=tenant.headers)
    assert r.status_code == 201, r.text
    return [str(i) for i in r.json()["ids"]]


async def assemble(client: AsyncTestClient[Any], tenant: Tenant, headers: dict[str, str] | None = None,
                   **body: Any) -> Any:
    payload = {"agent_id": AGENT, "query": "where is the espresso machine?", "model": "gpt-4o",
               "max_context_tokens": 2000, **body}
    return await client.post("/v1/context/assemble", json=payload, headers={**tenant.headers, **(headers or {})})


def recount(settings: Settings, encoding: str, text: str) -> int:
    return Tokenizers(settings.data_dir / "tiktoken").get(encoding).count(text)


METRICS = {"budget_calculation_ms", "directive_load_ms", "hot_memory_retrieval_ms", "cold_memory_retrieval_ms",
           "ranking_ms", "packing_ms", "formatting_ms", "total_ms", "candidates_evaluated", "queued_ms", "deadline_ms"}
SCORES = {"relevance", "recency", "usefulness", "informativeness", "uniqueness", "composite"}


async def test_full_response(settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)
        messages = [{"role": "user", "content": "I need a coffee."}, {"role": "assistant", "content": "Sure."}]
        r = await assemble(client, tenant, recent_messages=messages)
        assert r.status_code == 200, r.text
        body = r.json()
    assert body["degradation_level"] == "L0" and body["degradation_reasons"] == []
    assert body["sources_available"] == ["directive", "hot", "cold"]
    assert {k: v["outcome"] for k, v in body["branches"].items()} == {"directive": "ok", "hot": "ok", "cold": "ok"}
    assert set(body["metrics"]) == METRICS and all(v >= 0 for v in body["metrics"].values())
    assert body["metrics"]["candidates_evaluated"] >= len(body["memories_used"]) > 0
    assert body["directive"]["content"] == "You are the office helper. Answer briefly."
    assert body["directive"]["version"] >= 1
    used = {m["id"]: m for m in body["memories_used"]}
    assert ids[0] in used and ids[5] not in used  # the espresso memory; never another agent's
    first = body["memories_used"][0]
    assert first["id"] == ids[0] and first["origin"] == "hot"  # pinned: packed first
    for m in body["memories_used"]:
        assert set(m["scores"]) == SCORES and all(0 <= v <= 1.0001 for v in m["scores"].values())
        assert m["justification"].startswith("score ") and "\n" not in m["justification"]
        assert f"\n{m['tag']} {m['text']}\n" in body["context"]
        assert body["refs"][m["tag"]] == m["id"]
        assert m["origin"] in ("hot", "cold")
    ctx = body["context"]
    assert ctx.startswith("<directive>\nYou are the office helper.")
    assert ctx.index("<directive>") < ctx.index("<memories>") < ctx.index("<history>")
    assert "user: I need a coffee.\nassistant: Sure.\n" in ctx
    assert "another agent" not in ctx
    b = body["budget"]
    assert b["mode"] == "fixed" and b["max_context_tokens"] == 2000 and b["reserve_tokens"] == 512
    assert b["encoding"] == "o200k_base"
    assert b["memories_budget_tokens"] == (2000 - b["directive_tokens"] - b["history_tokens"] - b["reserve_tokens"]
                                           - b["overhead_tokens"])
    assert b["context_tokens"] == recount(settings, "o200k_base", ctx)
    assert b["context_tokens"] <= 2000 - b["reserve_tokens"] - b["overhead_tokens"]
    assert b["tag_tokens"] == len(body["memories_used"])  # one token per tag
    assert list(body["refs"]) == [str(n) for n in range(1, len(body["memories_used"]) + 1)]
    assert b["intent"] in ("factual", "conceptual", "detailed", "complex")


async def test_other_model_families_budget_a_share_of_the_window(settings: Settings, endpoints: Endpoints,
                                                                 embedder: Embedder, tenant: Tenant) -> None:
    """claude-3-5-sonnet was a 400 unknown_model; now it is counted with cl100k_base and 75% of its
    window and reserve, unless the caller names the encoding (then the count is trusted as exact)."""
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        r = await assemble(client, tenant, model="claude-3-5-sonnet", reserve_tokens=512)
        assert r.status_code == 200, r.text
        body = r.json()
        exact = (await assemble(client, tenant, model="claude-3-5-sonnet", encoding="cl100k_base",
                                reserve_tokens=512)).json()
    b = body["budget"]
    assert (b["encoding"], b["model_family"], b["safety_factor"]) == ("cl100k_base", "claude", 0.75)
    assert (b["max_context_tokens"], b["reserve_tokens"]) == (1500, 384)
    assert any("safety margin" in reason and "0.75" in reason for reason in b["reasons"]), b["reasons"]
    assert b["memories_budget_tokens"] == (1500 - b["directive_tokens"] - b["history_tokens"] - 384
                                           - b["overhead_tokens"])
    assert recount(settings, "cl100k_base", body["context"]) == b["context_tokens"] <= 1500 - 384 - b["overhead_tokens"]
    e = exact["budget"]
    assert (e["encoding"], e["model_family"], e["safety_factor"]) == ("cl100k_base", "cl100k_base", 1.0)
    assert (e["max_context_tokens"], e["reserve_tokens"], e["reasons"]) == (2000, 512, [])


def metric_sample(text: str, name: str, labels: str = "") -> float:
    prefix = f"{name}{{{labels}}} " if labels else f"{name} "
    line = next((x for x in text.splitlines() if x.startswith(prefix)), None)
    return 0.0 if line is None else float(line.rsplit(" ", 1)[1])


async def test_prometheus_counts_assemblies_by_level_and_branch_outcome_without_tenant_data(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        before = (await client.get("/metrics")).text
        for _ in range(3):
            assert (await assemble(client, tenant)).status_code == 200
        after = (await client.get("/metrics")).text
    def grew(name: str, labels: str) -> float:
        return metric_sample(after, name, labels) - metric_sample(before, name, labels)

    assert grew("pgcontext_assemblies_total", 'level="L0"') == 3
    assert grew("pgcontext_assembly_branches_total", 'branch="cold",outcome="ok"') == 3
    assert "pgcontext_assembly_seconds_bucket" in after and "pgcontext_assembly_queued_seconds_count" in after
    assert str(tenant.org_id) not in after and AGENT not in after  # counts only: no tenant, agent or query


async def test_org_wide_memories_count_and_agent_only_scope(settings: Settings, endpoints: Endpoints,
                                                           embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)
        query = "how long are backups of the EU region kept?"
        body = (await assemble(client, tenant, query=query, retrieval={"use_hot": False})).json()
        assert ids[3] in {m["id"] for m in body["memories_used"]}
        assert body["branches"]["hot"]["outcome"] == "skipped" and body["degradation_level"] == "L1"
        scoped = (await assemble(client, tenant, query=query,
                                 retrieval={"use_hot": False, "include_org_wide": False})).json()
        assert ids[3] not in {m["id"] for m in scoped["memories_used"]}
        assert all(m["id"] in (ids[0], ids[1], ids[4]) for m in scoped["memories_used"])


async def test_every_strategy_feeds_ranking_from_the_search_rows(settings: Settings, endpoints: Endpoints,
                                                                 embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)
        for strategy in ("lexical", "semantic", "hybrid", "lexical_first", "auto"):
            body = (await assemble(client, tenant, query="where is the espresso machine?",
                                   retrieval={"use_hot": False, "strategy": strategy})).json()
            cold = body["branches"]["cold"]
            assert cold["outcome"] == "ok" and cold["count"] >= 1, (strategy, cold)
            used = {m["id"]: m for m in body["memories_used"]}
            assert ids[0] in used and ids[5] not in used, strategy  # the agent's own; never another agent's
            assert all(m["origin"] == "cold" and m["scores"]["relevance"] >= 0 for m in used.values())
    # The branches drop out-of-scope rows themselves: another agent's espresso note matches the
    # query in both branches but never comes back, and every returned row carries its scoring fields.
    # The app's pool belongs to the test client's event loop: an engine on this loop's own pool.
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=4), statement_timeout_ms=5000)
    try:
        engine = RetrievalEngine(db, embedder, settings.retrieval, max_limit=50)
        strategies: tuple[Strategy, ...] = ("lexical", "semantic", "hybrid", "lexical_first")
        for strategy in strategies:
            request = SearchRequest(query="espresso machine coffee", strategy=strategy, limit=10)
            unscoped = await engine.search(tenant.org_id, request)
            assert ids[5] in {str(r.id) for r in unscoped.results}, strategy  # it does match the query
            for scope, owners in (((AGENT, True, True), {AGENT, None}), ((AGENT, False, False), {AGENT})):
                response, rows = await engine.search_rows(tenant.org_id, request, scope)
                assert response.results and {r.id for r in response.results} == set(rows), (strategy, scope)
                assert {row["agent_id"] for row in rows.values()} <= owners, (strategy, scope)
                assert all(row["embedding"] is not None for row in rows.values())
                assert ids[0] in {str(i) for i in rows} and ids[5] not in {str(i) for i in rows}
    finally:
        await db.close()


async def test_selective_mode_is_explained_and_respected(settings: Settings, endpoints: Endpoints,
                                                        embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        r = await assemble(client, tenant, query="what is the espresso machine location", selective=True,
                           max_context_tokens=None)
        assert r.status_code == 200, r.text
        b = r.json()["budget"]
        assert b["mode"] == "selective" and b["max_context_tokens"] is None
        assert b["tier"] == "standard" and b["intent"] == "factual"
        assert 500 <= b["memories_budget_tokens"] <= 1000 and b["memories_tokens"] <= b["memories_budget_tokens"]
        assert any("intent factual" in reason for reason in b["reasons"])
        r = await assemble(client, tenant, selective=True, max_context_tokens=None,
                           query="urgent: design and build the whole backup architecture, migration plan and "
                                 "roadmap for compliance across all regions")
        b = r.json()["budget"]
        assert b["tier"] == "comprehensive" and b["multiplier"] == 2.0
        assert any("multiplier x2" in reason for reason in b["reasons"])
        # with max_context_tokens as well, the window is a ceiling, and the last step says so
        r = await assemble(client, tenant, selective=True, max_context_tokens=1500,
                           query="Give me a comprehensive comparison of the espresso machine and the coffee beans")
        b = r.json()["budget"]
        assert b["tier"] == "large" and "held at the tier ceiling 3000" in b["reasons"][-2]
        left = 1500 - b["directive_tokens"] - b["history_tokens"] - b["reserve_tokens"] - b["overhead_tokens"]
        assert b["memories_budget_tokens"] == left < 3000
        assert b["reasons"][-1] == (f"max_context_tokens 1500: 3000 -> {left}, what is left after the directive "
                                    f"({b['directive_tokens']}), the history ({b['history_tokens']}), the reserve "
                                    f"({b['reserve_tokens']}) and the envelope ({b['overhead_tokens']})")


async def test_tight_budget_drops_with_reasons(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                               tenant: Tenant) -> None:
    twins = [("The espresso machine is on the third floor next to the kitchen.", AGENT, False),
             ("The espresso machine is on the third floor, next to the kitchen.", AGENT, False)]
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant, [*MEMORIES, *twins])
        body = (await assemble(client, tenant, max_context_tokens=600, reserve_tokens=540)).json()
        reasons = {d["reason"] for d in body["dropped"]}
        assert "duplicate" in reasons and "over_budget" in reasons
        b = body["budget"]
        assert b["memories_tokens"] <= b["memories_budget_tokens"]
        assert recount(settings, "o200k_base", body["context"]) <= 600 - 540 - b["overhead_tokens"]
        assert all(d["text"] is None and d["scores"] is None for d in body["dropped"])  # not asked for
        explained = (await assemble(client, tenant, max_context_tokens=600, reserve_tokens=540, explain=True)).json()
    texts = {m[0] for m in [*MEMORIES, *twins]}
    assert [d["id"] for d in explained["dropped"]] == [d["id"] for d in body["dropped"]]
    for d in explained["dropped"]:
        assert d["text"] in texts and d["origin"] in ("hot", "cold")
        assert set(d["scores"]) == SCORES and d["scores"]["composite"] == d["composite"]


async def test_bad_requests(settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        r = await assemble(client, tenant, model="deepseek-v3")
        assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_model"
        error = r.json()["error"]
        assert "gpt-4o*" in error["message"] and "claude*" in error["message"] and "cl100k_base" in error["message"]
        assert error["details"]["field"] == "model" and "qwen*" in error["details"]["accepted"]
        r = await assemble(client, tenant, model="deepseek-v3", encoding="p50k_base")
        assert r.status_code == 400
        # Schema-valid fields that rule each other out (or the request's own agent_id) answer 422.
        r = await assemble(client, tenant, max_context_tokens=None)
        assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
        r = await assemble(client, tenant, retrieval={"filters": {"agent_id": "someone-else"}})
        assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "retrieval.filters.agent_id"
        r = await assemble(client, tenant, query="  ")
        assert r.status_code == 400
        for body in ({"selective": True}, {"selective": True, "max_context_tokens": None}, {}):
            # A pasted token over the limit is refused before anything reads it (the selective plan's
            # patterns took seconds of the event loop over one).
            r = await assemble(client, tenant, query="x" * 30_000, **body)
            error = r.json()["error"]
            assert r.status_code == 400 and error["details"] == {"field": "query"}, r.text
            assert error["message"] == f"query is 30000 characters; the limit is {settings.retrieval.max_query_chars}"
        r = await assemble(client, tenant, max_context_tokens=20, reserve_tokens=15)
        assert r.status_code == 422 and r.json()["error"]["code"] == "context_budget_too_small"
        assert r.json()["error"]["message"].startswith("max_context_tokens 20 is too small: reserve_tokens is 15;")
        # A first request that sets no reserve meets its default: the message says so, with the numbers.
        r = await assemble(client, tenant, max_context_tokens=500)
        error = r.json()["error"]
        assert r.status_code == 422 and error["code"] == "context_budget_too_small"
        assert "reserve_tokens defaults to 512" in error["message"], error["message"]
        details = error["details"]
        assert details["default_reserve_tokens"] == details["reserve_tokens"] == 512
        assert details["needed_tokens"] == details["directive_tokens"] + 512 + details["overhead_tokens"] > 500
        assert f"needs {details['needed_tokens']} o200k_base tokens" in error["message"]
        r = await assemble(client, tenant, headers={"X-Timeout-Ms": "soon"})
        assert r.status_code == 400


async def test_caller_deadline_already_passed_is_504(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                     tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        with structlog.testing.capture_logs() as logs:
            for headers in ({"X-Deadline-Ms": str(int(time.time() * 1000) - 5)}, {"X-Timeout-Ms": "0"}):
                r = await assemble(client, tenant, headers=headers)
                assert r.status_code == 504, r.text
                error = r.json()["error"]
                assert error["code"] == "deadline_exceeded" and error["details"] == {"level": "L3"}
                assert error["request_id"] and set(r.json()) == {"error"}  # the error shape, no context
        assert [e["degradation_level"] for e in logs if e["event"] == "context_assembly_failed"] == ["L3", "L3"]
        # A caller deadline shorter than the server's wall caps the branches, and is met.
        r = await assemble(client, tenant, headers={"X-Timeout-Ms": "1500"})
        assert r.status_code == 200 and r.json()["metrics"]["total_ms"] < 1500


async def test_one_log_line_with_ids_and_no_text(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                 tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        with structlog.testing.capture_logs() as logs:
            body = (await assemble(client, tenant)).json()
    lines = [e for e in logs if e["event"] == "context_assembled"]
    assert len(lines) == 1
    line = lines[0]
    assert line["degradation_level"] == "L0" and (line["directive"], line["hot"], line["cold"]) == ("ok", "ok", "ok")
    assert line["memory_ids"] == [m["id"] for m in body["memories_used"]]
    assert {"total_ms", "hot_ms", "cold_ms", "directive_ms", "ranking_ms", "packing_ms"} <= set(line)
    flat = repr(line)
    assert "espresso" not in flat and "office helper" not in flat


async def test_access_statistics_are_recorded_off_the_request(settings: Settings, endpoints: Endpoints,
                                                              embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, access_flush_s=1.0, **GENEROUS) as client:
        ids = await seed(client, tenant)
        used = [m["id"] for m in (await assemble(client, tenant)).json()["memories_used"]]

        async def row(ident: str) -> Any:
            return (await client.get(f"/v1/memories/{ident}", headers=tenant.headers)).json()

        before = await row(used[0])
        assert before["access_count"] == 0  # not written on the request path, but batched
        for _ in range(50):
            after = await row(used[0])
            if after["access_count"]:
                break
            await asyncio.sleep(0.1)
        assert after["access_count"] == 1 and after["last_accessed_at"] is not None
        assert after["updated_at"] == before["updated_at"]
        for ident in set(ids) - set(used):
            assert (await row(ident))["access_count"] == 0

        # A second use adds to the count; a memory deleted before the flush is skipped, not an error.
        again = [m["id"] for m in (await assemble(client, tenant)).json()["memories_used"]]
        gone = next(i for i in again if i != used[0])
        assert (await client.delete(f"/v1/memories/{gone}", headers=tenant.headers)).status_code == 204
        with structlog.testing.capture_logs() as logs:
            for _ in range(50):
                later = await row(used[0])
                if later["access_count"] == 1 + again.count(used[0]):
                    break
                await asyncio.sleep(0.1)
        assert later["access_count"] == 1 + again.count(used[0])
        assert later["last_accessed_at"] >= after["last_accessed_at"]
        assert [e for e in logs if e["event"] == "access_stats_flush_failed"] == []


async def test_another_orgs_directive_hot_set_and_memories_never_appear(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, other_tenant: Tenant) -> None:
    theirs = [("SECRET-B espresso machine location is the basement vault.", AGENT, True),
              ("SECRET-B org-wide espresso policy for every agent.", None, False)]
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        their_ids = await seed(client, other_tenant, theirs, directive="SECRET-B directive")
        await assemble(client, other_tenant)  # their hot set and directive are now cached in Redis
        mine = await seed(client, tenant)
        for _ in range(2):  # cold caches, then warm ones
            body = (await assemble(client, tenant)).json()
            assert "SECRET-B" not in repr(body)
            assert not set(their_ids) & {m["id"] for m in body["memories_used"]} | {d["id"] for d in body["dropped"]}
            assert {m["id"] for m in body["memories_used"]} <= set(mine)
        hot = (await client.get("/v1/memories/hot", params={"agent_id": AGENT}, headers=tenant.headers)).json()
        assert {i["id"] for i in hot["items"]} <= set(mine)
        # Feedback on their ids from my key changes nothing and says not_found.
        r = await client.post("/v1/memories/feedback", json={"memory_ids": their_ids, "helpful": False},
                              headers=tenant.headers)
        assert r.status_code == 200 and set(r.json()["not_found"]) == set(their_ids)
        row = (await client.get(f"/v1/memories/{their_ids[0]}", headers=other_tenant.headers)).json()
        assert row["usefulness"] == 0.0


@pytest.mark.parametrize("inline", [True, False])  # counting and ranking on the event loop; in their threads
async def test_text_caches_are_kept_per_org(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                            tenant: Tenant, other_tenant: Tenant, inline: bool) -> None:
    """Another org's assembly counted a history line and scored a memory line: neither is a cache hit
    for my org, nor for work outside any org (docs/security.md, "In-process caches")."""
    marker = uuid.uuid4().hex
    line = f"SECRET-B message {marker}"
    memory = f"SECRET-B espresso machine {marker} stands in the basement."
    threads: dict[str, Any] = {} if inline else {"inline_history_chars": 0, "inline_cpu_candidates": 0}
    async with assembly_client(settings, endpoints, embedder, **GENEROUS, **threads) as client:
        await seed(client, other_tenant, [(memory, AGENT, False)])
        r = await assemble(client, other_tenant, recent_messages=[{"role": "user", "content": line}])
        assert r.status_code == 200, r.text
        assert memory in r.json()["context"]  # scored and packed
        counter, _ = orchestrator(client).counter_for(
            AssembleRequest(agent_id=AGENT, query="q", model="gpt-4o", max_context_tokens=1000))
        for call, info, text in ((counter.count, counter.cache_info, line),
                                 (content_term_count, content_term_count.cache_info, memory)):
            assert not is_cache_hit(call, info, text, tenant.org_id), text
            assert not is_cache_hit(call, info, text, None), text
            assert is_cache_hit(call, info, text, other_tenant.org_id), text


async def test_openapi_documents_the_assembly_endpoints(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert {"/v1/context/assemble", "/v1/memories/hot", "/v1/memories/feedback"} <= set(paths)
    headers = {p["name"] for p in paths["/v1/context/assemble"]["post"]["parameters"] if p["in"] == "header"}
    assert {"X-Deadline-Ms", "X-Timeout-Ms"} <= headers


async def test_nested_document_chunks_are_packed_once(settings: Settings, endpoints: Endpoints,
                                                      embedder: Embedder, tenant: Tenant) -> None:
    """A file's summary (L0), its section (L1) and its chunk (L2) all match; their lines go in once."""
    source = ('"""Espresso machine maintenance."""\n\n\n'
              "def descale_espresso_machine(litres: int) -> str:\n"
              '    """Descale the espresso machine on the third floor with citric acid."""\n'
              "    return f'descale the espresso machine with {litres} litres of citric acid solution'\n")
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        r = await client.post("/v1/documents", json={"files": [{"path": "office/espresso.py", "content": source}]},
                              headers=tenant.headers)
        assert r.status_code == 200, r.text
        body = (await assemble(client, tenant, query="descale the espresso machine", max_context_tokens=4000,
                               reserve_tokens=0, retrieval={"use_hot": False, "filters": {"collections": ["default"]}}
                               )).json()
        spans = []
        for m in body["memories_used"]:
            row = (await client.get(f"/v1/memories/{m['id']}", headers=tenant.headers)).json()
            if row["source_path"] == "office/espresso.py":
                spans.append((row["line_start"], row["line_end"]))
        assert spans, body["memories_used"]
        assert not any(a[0] <= b[1] and b[0] <= a[1] for i, a in enumerate(spans) for b in spans[i + 1:]), spans
        nested = [d for d in body["dropped"] if d["reason"] == "nested"]
        assert nested and all("office/espresso.py" in d["detail"] for d in nested)


async def test_naming_collections_keeps_the_agents_own_documents(settings: Settings, endpoints: Endpoints,
                                                                 embedder: Embedder, tenant: Tenant) -> None:
    """``retrieval.filters.collections`` chooses org-wide document chunks; the agent's own documents come
    whatever collection they were ingested into (they were left out by both branches)."""
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        own = "# Zebra notes\n\nZebras migrate in the Serengeti every year.\n"
        shared = "# Zebra crossings\n\nZebra crossings need white stripes.\n"
        for body in ({"collection": "mine", "agent_id": AGENT, "files": [{"path": "own.md", "content": own}]},
                     {"collection": "shared", "files": [{"path": "shared.md", "content": shared}]}):
            r = await client.post("/v1/documents", json=body, headers=tenant.headers)
            assert r.status_code == 200, r.text
        for collections in (["shared"], ["elsewhere"]):
            out = (await assemble(client, tenant, query="zebra migration", max_context_tokens=2000, reserve_tokens=0,
                                  retrieval={"use_hot": False, "filters": {"collections": collections}})).json()
            assert "Zebras migrate in the Serengeti" in out["context"], (collections, out["context"])
            assert ("Zebra crossings need white stripes" in out["context"]) is (collections == ["shared"])

"""The degradation ladder reached for real: Redis unreachable or stopped, an embedder that hangs,
cold search slowed past its timeout (the retrieval engine's ``pg_sleep`` knob), the caller going
away. Every case answers with a correct partial response (or, for L3, the 504 error shape), never a
500, and ``total_ms`` stays within the deadline plus ``SLACK_MS``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import pytest
import structlog
import uvicorn

from service.app import create_app
from service.embedded.postgres import free_port
from service.embedded.redis_server import EmbeddedRedis
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import (
    AGENT,
    GENEROUS,
    MEMORIES,
    SLACK_MS,
    assemble,
    assembly_client,
    metric_sample,
    seed,
)

pytestmark = pytest.mark.serial

SLOW_COLD: dict[str, Any] = {"branch_delay_ms": 2000}
"""Every search branch sleeps 2 s in Postgres: far past any cold budget used here."""


class HangingEmbedder:
    """Embeds memories normally; once ``hanging`` is set, every call waits (for 30 s)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.name, self.dim, self.hanging = inner, "hanging", inner.dim, False

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.hanging:
            await asyncio.sleep(30)
        return await self.inner.embed(texts)

    async def aclose(self) -> None:
        return None


def unreachable(endpoints: Endpoints) -> Endpoints:
    """The same databases, and a Redis URL where nothing listens."""
    return Endpoints(endpoints.owner_dsn, endpoints.app_dsn, f"redis://127.0.0.1:{free_port()}/0")


def outcomes(body: Any) -> dict[str, str]:
    return {name: branch["outcome"] for name, branch in body["branches"].items()}


async def test_cold_slowed_past_its_timeout_is_L1_within_the_default_deadline(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, retrieval=SLOW_COLD) as client:
        await seed(client, tenant)
        deadline = settings.assembly.deadline_ms
        for _ in range(10):  # the first requests also warm the pool, the hot set and the directive cache
            r = await assemble(client, tenant)
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["branches"]["cold"]["outcome"] == "timeout"
            assert body["metrics"]["total_ms"] <= deadline + SLACK_MS, body["metrics"]
            if body["branches"]["hot"]["outcome"] == body["branches"]["directive"]["outcome"] == "ok":
                break
        assert outcomes(body) == {"directive": "ok", "hot": "ok", "cold": "timeout"}, body["branches"]
        assert body["degradation_level"] == "L1" and body["sources_available"] == ["directive", "hot"]
        assert body["memories_used"] and all(m["origin"] == "hot" for m in body["memories_used"])


async def test_directive_and_hot_past_their_timeouts_are_used_while_cold_still_runs(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    # Directive and hot get a 0.01 ms timeout (any Redis read is later), the cold search takes
    # >= 150 ms: waiting for them costs nothing, so they are used, marked late, at L0.
    timeouts = {**GENEROUS, "deadline_ms": 1500, "cold_timeout_ms": 1200, "directive_timeout_ms": 0.01,
                "hot_timeout_ms": 0.01}
    async with assembly_client(settings, endpoints, embedder, retrieval={"branch_delay_ms": 150},
                               **timeouts) as client:
        await seed(client, tenant)
        r = await assemble(client, tenant)
        assert r.status_code == 200, r.text
        body = r.json()
    assert outcomes(body) == {"directive": "ok", "hot": "ok", "cold": "ok"}, body["branches"]
    assert body["degradation_level"] == "L0" and body["directive"] is not None
    # The hot set was not cached yet (the first assembly after the writes): read from Postgres, which
    # the assembly waits for up to the wall whatever the hot timeout.
    for name, late in (("directive", "after its 0 ms timeout"), ("hot", "read from Postgres (not cached): waited "
                                                                         "past its 0 ms")):
        branch = body["branches"][name]
        assert late in branch["detail"] and branch["ms"] < body["branches"]["cold"]["ms"], branch
    assert body["branches"]["cold"]["count"] >= 1 and body["memories_used"]


async def test_over_the_admission_limit_requests_wait_in_line_or_are_refused(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    import dataclasses

    def app(**assembly: Any) -> Any:
        custom = dataclasses.replace(
            settings, retrieval=dataclasses.replace(settings.retrieval, branch_delay_ms=150),
            assembly=dataclasses.replace(settings.assembly, **{**GENEROUS, "deadline_ms": 1500,
                                                               "cold_timeout_ms": 1200, **assembly}))
        return create_app(custom, endpoints, embedder=embedder)

    body = {"agent_id": AGENT, "query": "where is the espresso machine?", "model": "gpt-4o",
            "max_context_tokens": 2000}
    # One assembly at a time (a real server: concurrent requests), each >= 150 ms (slowed cold
    # search): the others wait their turn (queued_ms), and their deadline starts when they are
    # admitted, so all three are L0.
    with served(app(max_in_flight=1)) as url:
        async with httpx.AsyncClient(base_url=url, headers=tenant.headers, timeout=30) as http:
            r = await http.post("/v1/memories", json={"memories": [{"text": t, "agent_id": a} for t, a, _ in MEMORIES]})
            assert r.status_code == 201, r.text
            responses = await asyncio.gather(*(http.post("/v1/context/assemble", json=body) for _ in range(3)))
            bodies = [r.json() for r in responses]
            assert [b["degradation_level"] for b in bodies] == ["L0", "L0", "L0"], bodies
            queued = sorted(b["metrics"]["queued_ms"] for b in bodies)
            assert queued[0] < 50 and queued[1] >= 100 and queued[2] >= 250, queued
            # The cache reads (directive, hot set) went out on arrival: those that waited in line
            # were admitted with them done, so their assembly did not wait for Redis at all.
            for b in bodies:
                if b["metrics"]["queued_ms"] >= 100:
                    for name in ("directive", "hot"):
                        branch = b["branches"][name]
                        assert branch["outcome"] == "ok" and branch["ms"] < 5, (name, branch)
                        assert "read while the request waited in line" in branch["detail"], (name, branch)
            # Having waited in line is no reason to search light: the full search (~150 ms here) fits
            # the cold budget, so every one ran the planned hybrid search.
            for b in bodies:
                assert b["retrieval"] == {"planned": "hybrid", "ran": "hybrid", "reduced": False,
                                          "reason": "planned"}, (b["metrics"], b["branches"]["cold"])
            assert all(b["metrics"]["total_ms"] < 1500 + SLACK_MS for b in bodies)
            # A caller whose deadline leaves less than an assembly takes (measured: >= 150 ms here) is
            # refused before it costs anything: 503 overloaded, not a late context, answered just
            # before its deadline.
            before = (await http.get("/metrics")).text
            first = asyncio.ensure_future(http.post("/v1/context/assemble", json=body))
            await asyncio.sleep(0.05)
            late = await http.post("/v1/context/assemble", json=body, headers={"X-Timeout-Ms": "60"})
            assert late.status_code == 503, late.text
            assert late.json()["error"]["code"] == "overloaded" and late.json()["error"]["details"]["reason"] == \
                "deadline", late.text
            assert (await first).status_code == 200
            after = (await http.get("/metrics")).text
            name, labels = "pgcontext_assemblies_not_answered_total", 'reason="overloaded"'
            assert metric_sample(after, name, labels) - metric_sample(before, name, labels) == 1
    # With no room to wait, a request is refused at once: 503 overloaded, with Retry-After.
    with served(app(max_in_flight=1, max_queued=0)) as url:
        async with httpx.AsyncClient(base_url=url, headers=tenant.headers, timeout=30) as http:
            responses = await asyncio.gather(*(http.post("/v1/context/assemble", json=body) for _ in range(2)))
            assert sorted(r.status_code for r in responses) == [200, 503], [r.text for r in responses]
            refused = next(r for r in responses if r.status_code == 503)
            assert refused.headers["Retry-After"] == "1" and refused.json()["error"]["code"] == "overloaded"
            assert metric_sample((await http.get("/metrics")).text, "pgcontext_assemblies_not_answered_total",
                           'reason="overloaded"') >= 1


async def test_redis_unreachable_is_L1_from_cold_with_the_directive_from_postgres(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, unreachable(endpoints), embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)  # writes succeed: the cache invalidation failure is only logged
        r = await assemble(client, tenant)
        assert r.status_code == 200, r.text
        body = r.json()
        # "error", or already "skipped": the failed cache invalidations of the writes above opened
        # the Redis circuit.
        assert body["branches"]["hot"]["outcome"] in ("error", "skipped")
        assert body["branches"]["directive"]["source"] == "postgres"
        assert body["degradation_level"] == "L1" and body["sources_available"] == ["directive", "cold"]
        assert ids[0] in {m["id"] for m in body["memories_used"]}
        assert all(m["origin"] == "cold" for m in body["memories_used"])
        # Within the retry window the hot branch is not even tried: skipped, not a wait per request.
        body = (await assemble(client, tenant)).json()
        assert body["branches"]["hot"]["outcome"] == "skipped" and body["degradation_level"] == "L1"
        # The hot-set API itself answers from Postgres.
        hot = await client.get("/v1/memories/hot", params={"agent_id": AGENT}, headers=tenant.headers)
        assert hot.status_code == 200 and hot.json()["source"] == "postgres"


async def test_redis_unreachable_and_cold_slowed_is_L2_directive_and_history_only(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    timeouts = {**GENEROUS, "deadline_ms": 600, "cold_timeout_ms": 300}
    async with assembly_client(settings, unreachable(endpoints), embedder, retrieval=SLOW_COLD, **timeouts) as client:
        await seed(client, tenant)
        r = await assemble(client, tenant, recent_messages=[{"role": "user", "content": "coffee?"}])
        assert r.status_code == 200, r.text
        body = r.json()
    assert outcomes(body) in ({"directive": "ok", "hot": hot, "cold": "timeout"} for hot in ("error", "skipped"))
    assert body["degradation_level"] == "L2" and body["sources_available"] == ["directive"]
    assert body["memories_used"] == [] and body["dropped"] == []
    assert body["context"] == ("<directive>\nYou are the office helper. Answer briefly.\n</directive>\n"
                               "<history>\nuser: coffee?\n</history>\n")
    assert body["metrics"]["total_ms"] <= 600 + SLACK_MS


async def test_redis_stopped_mid_life_then_back(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                               tenant: Tenant, tmp_path: Path) -> None:
    redis = EmbeddedRedis(tmp_path / "redis").start()
    try:
        own = Endpoints(endpoints.owner_dsn, endpoints.app_dsn, redis.url())
        async with assembly_client(settings, own, embedder, redis_retry_s=0.2, **GENEROUS) as client:
            await seed(client, tenant)
            assert (await assemble(client, tenant)).json()["degradation_level"] == "L0"
            redis.stop()
            body = (await assemble(client, tenant)).json()
            assert body["degradation_level"] == "L1" and body["branches"]["hot"]["outcome"] == "error"
            assert body["branches"]["directive"]["outcome"] == "ok"
            assert body["memories_used"]
            redis.start()
            await asyncio.sleep(0.3)  # past the retry window
            body = (await assemble(client, tenant)).json()
            assert body["degradation_level"] == "L0", body["branches"]
            assert body["branches"]["hot"]["source"] == "postgres"  # the restarted Redis was empty
    finally:
        redis.stop()


async def test_hanging_embedder_falls_back_to_lexical_inside_the_cold_budget(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    wrapper = HangingEmbedder(embedder)
    timeouts = {**GENEROUS, "deadline_ms": 400, "cold_timeout_ms": 300}
    query = "which coffee beans does the team like?"
    async with assembly_client(settings, endpoints, wrapper, **timeouts) as client:
        ids = await seed(client, tenant)
        wrapper.hanging = True
        before = (await client.get("/metrics")).text
        r = await assemble(client, tenant, query=query, retrieval={"strategy": "hybrid"})
        assert r.status_code == 200, r.text
        body = r.json()
        # Embeddings that keep timing out while none completes (for embedder_stall_ms, 1 s) open the
        # embedder's circuit, or are shed as busy first: auto then plans lexical at once. The level
        # stays L0, so the metric is where this shows.
        for _ in range(40):
            auto = (await assemble(client, tenant, query=query)).json()
            if auto["branches"]["cold"]["detail"].startswith(("auto: the embedder failed recently",
                                                              "auto: the embedder is busy")):
                break
        # A hung embedding keeps running (shielded) and holds the org's query lane: later assemblies
        # are shed as busy, or, once its latency sample is stale, try again, time out and open the circuit.
        after = (await client.get("/metrics")).text
    cold = body["branches"]["cold"]
    assert cold["outcome"] == "ok" and cold["source"] == "lexical" and "embedding timed out" in cold["detail"]
    assert body["degradation_level"] == "L0"
    assert ids[1] in {m["id"] for m in body["memories_used"]}
    assert body["metrics"]["total_ms"] <= 400 + SLACK_MS
    assert auto["branches"]["cold"]["detail"].startswith(("auto: the embedder failed recently",
                                                          "auto: the embedder is busy"))
    assert auto["degradation_level"] == "L0" and auto["branches"]["cold"]["source"] == "lexical"
    name = "pgcontext_assembly_cold_searches_total"

    def grew(why: str) -> float:
        labels = f'strategy="lexical",why="{why}"'
        return metric_sample(after, name, labels) - metric_sample(before, name, labels)
    assert grew("embedder_timeout") >= 1
    assert grew("embedder_circuit_open") + grew("embedder_busy") >= 1


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """The app on a real uvicorn server in a thread (a client can really disconnect)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


async def test_client_disconnect_abandons_the_assembly_as_L3(settings: Settings, endpoints: Endpoints,
                                                             embedder: Embedder, tenant: Tenant) -> None:
    import dataclasses

    custom = dataclasses.replace(
        settings, retrieval=dataclasses.replace(settings.retrieval, **SLOW_COLD),
        assembly=dataclasses.replace(settings.assembly, **{**GENEROUS, "deadline_ms": 5000, "cold_timeout_ms": 4000}))
    with structlog.testing.capture_logs() as logs, served(create_app(custom, endpoints, embedder=embedder)) as url:
        async with httpx.AsyncClient(base_url=url, headers=tenant.headers) as http:
            await http.put(f"/v1/agents/{AGENT}/directive", json={"content": "x"})
            with contextlib.suppress(httpx.ReadTimeout):
                await http.post("/v1/context/assemble", timeout=0.5, json={
                    "agent_id": AGENT, "query": "espresso", "model": "gpt-4o", "max_context_tokens": 500})
                raise AssertionError("the slowed assembly answered before the client gave up")
        for _ in range(60):
            if any(e["event"] == "context_assembly_abandoned" for e in logs):
                break
            await asyncio.sleep(0.05)
    abandoned = [e for e in logs if e["event"] == "context_assembly_abandoned"]
    assert abandoned and abandoned[0]["degradation_level"] == "L3"
    assert not [e for e in logs if e["event"] == "context_assembled"]  # nothing was assembled for nobody

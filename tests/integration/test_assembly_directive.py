"""The directive is part of the assembly's contract: every context holds the agent's directive or
says it is missing (``degradation_reasons``: ``directive_missing``, counted in Prometheus and in the
``context_assembled`` log line), and its read falls back from a Redis that does not answer to
Postgres within the wall instead of losing to a timer; a read with no answer by the wall is stood in
for by the instance's last copy, said to be unconfirmed.

On real Postgres and Redis: a Redis that accepts connections and never answers is a socket server of
this test's own, and a directive Postgres cannot answer in time is one whose table another session
holds locked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import msgspec
import structlog
from pgcontext_client.types.assembly import AssembledContext

from service.db import redisconn
from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import AGENT, GENEROUS, assemble, assembly_client, metric_sample, seed
from tests.integration.test_assembly_faults import HangingEmbedder

DEGRADATIONS = "pgcontext_assembly_degradations_total"


@contextlib.asynccontextmanager
async def silent_redis() -> AsyncIterator[str]:
    """A TCP server that accepts connections, reads what it is sent and never answers: a Redis that
    hangs (paused, or behind a dead network path), as its clients see it."""
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        writer.close()

    port = free_port()
    server = await asyncio.start_server(swallow, "127.0.0.1", port)
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.close()


@contextlib.asynccontextmanager
async def directives_locked(owner_dsn: str | None) -> AsyncIterator[None]:
    """Another session holds the directives table in ACCESS EXCLUSIVE mode: every read of it waits."""
    assert owner_dsn is not None
    conn = await asyncpg.connect(owner_dsn)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE directives IN ACCESS EXCLUSIVE MODE")
            yield
    finally:
        await conn.close()


async def drop_cached_directive(endpoints: Endpoints, tenant: Tenant) -> None:
    """Delete the agent's envelope from Redis (a client of this test's own: the app runs on another loop)."""
    redis = redisconn.connect(endpoints.redis_url, timeout_s=5)
    try:
        await redis.delete(f"{{{tenant.org_id}}}:directive:{AGENT}")
    finally:
        await redis.aclose()


async def test_a_directive_that_cannot_be_read_in_time_is_reported_missing(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    # A short wall (300 ms) the directive's Postgres read cannot meet while its table is locked; the
    # hot set and the cold search answer as usual, so the level stays L0 and the reason says it.
    # No last copy stands in (directive_last_known_s 0).
    async with assembly_client(settings, endpoints, embedder, **{**GENEROUS, "deadline_ms": 300,
                                                                 "directive_timeout_ms": 0,
                                                                 "directive_last_known_s": 0}) as client:
        await seed(client, tenant)
        assert (await assemble(client, tenant)).json()["directive"] is not None  # warm: cache, pool, model
        await drop_cached_directive(endpoints, tenant)
        before = (await client.get("/metrics")).text
        with structlog.testing.capture_logs() as logs:
            async with directives_locked(endpoints.owner_dsn):
                r = await assemble(client, tenant)
        after = (await client.get("/metrics")).text
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["directive"] is None and body["branches"]["directive"]["outcome"] == "timeout"
    assert "directive_missing" in body["degradation_reasons"], body["degradation_reasons"]
    assert "<directive>" not in body["context"]
    assert body["degradation_level"] == "L0" and "directive" not in body["sources_available"]
    assert metric_sample(after, DEGRADATIONS, 'reason="directive_missing"') == \
        metric_sample(before, DEGRADATIONS, 'reason="directive_missing"') + 1
    line = next(e for e in logs if e["event"] == "context_assembled")
    assert line["degradation_reasons"] == body["degradation_reasons"] and line["directive"] == "timeout"


async def test_the_last_copy_stands_in_for_a_read_with_no_answer_and_says_so(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, other_tenant: Tenant) -> None:
    # As above, with the default: the copy this instance last saw (here: the one it wrote) stands in.
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as elsewhere:  # another instance
        await seed(elsewhere, other_tenant, directive="You are the other org's helper.")
    async with assembly_client(settings, endpoints, embedder, **{**GENEROUS, "deadline_ms": 300}) as client:
        await seed(client, tenant)
        assert (await assemble(client, tenant)).json()["directive"] is not None  # warm: cache, pool, model
        r = await client.put(f"/v1/agents/{AGENT}/directive", json={"content": "Answer in French."},
                             headers=tenant.headers)
        assert r.status_code == 200, r.text
        await drop_cached_directive(endpoints, tenant)
        await drop_cached_directive(endpoints, other_tenant)
        before = (await client.get("/metrics")).text
        async with directives_locked(endpoints.owner_dsn):
            mine_r, theirs_r = await assemble(client, tenant), await assemble(client, other_tenant)
        after = (await client.get("/metrics")).text
    mine, theirs = mine_r.json(), theirs_r.json()
    as_client_sees = msgspec.json.decode(mine_r.content, type=AssembledContext)  # the Python client's flags
    assert as_client_sees.directive_unconfirmed and not as_client_sees.directive_missing
    assert msgspec.json.decode(theirs_r.content, type=AssembledContext).directive_missing
    branch = mine["branches"]["directive"]
    assert mine["directive"]["content"] == "Answer in French." and mine["directive"]["version"] == 2
    assert "Answer in French." in mine["context"]
    assert branch["outcome"] == "timeout" and branch["source"] == "memory" and branch["count"] == 1, branch
    assert "used the copy this process read" in branch["detail"]
    assert mine["degradation_reasons"] == ["directive_unconfirmed"]
    assert metric_sample(after, DEGRADATIONS, 'reason="directive_unconfirmed"') == \
        metric_sample(before, DEGRADATIONS, 'reason="directive_unconfirmed"') + 1
    # Another org's agent of the same name has no copy of its own: its directive is missing, never mine.
    assert theirs["directive"] is None and theirs["degradation_reasons"] == ["directive_missing"]
    assert "French" not in theirs["context"]


async def test_an_agent_without_a_directive_is_not_missing_one(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        r = await client.delete(f"/v1/agents/{AGENT}/directive", headers=tenant.headers)
        assert r.status_code == 204, r.text
        body = (await assemble(client, tenant)).json()
    assert body["directive"] is None and body["branches"]["directive"]["outcome"] == "ok"
    assert body["branches"]["directive"]["count"] == 0 and body["degradation_reasons"] == []


async def test_a_redis_that_does_not_answer_costs_the_directive_the_fallback_not_the_wall(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)  # the directive is in Postgres
    async with silent_redis() as url:
        hanging = Endpoints(endpoints.owner_dsn, endpoints.app_dsn, url)
        # Redis reads give up after the socket timeout (250 ms); the wall here is 1 s.
        async with assembly_client(settings, hanging, embedder, deadline_ms=1000, hot_timeout_ms=100) as client:
            r = await assemble(client, tenant)
    assert r.status_code == 200, r.text
    body = r.json()
    directive = body["branches"]["directive"]
    assert body["directive"] is not None and directive["outcome"] == "ok" and directive["source"] == "postgres"
    # Postgres was asked after the 5 ms fallback, not after Redis's socket timeout.
    assert directive["ms"] < settings.redis.socket_timeout_s * 1000, directive
    assert "directive_missing" not in body["degradation_reasons"]
    assert body["branches"]["hot"]["outcome"] != "ok" and "hot_unavailable" in body["degradation_reasons"]
    assert body["degradation_level"] == "L1"


async def test_each_reason_is_counted_and_a_complete_context_has_none(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    # cold_unavailable: every search branch sleeps past the cold budget; retrieval_reduced: the
    # query's embedding hangs, so auto's hybrid falls back to lexical.
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        complete = (await assemble(client, tenant)).json()
        unhot = (await assemble(client, tenant, retrieval={"use_hot": False})).json()
    assert complete["degradation_reasons"] == [] and complete["degradation_level"] == "L0"
    assert unhot["degradation_reasons"] == [] and unhot["degradation_level"] == "L1"  # turned off, not missing
    slow = {**GENEROUS, "deadline_ms": 400, "cold_timeout_ms": 300}
    async with assembly_client(settings, endpoints, embedder, retrieval={"branch_delay_ms": 1000}, **slow) as client:
        before = (await client.get("/metrics")).text
        body = (await assemble(client, tenant)).json()
        after = (await client.get("/metrics")).text
    assert body["branches"]["cold"]["outcome"] == "timeout"
    assert body["degradation_reasons"] == ["cold_unavailable"] and body["degradation_level"] == "L1"
    assert metric_sample(after, DEGRADATIONS, 'reason="cold_unavailable"') == \
        metric_sample(before, DEGRADATIONS, 'reason="cold_unavailable"') + 1
    hanging = HangingEmbedder(embedder)
    async with assembly_client(settings, endpoints, hanging, **{**GENEROUS, "deadline_ms": 400, "cold_timeout_ms": 300}
                               ) as client:
        await seed(client, tenant)
        hanging.hanging = True  # the query's embedding misses its deadline: auto falls back to lexical
        body = (await assemble(client, tenant, query="the espresso machine on the third floor")).json()
    assert body["retrieval"]["reduced"] and body["retrieval"]["reason"] == "embedder_timeout", body["retrieval"]
    assert body["degradation_reasons"] == ["retrieval_reduced"] and body["degradation_level"] == "L0"


async def test_that_an_agent_has_no_directive_is_cached_until_one_is_written(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """Assembling for an agent without a directive reads Redis, not Postgres (a delete leaves "none" in
    Redis itself); a directive written later replaces that at once (it is newer), and so does deleting
    it again."""
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        await seed(client, tenant)
        assert (await client.delete(f"/v1/agents/{AGENT}/directive", headers=tenant.headers)).status_code == 204
        first = (await assemble(client, tenant)).json()["branches"]["directive"]
        await asyncio.sleep(0.2)  # the envelope is written behind the answer
        again = (await assemble(client, tenant)).json()
        r = await client.put(f"/v1/agents/{AGENT}/directive", json={"content": "Be brief."}, headers=tenant.headers)
        assert r.status_code == 200, r.text
        written = (await assemble(client, tenant)).json()
        assert (await client.delete(f"/v1/agents/{AGENT}/directive", headers=tenant.headers)).status_code == 204
        deleted = (await assemble(client, tenant)).json()
        got = await client.get(f"/v1/agents/{AGENT}/directive", headers=tenant.headers)
    assert first["source"] == "cache" and first["count"] == 0, first
    assert again["directive"] is None and again["degradation_reasons"] == []
    assert again["branches"]["directive"]["source"] == "cache" and again["branches"]["directive"]["count"] == 0
    assert written["directive"]["content"] == "Be brief." and written["branches"]["directive"]["source"] == "cache"
    assert deleted["directive"] is None and got.status_code == 404

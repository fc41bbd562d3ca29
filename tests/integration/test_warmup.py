"""Ready means ready: the start warms the assembly path before ``/readyz`` answers ok, on real
Postgres and Redis: every pooled connection has the assembly's statements prepared, the warm-up
leaves no trace in metrics or logs, and one that cannot complete keeps ``/readyz`` at 503.

The restart measurement (a real ``pgcontext serve`` restarted ten times, each first assembly
complete) is ``test_first_assembly_after_restart.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from litestar.testing import AsyncTestClient
from prometheus_client import REGISTRY

from service.app import create_app
from service.assembly.warmup import WARMUP_ORG
from service.db.queries import query
from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.runtime import Endpoints, Services
from service.settings import Settings

ASSEMBLY_STATEMENTS = ("auth.resolve_key", "cache.epoch", "directives.get", "hot.agent_exists", "hot.fill",
                       "retrieval.lexical_bm25", "retrieval.semantic_hnsw")


def assemblies_counted() -> float:
    return sum(REGISTRY.get_sample_value("pgcontext_assemblies_total", {"level": level}) or 0.0
               for level in ("L0", "L1", "L2"))


async def prepared_on_each_connection(services: Services, count: int) -> list[set[str]]:
    """The statements prepared on ``count`` pooled connections (held at once, so all distinct)."""
    together = asyncio.Barrier(count)

    async def one() -> set[str]:
        async with services.db.tenant(WARMUP_ORG, readonly=True) as tx:
            await together.wait()
            rows = await tx.conn.fetch("SELECT statement FROM pg_prepared_statements")
            return {row["statement"] for row in rows}

    return list(await asyncio.gather(*(one() for _ in range(count))))


async def test_ready_once_every_pooled_connection_has_prepared_the_assembly_statements(
        settings: Settings, endpoints: Endpoints, embedder: Embedder) -> None:
    before = assemblies_counted()
    with structlog.testing.capture_logs() as logs:
        async with AsyncTestClient(app=create_app(settings, endpoints, embedder=embedder)) as client:
            r = await client.get("/readyz")
            services = client.app.state.services
            assert isinstance(services, Services)
            count = services.db.pool_size()  # the floor, and what the warm-up's assemblies added

            async def prepared() -> list[set[str]]:
                return await prepared_on_each_connection(services, count)

            statements = await asyncio.to_thread(client.blocking_portal.call, prepared)
    assert r.status_code == 200, r.text
    assert r.json()["checks"] == {"postgres": "ok", "redis": "ok", "warm": "ok"}
    assert len(statements) == count >= settings.database.pool_min
    for on_connection in statements:
        missing = [name for name in ASSEMBLY_STATEMENTS if query(name) not in on_connection]
        assert not missing, missing
    warmed = [e for e in logs if e["event"] == "warmed_up"]
    assert len(warmed) == 1 and set(warmed[0]["steps"]) == {"buffers", "redis", "postgres", "embedder", "assembly"}
    # Its assemblies are the pipeline's own, but leave no trace: no log line, no count.
    assert not [e for e in logs if e["event"] == "context_assembled"]
    assert assemblies_counted() == before


async def test_a_warm_up_that_cannot_complete_keeps_readyz_at_503(
        settings: Settings, endpoints: Endpoints, embedder: Embedder) -> None:
    nowhere = Endpoints(endpoints.owner_dsn, endpoints.app_dsn, f"redis://127.0.0.1:{free_port()}/0")
    async with AsyncTestClient(app=create_app(settings, nowhere, embedder=embedder)) as client:
        r = await client.get("/readyz")
    assert r.status_code == 503
    checks: dict[str, Any] = r.json()["checks"]
    assert checks["postgres"] == "ok" and checks["warm"].startswith("incomplete: redis: "), checks

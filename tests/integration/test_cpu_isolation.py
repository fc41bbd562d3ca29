"""One org's CPU-heavy request must not stall another org's requests: counting a long
``recent_messages`` history runs in a worker thread, and only as far back as could fit."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly_faults import served

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _long_history(seed: int, messages: int = 200, chars: int = 32_000) -> list[dict[str, str]]:
    rng = random.Random(seed)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 9))) for _ in range(3000)]
    return [{"role": "user" if i % 2 else "assistant", "content": " ".join(rng.choices(words, k=chars // 5))[:chars]}
            for i in range(messages)]


async def _gets(http: httpx.AsyncClient, tenant: Tenant, until: asyncio.Task[Any] | None = None,
                count: int = 30) -> list[float]:
    """Latencies of org A's cheap GETs sent one after another: ``count`` of them, or until ``until`` is done."""
    latencies: list[float] = []
    while (until is None and len(latencies) < count) or (until is not None and not until.done()):
        started = time.perf_counter()
        r = await http.get("/v1/memories", params={"limit": 1}, headers=tenant.headers)
        latencies.append(time.perf_counter() - started)
        assert r.status_code == 200, r.text
        await asyncio.sleep(0.005)
    return latencies


@pytest.mark.parametrize("budget", [{"max_context_tokens": 1_000_000}, {"selective": True}])
async def test_long_history_does_not_stall_another_org(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                                       tenant: Tenant, other_tenant: Tenant,
                                                       budget: dict[str, Any]) -> None:
    body = {"agent_id": "talker", "model": "gpt-4o", "query": "what did we decide?",
            "recent_messages": _long_history(13), **budget}
    # A real server (the in-process test client runs each request to completion, one at a time).
    with served(create_app(settings, endpoints, embedder=embedder)) as url:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            solo = await _gets(http, tenant)
            heavy = asyncio.create_task(http.post("/v1/context/assemble", json=body, headers=other_tenant.headers))
            await asyncio.sleep(0.05)  # its body is on the way
            during = await _gets(http, tenant, until=heavy)
            r = await heavy
    assert r.status_code == 200, r.text[:300]
    assert r.json()["budget"]["history_tokens"] > 900_000  # ~3M tokens sent: the most that fits, or all of it
    # Before: every GET waited for the whole count (2-11 s here). Now the count runs in a thread
    # (tiktoken releases the GIL) and the GETs only share the cores; bounds are generous because
    # the test machine is shared.
    median_solo, median_during = statistics.median(solo), statistics.median(during)
    print(f"GET solo p50 {median_solo * 1000:.1f} ms max {max(solo) * 1000:.1f} ms; during org B's assembly "
          f"p50 {median_during * 1000:.1f} ms max {max(during) * 1000:.1f} ms ({len(during)} GETs)")
    assert median_during < 3 * median_solo + 0.05, (median_solo, median_during)
    assert max(during) < 0.5, f"org A's GET waited {max(during) * 1000:.0f} ms behind org B's assembly"
    assert len(during) >= 3, during  # the GETs really ran while the assembly did


async def test_long_history_is_counted_only_as_far_back_as_fits(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    body = {"agent_id": "talker", "model": "gpt-4o", "query": "what did we decide?",
            "recent_messages": _long_history(7), "max_context_tokens": 8000, "reserve_tokens": 500}
    started = time.perf_counter()
    r = await client.post("/v1/context/assemble", json=body, headers=tenant.headers)
    elapsed = time.perf_counter() - started
    assert r.status_code == 200, r.text[:300]
    budget = r.json()["budget"]
    assert budget["history_messages"] == 0 and budget["history_messages_dropped"] == 200  # one message is ~7K tokens
    assert elapsed < 1.0, elapsed  # counts one message, not 200

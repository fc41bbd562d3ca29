"""Failures that become data leave no reference cycles behind.

A branch that times out or fails is recorded (a fallback, an L1 answer, a 503) and forgotten. Its
exception must not stay alive in a reference cycle (an ``asyncio.timeout``'s frame holding the task
that holds the exception, a frame holding the error raised from it): only a full garbage collection
frees such cycles, with every frame, row and vector they hold, and a full collection stops the event
loop for every request. Each test collects the cyclic garbage of a few failing requests
(``gc.DEBUG_SAVEALL``) and looks for exceptions and the service's own frames in it. The test
client's own cycles (httpx requests and responses) are not the service's and are not counted.
"""

from __future__ import annotations

import contextlib
import gc
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from litestar.testing import AsyncTestClient
from redis.exceptions import NoScriptError

import service
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_search import seed
from tests.integration.test_search_faults import HangingEmbedder, app_client, post

SERVICE_DIR = str(Path(service.__file__).parent)


@contextlib.contextmanager
def cyclic_garbage() -> Iterator[list[object]]:
    """What a full collection finds unreachable among the objects made inside the block."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.disable()
    found: list[object] = []
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()


def leftovers(garbage: list[object]) -> list[str]:
    """Exceptions and frames of the service's code among ``garbage``."""
    out = [f"{type(o).__name__}: {o}" for o in garbage if isinstance(o, BaseException)
           and not isinstance(o, NoScriptError)]  # redis-py loading a script the server has not seen
    out += [f"frame {o.f_code.co_name} ({o.f_code.co_filename})" for o in garbage
            if isinstance(o, types.FrameType) and o.f_code.co_filename.startswith(SERVICE_DIR)]
    return out


async def _assemble(client: AsyncTestClient[Any], tenant: Tenant, query: str) -> Any:
    return await client.post("/v1/context/assemble", headers=tenant.headers, json={
        "agent_id": "a1", "query": query, "model": "gpt-4o", "max_context_tokens": 2000})


async def test_branch_timeouts_in_search_leave_no_cycles(settings: Settings, endpoints: Endpoints,
                                                         embedder: Embedder, tenant: Tenant) -> None:
    """A semantic statement timeout (fallback to lexical), then both branches out of time (503)."""
    async with app_client(settings, endpoints, embedder, branch_delay_ms=60, semantic_timeout_ms=5) as client:
        await seed(client, tenant)
        with cyclic_garbage() as garbage:
            for i in range(4):
                r = await post(client, tenant, query=f"dark roast coffee {i}", strategy="semantic", limit=3)
                assert r.status_code == 200 and r.json()["strategy"] == "lexical", r.text
        assert leftovers(garbage) == []
    async with app_client(settings, endpoints, embedder, branch_delay_ms=60, semantic_timeout_ms=5,
                          lexical_timeout_ms=5) as client:
        with cyclic_garbage() as garbage:
            for i in range(4):
                r = await post(client, tenant, query=f"roasted beans {i}", strategy="hybrid", limit=3)
                assert r.status_code == 503, r.text
        assert leftovers(garbage) == []


async def test_an_embedder_timeout_leaves_no_cycles(settings: Settings, endpoints: Endpoints,
                                                    embedder: Embedder, tenant: Tenant) -> None:
    wrapper = HangingEmbedder(embedder)
    async with app_client(settings, endpoints, wrapper, embedding_timeout_ms=50) as client:
        await seed(client, tenant)
        wrapper.broken = True
        with cyclic_garbage() as garbage:
            r = await post(client, tenant, query="espresso descaling", strategy="hybrid", limit=3)
            assert r.status_code == 200 and r.json()["retrieval"]["reason"] == "embedder_timeout", r.text
        wrapper.broken = False
        assert leftovers(garbage) == []


async def test_a_cold_timeout_in_assembly_leaves_no_cycles(settings: Settings, endpoints: Endpoints,
                                                           embedder: Embedder, tenant: Tenant) -> None:
    """Cold searches slower than the assembly's deadline: answers without the cold branch."""
    async with app_client(settings, endpoints, embedder, branch_delay_ms=60) as client:
        await seed(client, tenant)
        with cyclic_garbage() as garbage:
            for i in range(4):
                r = await _assemble(client, tenant, f"dark roast coffee {i}")
                body = r.json()
                assert r.status_code == 200 and body["branches"]["cold"]["outcome"] == "timeout", r.text
        assert leftovers(garbage) == []

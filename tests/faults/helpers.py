"""HTTP helpers shared by the fault tests (requests against a service's real port)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.conftest import Tenant
from tests.integration.test_assembly import AGENT, MEMORIES

GENEROUS: dict[str, Any] = {"deadline_ms": 3000, "directive_timeout_ms": 1000, "hot_timeout_ms": 1000,
                            "cold_timeout_ms": 2000}
"""Assembly deadlines that a loaded 2-core machine always meets: every level below L0 is the fault's."""


def client(base: str, tenant: Tenant, timeout_s: float = 30) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base, headers=tenant.headers, timeout=timeout_s)


async def seed(http: httpx.AsyncClient, directive: str = "You are the office helper.") -> None:
    r = await http.put(f"/v1/agents/{AGENT}/directive", json={"content": directive})
    assert r.status_code == 200, r.text
    r = await http.post("/v1/memories", json={"memories": [{"text": t, "agent_id": a, "pinned": p}
                                                           for t, a, p in MEMORIES]})
    assert r.status_code == 201, r.text


async def assemble(http: httpx.AsyncClient, headers: dict[str, str] | None = None) -> httpx.Response:
    return await http.post("/v1/context/assemble", headers=headers, json={
        "agent_id": AGENT, "query": "where is the espresso machine?", "model": "gpt-4o",
        "max_context_tokens": 2000})


async def directive(http: httpx.AsyncClient) -> str:
    r = await http.get(f"/v1/agents/{AGENT}/directive")
    assert r.status_code == 200, r.text
    return str(r.json()["content"])


async def hot_texts(http: httpx.AsyncClient, agent_id: str = AGENT) -> list[str]:
    r = await http.get("/v1/memories/hot", params={"agent_id": agent_id})
    assert r.status_code == 200, r.text
    return [item["text"] for item in r.json()["items"]]


async def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 50 ms until it holds; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.05)

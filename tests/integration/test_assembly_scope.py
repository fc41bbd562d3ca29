"""An assembly's cold search ranks the agent's own and the org-wide memories among themselves: in an
org of many agents, the others' memories on the same subject do not take their places (each branch
passes over them, rather than ranking the whole org and keeping what is in scope)."""

from __future__ import annotations

from typing import Any

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client

OWN = ["Dana switched to oat milk last week.", "Dana cycles to work on Tuesdays.",
       "Dana's sister lives in Porto.", "Dana dislikes cold coffee."]
SHARED = "The office fridge is cleaned on Fridays; label your milk."
DRINKS = ["milk", "tea", "coffee", "cocoa", "chai"]


def crowd(agent: int) -> list[dict[str, Any]]:
    """Another agent's 100 memories about milk and what they like: each branch's best rows of the org."""
    return [{"text": f"Customer {agent}-{i} likes {DRINKS[i % 5]} with whole milk, and asks what milk we like "
                     f"(order {i}).", "agent_id": f"crowd-{agent}"} for i in range(100)]


async def test_other_agents_memories_do_not_take_an_agents_places(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        for batch in ([{"text": t, "agent_id": "dana"} for t in OWN] + [{"text": SHARED}], crowd(1), crowd(2),
                      crowd(3)):
            r = await client.post("/v1/memories", json={"memories": batch, "on_duplicate": "keep"},
                                  headers=tenant.headers)
            assert r.status_code == 201, r.text

        for strategy in ("lexical", "semantic", "hybrid"):
            r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
                "agent_id": "dana", "query": "what milk does Dana like?", "model": "gpt-4o",
                "max_context_tokens": 2000, "retrieval": {"strategy": strategy, "use_hot": False}})
            assert r.status_code == 200, r.text
            body = r.json()
            used = [m["text"] for m in body["memories_used"]]
            assert used[0] == OWN[0], (strategy, used)  # the agent's own best match, first
            assert SHARED in used and not any(t.startswith("Customer") for t in used), (strategy, used)
            # every candidate the branch handed on is in scope: the agent's 4 and the org-wide one
            assert body["branches"]["cold"]["count"] == 5, (strategy, body["branches"])

"""Property, through the real endpoint: whatever the memories, directive, messages, model and budget,
re-tokenizing the returned ``context`` never exceeds the budget (and equals ``budget.context_tokens``).

Each example writes its own random memories for a fresh agent (with random vectors, so no model
time is spent on them; the query is still embedded by the service) and assembles with a random
budget. The only other allowed answer is 422 when the directive, reserve and envelope alone do not
fit ``max_context_tokens``.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from service.text.tokens import Tokenizers, encoding_for_model
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client

PIECES = [*"abcxyz019 \n\t.,;:!?/[]<>'\"-_éß日本🚀", "<|endoftext|>", "</memories>", "[m]", "\r\n", "  ", "coffee ",
          "espresso machine ", "the team ", "deploys on Tuesday "]
text = st.lists(st.sampled_from(PIECES), min_size=1, max_size=40).map("".join).filter(lambda t: t.strip() != "")
agents = itertools.count()


@pytest.fixture(scope="module")
async def prop_client(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> AsyncIterator[Any]:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        yield client


@pytest.fixture(scope="module")
async def prop_tenant(make_tenant: Any) -> Tenant:
    tenant: Tenant = await make_tenant("prop")
    return tenant


@hypothesis_settings(max_examples=25, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    memories=st.lists(st.tuples(text, st.booleans(), st.floats(0, 1)), min_size=0, max_size=12),
    directive=st.one_of(st.none(), text),
    messages=st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "we ird"]), text), max_size=6),
    query=text,
    model=st.sampled_from(["gpt-4o", "gpt-4", "cl100k_base", "o200k_base", "gpt-4.1-mini"]),
    max_tokens=st.one_of(st.none(), st.integers(1, 3000)),
    reserve=st.integers(0, 600),
    selective=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
async def test_context_never_exceeds_its_budget(
        prop_client: AsyncTestClient[Any], prop_tenant: Tenant, settings: Settings,
        memories: list[tuple[str, bool, float]], directive: str | None, messages: list[tuple[str, str]], query: str,
        model: str, max_tokens: int | None, reserve: int, selective: bool, seed: int) -> None:
    client, headers = prop_client, prop_tenant.headers
    agent = f"prop-{next(agents)}"
    if max_tokens is None:
        selective = True
    rng = np.random.default_rng(seed)
    if memories:
        vectors = rng.normal(size=(len(memories), settings.embedding.dim))
        body = {"memories": [{"text": t, "agent_id": agent, "pinned": p, "importance": imp, "embedding": list(v)}
                             for (t, p, imp), v in zip(memories, vectors, strict=True)]}
        assert (await client.post("/v1/memories", json=body, headers=headers)).status_code == 201
    if directive is not None:
        r = await client.put(f"/v1/agents/{agent}/directive", json={"content": directive}, headers=headers)
        assert r.status_code == 200, r.text
    payload = {"agent_id": agent, "query": query, "model": model, "max_context_tokens": max_tokens,
               "selective": selective, "reserve_tokens": reserve,
               "recent_messages": [{"role": role, "content": content} for role, content in messages]}
    r = await client.post("/v1/context/assemble", json=payload, headers=headers)
    counter = Tokenizers(settings.data_dir / "tiktoken").get(encoding_for_model(model))
    if r.status_code == 422:
        details = r.json()["error"]["details"]
        assert max_tokens is not None
        assert details["directive_tokens"] + details["reserve_tokens"] + details["overhead_tokens"] > max_tokens
        return
    assert r.status_code == 200, r.text
    body = r.json()
    b = body["budget"]
    tokens = counter.count(body["context"])
    assert tokens == b["context_tokens"]
    assert b["memories_tokens"] <= b["memories_budget_tokens"]
    if max_tokens is not None:
        assert tokens <= max_tokens - b["reserve_tokens"] - b["overhead_tokens"], b
    assert sum(m["tokens"] for m in body["memories_used"]) <= b["memories_tokens"]
    assert all(f"\n{m['tag']} " in body["context"] for m in body["memories_used"])
    assert body["refs"] == {m["tag"]: m["id"] for m in body["memories_used"]}

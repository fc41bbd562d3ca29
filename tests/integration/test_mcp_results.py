"""The size of what an MCP tool hands a model: ``recall`` over long memories stays within what a model's
context and its runtime take from one tool call. The real server behind the SDK's in-process client,
against a live service."""

from __future__ import annotations

import json
import random
from uuid import uuid4

import pytest
from pgcontext_client import Client as Pgcontext
from pgcontext_client import MemoryIn, SearchFilters, SearchTuning

from service.mcp import McpConfig
from service.mcp.tools import MAX_RECALL_CHARS
from tests.conftest import Tenant
from tests.integration.test_mcp_arguments import session

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_recall_of_long_memories_is_cut_to_a_size_a_model_takes(live_url: str, tenant: Tenant) -> None:
    """Six reports of ~30,000 characters each were all returned (180,000 characters of text, ~45,000
    tokens, which Claude Code refuses from one tool call): now whole memories up to the cap, best first,
    and ``more`` counts the rest."""
    agent = f"mcp-{uuid4().hex[:8]}"
    rng = random.Random(7)
    words = ["apple", "river", "mountain", "quantum", "violin", "harbor", "lantern", "meadow", "copper", "falcon"]
    reports = [f"Zephyr project report {n}: " + " ".join(rng.choice(words) for _ in range(4200)) for n in range(6)]
    assert all(28_000 < len(r) <= 32_000 for r in reports)
    with Pgcontext(live_url, tenant.key) as pg:
        pg.create_memories([MemoryIn(text=r, agent_id=agent) for r in reports])
        pg.create_memory("The zephyr project ships in May.", agent_id=agent)
        everything = pg.search("zephyr project report", limit=10, filters=SearchFilters(agent_id=agent),
                               tuning=SearchTuning(first_person=None)).results  # as recall searches
    assert len(everything) == 7
    async with session(McpConfig(url=live_url, agent_id=agent, api_key=tenant.key)) as client:
        result = await client.call_tool("recall", {"query": "zephyr project report", "limit": 10})
        assert not result.is_error, result.content
        found = result.structured_content
        assert found is not None and json.loads(result.content[0].text) == found  # type: ignore[union-attr]
        texts = [m["text"] for m in found["memories"]]
        assert texts == [r.text for r in everything[:len(texts)]]  # best first, each whole
        assert 1 <= len(texts) < 7 and found["more"] == 7 - len(texts)
        assert sum(map(len, texts)) <= MAX_RECALL_CHARS
        assert len(result.content[0].text) < 60_000  # type: ignore[union-attr]

        short = await client.call_tool("recall", {"query": "when does the zephyr project ship?", "limit": 1})
        assert short.structured_content is not None and "more" not in short.structured_content


async def test_forget_reports_an_id_given_twice_once(live_url: str, tenant: Tenant) -> None:
    """An id listed twice (or spelt twice: upper case) was deleted by its first mention and then reported
    ``not_found`` by its second: each id is now reported once, under its first spelling, in the order given."""
    agent = f"mcp-{uuid4().hex[:8]}"
    with Pgcontext(live_url, tenant.key) as pg:
        kept, dropped = (str(i) for i in pg.create_memories([MemoryIn(text=f"Note {n} to forget.", agent_id=agent)
                                                             for n in range(2)]).ids)
    nobody = str(uuid4())
    async with session(McpConfig(url=live_url, agent_id=agent, api_key=tenant.key)) as client:
        ids = [dropped, nobody, dropped.upper(), "not-an-id", dropped, nobody, "not-an-id"]
        result = await client.call_tool("forget", {"memory_ids": ids})
        assert not result.is_error, result.content
        assert result.structured_content == {"deleted": [dropped], "not_found": [nobody, "not-an-id"]}
    with Pgcontext(live_url, tenant.key) as pg:
        assert [str(m.id) for m in pg.list_memories(agent_id=agent).items] == [kept]

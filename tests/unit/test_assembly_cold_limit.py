"""The cold candidate count follows the memory budget and the org's own tokens per memory line."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest

from service.assembly.cold_limit import ColdLimit, memories_budget_bound
from service.assembly.intent import Intent, plan_selective_budget
from service.assembly.scoring import Candidate, ScoredCandidate, score_candidates
from service.assembly.types import AssembleRequest
from service.settings import AssemblySettings
from service.text.tokens import TokenCounter, Tokenizers

SETTINGS = AssemblySettings(cold_limit=20, cold_limit_max=60, cold_candidates_per_slot=2.0, cold_tokens_per_memory=40)


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken")).get("o200k_base")


def test_the_count_grows_with_the_budget_between_floor_and_ceiling() -> None:
    limits = ColdLimit(SETTINGS)
    org = uuid4()
    assert limits.for_budget(org, 0) == 20  # the floor
    assert limits.for_budget(org, 400) == 20  # 2 * 400 / 40 = 20
    assert limits.for_budget(org, 1000) == 50  # a 1,000-token budget is no longer starved by 20
    assert limits.for_budget(org, 8000) == 60  # the ceiling
    counts = [limits.for_budget(org, b) for b in range(0, 5000, 100)]
    assert counts == sorted(counts)


def test_the_org_s_own_line_length_decides(counter: TokenCounter) -> None:
    limits = ColdLimit(SETTINGS)
    long_org, short_org, unseen = uuid4(), uuid4(), uuid4()
    now = datetime.now(UTC)

    def scored(text: str) -> list[ScoredCandidate]:
        cands = [Candidate(id=str(i), text=f"{text} {i}", origin="cold", relevance=0.5, created_at=now)
                 for i in range(5)]
        return score_candidates(cands, intent=Intent.FACTUAL, counter=counter)

    limits.learn(long_org, scored("A long abstract sentence about mitochondria and oxidative stress. " * 20))
    limits.learn(short_org, scored("Caroline: hi"))
    assert limits.tokens_per_memory(long_org) > 200 and limits.tokens_per_memory(short_org) < 10
    assert limits.for_budget(long_org, 1000) == 20  # a few abstracts fill 1,000 tokens
    assert limits.for_budget(short_org, 1000) == 60
    assert limits.for_budget(unseen, 1000) == 50  # the prior until the org is seen
    before = limits.tokens_per_memory(short_org)
    limits.learn(short_org, scored("Melanie: a longer line about the charity race last weekend and the kids"))
    assert before < limits.tokens_per_memory(short_org) < 20  # a moving average, not the last request


def test_the_bound_is_known_before_the_branches_answer() -> None:
    fixed = AssembleRequest(agent_id="a", query="q", model="gpt-4o", max_context_tokens=1000, reserve_tokens=0)
    assert memories_budget_bound(fixed, None, 512) == 1000
    defaulted = AssembleRequest(agent_id="a", query="q", model="gpt-4o", max_context_tokens=1000)
    assert memories_budget_bound(defaulted, None, 512) == 488
    sel = plan_selective_budget("When did Caroline go to the support group?")
    selective = AssembleRequest(agent_id="a", query="q", model="gpt-4o", selective=True)
    assert memories_budget_bound(selective, sel, 512) == sel.final_tokens
    both = AssembleRequest(agent_id="a", query="q", model="gpt-4o", selective=True, max_context_tokens=300,
                           reserve_tokens=0)
    assert memories_budget_bound(both, sel, 512) == min(300, sel.final_tokens)

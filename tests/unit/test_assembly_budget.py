"""The budget arithmetic, selective capping, and history trimming."""

from __future__ import annotations

import pytest

from service.assembly.budget import (
    compute_budget,
    directive_tokens,
    envelope_tokens,
    fit_history,
    history_tokens,
    plan_budget,
)
from service.assembly.format import format_directive, format_history
from service.assembly.intent import Intent, plan_selective_budget
from service.text.tokens import TokenCounter, Tokenizers


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken")).get("cl100k_base")


def test_fixed_budget_subtracts_every_part() -> None:
    budget = compute_budget(
        max_context_tokens=4000, directive_tokens=300, history_tokens=500, reserve_tokens=1000, overhead_tokens=7
    )
    assert budget.mode == "fixed"
    assert budget.memories_available == 4000 - 300 - 500 - 1000 - 7
    assert budget.overflow == 0
    assert budget.context_limit == 4000 - 1000 - 7
    assert budget.memories_tokens == 0 and budget.with_memories_tokens(120).memories_tokens == 120
    assert budget.tier is None and budget.intent is None and budget.multiplier == 1.0


def test_memory_budget_is_never_negative() -> None:
    budget = compute_budget(max_context_tokens=1000, directive_tokens=800, history_tokens=400, reserve_tokens=200)
    assert budget.memories_available == 0
    assert budget.overflow == 400


def test_selective_budget_alone() -> None:
    selective = plan_selective_budget("Compare pgvector and Elasticsearch")
    budget = compute_budget(
        max_context_tokens=None, directive_tokens=50, history_tokens=0, reserve_tokens=500, selective=selective
    )
    assert budget.mode == "selective"
    assert budget.memories_available == selective.final_tokens
    assert budget.tier == "large" and budget.intent is Intent.DETAILED
    assert budget.complexity is selective.complexity and budget.multiplier == selective.multiplier
    assert budget.context_limit is None


def test_selective_budget_is_capped_by_what_fits() -> None:
    selective = plan_selective_budget("Compare pgvector and Elasticsearch")
    roomy = compute_budget(
        max_context_tokens=128_000, directive_tokens=50, history_tokens=0, reserve_tokens=500, selective=selective
    )
    tight = compute_budget(
        max_context_tokens=2000, directive_tokens=50, history_tokens=100, reserve_tokens=500, selective=selective
    )
    assert roomy.memories_available == selective.final_tokens
    assert tight.memories_available == 2000 - 50 - 100 - 500
    # the cap is a step of the budget's explanation, in the style of selective mode's own reasons
    assert roomy.cap_reason() is None
    assert tight.cap_reason() == (f"max_context_tokens 2000: {selective.final_tokens} -> 1350, what is left after "
                                  "the directive (50), the history (100), the reserve (500) and the envelope (0)")
    fixed = compute_budget(max_context_tokens=2000, directive_tokens=50, history_tokens=100, reserve_tokens=500)
    assert fixed.cap_reason() is None  # no selective budget to cap


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="need max_context_tokens"):
        compute_budget(max_context_tokens=None, directive_tokens=0, history_tokens=0, reserve_tokens=0)
    with pytest.raises(ValueError, match="reserve_tokens"):
        compute_budget(max_context_tokens=10, directive_tokens=0, history_tokens=0, reserve_tokens=-1)


def test_measured_parts_cover_both_ways_of_sending(counter: TokenCounter) -> None:
    directive = "You are the billing agent.\nAnswer in English."
    history = [("user", "When is the next invoice?"), ("assistant", "On the 1st.")]
    d = directive_tokens(counter, directive)
    h = history_tokens(counter, history)
    assert d >= counter.count(format_directive(directive))
    assert d >= counter.count_messages([("system", directive)], prime_reply=False)
    assert h >= counter.count(format_history(history))
    assert h >= counter.count_messages(history, prime_reply=False)
    assert directive_tokens(counter, None) == 0 and history_tokens(counter, []) == 0
    assert envelope_tokens(counter) == 3 + counter.count("system") + 3


def test_plan_budget_measures_everything(counter: TokenCounter) -> None:
    history = [("user", "hi"), ("assistant", "hello")]
    budget, kept = plan_budget(
        counter, directive="Be brief.", history=history, reserve_tokens=256, max_context_tokens=8192
    )
    assert kept == tuple(history)
    assert budget.directive == directive_tokens(counter, "Be brief.")
    assert budget.history == history_tokens(counter, history)
    assert budget.overhead == envelope_tokens(counter)
    assert budget.memories_available == 8192 - budget.directive - budget.history - 256 - budget.overhead
    assert budget.history_messages == 2 and budget.history_dropped == 0


def test_plan_budget_drops_oldest_history_to_fit(counter: TokenCounter) -> None:
    history = [("user", f"message number {i} " + "word " * 40) for i in range(30)]
    budget, kept = plan_budget(
        counter, directive="Be brief.", history=history, reserve_tokens=200, max_context_tokens=1000
    )
    assert 0 < len(kept) < 30
    assert kept == tuple(history[-len(kept) :])
    assert budget.history_dropped == 30 - len(kept)
    assert budget.overflow == 0
    assert budget.directive + budget.history + budget.reserve + budget.overhead <= 1000
    # One more message would not have fitted.
    assert history_tokens(counter, history[-len(kept) - 1 :]) > 1000 - 200 - budget.directive - budget.overhead


def test_plan_budget_without_trimming_reports_overflow(counter: TokenCounter) -> None:
    history = [("user", "word " * 300)]
    budget, kept = plan_budget(
        counter, directive=None, history=history, reserve_tokens=100, max_context_tokens=200, trim_history=False
    )
    assert kept == tuple(history)
    assert budget.overflow > 0 and budget.memories_available == 0


def test_fit_history_edges(counter: TokenCounter) -> None:
    history = [("user", "one"), ("assistant", "two"), ("user", "three")]
    assert fit_history(counter, history, 0) == ((), 3)
    assert fit_history(counter, history, 10_000) == (tuple(history), 0)
    assert fit_history(counter, [], 5) == ((), 0)

"""Property: whatever the memories, history and budget, the packed block never exceeds its budget.

Random texts (any Unicode, including lone surrogates and whitespace/punctuation soup aimed at
tiktoken's pre-tokenizer), random histories and random budgets are packed and formatted, then the
result is re-tokenized with the same encoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.assembly.budget import history_tokens, measure_history, plan_budget
from service.assembly.format import format_context, format_history, format_memories
from service.assembly.intent import Intent, plan_selective_budget
from service.assembly.packing import select_memories
from service.assembly.scoring import Candidate
from service.text.tokens import TokenCounter, Tokenizers

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
REASONS = {"empty", "duplicate", "below_threshold", "over_budget"}

TRICKY = (
    list(" \n\r\t\x0b\x0c\u2028\u00a0.,;:!?/\\[]<>{}()'\"-_=+*#@|~`")
    + list("abcXYZ019éß日本語🚀")
    + [
        "\ud800",
        "<|endoftext|>",
        "'s",
        "\r\n",
        "</memories>",
        "[m]",
        "  ",
        "\n\n",
    ]
)
WORDS = ["the", "memory", "store", "keeps", "backups", "for", "days", "while", "invoices", "monthly", "hashed"]

texts = st.one_of(
    st.text(max_size=2000),
    st.lists(st.sampled_from(TRICKY), max_size=400).map("".join),
    st.lists(st.sampled_from(WORDS), max_size=300).map(" ".join),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=300),
)
short_texts = st.one_of(st.text(max_size=200), st.lists(st.sampled_from(TRICKY), max_size=60).map("".join))
embeddings = st.one_of(
    st.none(),
    st.sampled_from([(1.0, 0.0, 0.0, 0.0), (0.99, 0.1, 0.0, 0.0), (0.0, 1.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)]),
    st.tuples(*[st.floats(-1, 1, allow_nan=False)] * 4),
)


@dataclass(frozen=True)
class Draw:
    id: str
    text: str
    hot: bool
    relevance: float
    age_hours: float
    usefulness: float
    importance: float
    pinned: bool
    embedding: tuple[float, ...] | None


memories = st.builds(
    Draw,
    id=st.one_of(st.sampled_from([f"mem-{i:02d}" for i in range(12)]), st.text(min_size=1, max_size=12)),
    text=texts,
    hot=st.booleans(),
    relevance=st.floats(0, 1),
    age_hours=st.floats(0, 50_000),
    usefulness=st.floats(-1, 1),
    importance=st.floats(0, 1),
    pinned=st.booleans(),
    embedding=embeddings,
)
roles = st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), st.text(max_size=10))
histories = st.lists(st.tuples(roles, short_texts), max_size=6)


def to_candidate(d: Draw, rank: int) -> Candidate:
    return Candidate(
        id=d.id,
        text=d.text,
        origin="hot" if d.hot else "cold",
        relevance=d.relevance,
        created_at=NOW - timedelta(hours=d.age_hours),
        importance=d.importance,
        usefulness=d.usefulness,
        embedding=None if d.embedding is None else np.array(d.embedding, dtype=np.float32),
        pinned=d.pinned,
        rank=rank,
    )


@pytest.fixture(scope="module")
def counters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TokenCounter]:
    tokenizers = Tokenizers(tmp_path_factory.mktemp("tiktoken"))
    return {name: tokenizers.get(name) for name in ("cl100k_base", "o200k_base")}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    encoding=st.sampled_from(["cl100k_base", "o200k_base"]),
    drawn=st.lists(memories, max_size=20),
    directive=st.one_of(st.none(), short_texts),
    history=histories,
    total=st.integers(0, 12_000),
    reserve=st.integers(0, 1_500),
    selective_query=st.one_of(st.none(), st.text(max_size=80)),
    intent=st.sampled_from(list(Intent)),
)
def test_packed_context_never_exceeds_its_budget(
    counters: dict[str, TokenCounter],
    encoding: str,
    drawn: list[Draw],
    directive: str | None,
    history: list[tuple[str, str]],
    total: int,
    reserve: int,
    selective_query: str | None,
    intent: Intent,
) -> None:
    counter = counters[encoding]
    selective = None if selective_query is None else plan_selective_budget(selective_query)
    budget, kept = plan_budget(
        counter,
        directive=directive,
        history=history,
        reserve_tokens=reserve,
        max_context_tokens=total,
        selective=selective,
    )
    candidates = [to_candidate(d, i + 1) for i, d in enumerate(drawn)]
    result = select_memories(
        candidates,
        budget_tokens=budget.memories_available,
        intent=selective.intent if selective else intent,
        counter=counter,
        now=NOW,
    )

    # The memories section costs exactly what the packer charged, and that fits its budget.
    section = format_memories(result.chosen)
    assert counter.count(section) == result.tokens_used <= budget.memories_available

    # The whole block, re-tokenized, fits what is left after the reserve and the chat envelope.
    block = format_context(directive, result.chosen, kept)
    assert counter.count(block) <= budget.directive + budget.history + result.tokens_used
    if budget.overflow == 0:
        assert budget.context_limit is not None
        assert counter.count(block) <= budget.context_limit
    else:
        assert result.chosen == () and kept == ()

    # Every distinct candidate is chosen or dropped with a reason, exactly once; no duplicates.
    chosen = [p.id for p in result.chosen]
    dropped = [d.id for d in result.dropped]
    assert len(chosen) == len(set(chosen))
    assert sorted(chosen + dropped) == sorted({c.id for c in candidates})
    assert all(d.reason in REASONS and d.detail for d in result.dropped)
    assert result.candidates_evaluated == len({c.id for c in candidates})


@settings(max_examples=60, deadline=None)
@given(encoding=st.sampled_from(["cl100k_base", "o200k_base"]), history=histories, limit=st.integers(0, 400))
def test_trimmed_history_fits_and_keeps_the_newest(
    counters: dict[str, TokenCounter], encoding: str, history: list[tuple[str, str]], limit: int
) -> None:
    counter = counters[encoding]
    budget, kept = plan_budget(counter, directive=None, history=history, reserve_tokens=0, max_context_tokens=limit)
    assert kept == tuple(history[len(history) - len(kept) :])
    assert budget.history_dropped == len(history) - len(kept)
    if budget.overflow == 0:
        assert budget.history + budget.overhead <= limit


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(encoding=st.sampled_from(["cl100k_base", "o200k_base"]), history=histories, limit=st.integers(0, 400))
def test_history_counted_once_per_message_costs_what_the_whole_does(
    counters: dict[str, TokenCounter], encoding: str, history: list[tuple[str, str]], limit: int
) -> None:
    """Each message counted once gives every suffix's exact cost, and counting stops past ``limit``."""
    counter = counters[encoding]
    whole = measure_history(counter, history)
    assert whole.counted == len(history)
    for n in range(len(history) + 1):
        suffix = history[len(history) - n :]
        assert whole.cost(n) == history_tokens(counter, suffix)
        assert whole.section(n) == (counter.count(format_history(suffix)) if n else 0)
    bounded = measure_history(counter, history, limit)
    assert bounded.counted == len(history) or bounded.cost(bounded.counted) > limit
    assert bounded.fit(limit) == whole.fit(limit)

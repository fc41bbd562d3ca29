"""Score components, intent weights, merging by id, and justifications."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from service.assembly.intent import Intent
from service.assembly.scoring import (
    DEFAULT_SCORING_RULES,
    DEFAULT_WEIGHTS,
    Candidate,
    ScoringRules,
    Weights,
    content_terms,
    informativeness_score,
    jaccard,
    merge_by_id,
    recency_score,
    scale_to_unit,
    score_candidates,
    similarity_features,
    unit_embeddings,
    usefulness_score,
    words,
)
from service.tokens import TokenCounter, Tokenizers

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
HALF_LIFE = DEFAULT_SCORING_RULES.recency_half_life_hours


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken")).get("cl100k_base")


def cand(
    id: str, text: str = "Invoices are issued on the first business day of each month.", **kw: object
) -> Candidate:
    fields: dict[str, object] = {"origin": "cold", "relevance": 0.5, "created_at": NOW - timedelta(hours=1)}
    fields.update(kw)
    return Candidate(id=id, text=text, **fields)  # type: ignore[arg-type]


def test_weights_table() -> None:
    for weights in DEFAULT_WEIGHTS.values():
        assert math.isclose(
            weights.relevance + weights.informativeness + weights.uniqueness + weights.recency + weights.usefulness,
            1.0,
        )
    assert DEFAULT_WEIGHTS[Intent.FACTUAL].relevance == max(w.relevance for w in DEFAULT_WEIGHTS.values())
    assert DEFAULT_WEIGHTS[Intent.COMPLEX].uniqueness == max(w.uniqueness for w in DEFAULT_WEIGHTS.values())
    assert DEFAULT_WEIGHTS[Intent.CONCEPTUAL].informativeness == DEFAULT_WEIGHTS[Intent.CONCEPTUAL].relevance
    with pytest.raises(ValueError):
        Weights(0.5, 0.5, 0.5, 0.0, 0.0)


def test_recency_halves_every_half_life() -> None:
    assert recency_score(0.0, None, DEFAULT_SCORING_RULES) == 1.0
    assert recency_score(HALF_LIFE, None, DEFAULT_SCORING_RULES) == pytest.approx(0.5)
    assert recency_score(2 * HALF_LIFE, None, DEFAULT_SCORING_RULES) == pytest.approx(0.25)
    # A fresh access counts at half strength; it cannot make an old memory look new.
    assert recency_score(10 * HALF_LIFE, 0.0, DEFAULT_SCORING_RULES) == pytest.approx(0.5)
    assert recency_score(0.0, 0.0, DEFAULT_SCORING_RULES) == 1.0


def test_usefulness_mixes_feedback_and_importance() -> None:
    assert usefulness_score(0.0, 0.5) == pytest.approx(0.5)
    assert usefulness_score(1.0, 1.0) == pytest.approx(1.0)
    assert usefulness_score(-1.0, 0.0) == pytest.approx(0.0)
    assert usefulness_score(0.4, 0.5) > usefulness_score(0.0, 0.5) > usefulness_score(-0.4, 0.5)
    assert usefulness_score(5.0, -3.0) == usefulness_score(1.0, 0.0)  # clamped, not rejected


def test_informativeness_rewards_dense_text_and_penalises_bulk() -> None:
    rules = DEFAULT_SCORING_RULES
    assert informativeness_score(0, 10, rules) == 0.0
    near_empty = informativeness_score(1, 2, rules)
    crisp = informativeness_score(8, 16, rules)
    padded = informativeness_score(8, 120, rules)
    huge = informativeness_score(600, 2000, rules)
    assert near_empty < crisp
    assert padded < crisp
    assert huge < informativeness_score(150, 400, rules)
    assert all(0.0 <= v <= 1.0 for v in (near_empty, crisp, padded, huge))


def test_words_and_terms() -> None:
    assert words("Hello, World! snake_case 42") == ["hello", "world", "snake_case", "42"]
    assert words("日本語abc") == ["日", "本", "語", "abc"]
    assert content_terms("The cat and the hat, a cat.") == frozenset({"cat", "hat"})
    assert "a depends" not in similarity_features("B depends on A")
    assert jaccard(similarity_features("A depends on B"), similarity_features("B depends on A")) < 0.85
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_scale_to_unit() -> None:
    assert scale_to_unit([1 / 61, 1 / 62, 0.0]) == pytest.approx([1.0, 61 / 62, 0.0])
    assert scale_to_unit([0.0, -1.0]) == [0.0, 0.0]
    assert scale_to_unit([]) == []


def test_unit_embeddings() -> None:
    units = unit_embeddings([np.array([3.0, 4.0]), None, np.zeros(2), np.array([1.0, 0.0, 0.0])])
    assert units[0] is not None and np.allclose(units[0], [0.6, 0.8])
    assert units[1] is None and units[2] is None
    assert units[3] is not None and np.allclose(units[3], [1.0, 0.0, 0.0])


def test_merge_by_id_keeps_one_hot_candidate_with_the_better_relevance() -> None:
    emb = np.ones(4, dtype=np.float32)
    hot = cand("m1", text="stale", origin="hot", relevance=0.3, pinned=True, usefulness=0.0)
    cold = cand("m1", text="fresh", origin="cold", relevance=0.9, rank=2, embedding=emb, usefulness=0.6)
    other = cand("m2")
    merged = merge_by_id([cold, other, hot])
    assert [c.id for c in merged] == ["m1", "m2"]
    m1 = merged[0]
    assert m1.origin == "hot" and m1.in_hot_and_cold
    assert m1.relevance == 0.9 and m1.rank == 2
    assert m1.pinned and m1.embedding is emb
    assert m1.text == "fresh" and m1.usefulness == 0.6  # the cold copy is fresh from Postgres
    assert merge_by_id([hot, cold])[0].text == "fresh"
    same_side = merge_by_id([cand("x", relevance=0.2), cand("x", relevance=0.7, rank=1)])
    assert len(same_side) == 1 and same_side[0].relevance == 0.7 and not same_side[0].in_hot_and_cold


def test_scored_candidates_are_counted_exactly_and_ordered(counter: TokenCounter) -> None:
    cands = [
        cand("a" * 32, relevance=0.2),
        cand("b" * 32, relevance=0.95),
        cand("c" * 32, text="ok", relevance=0.95),
    ]
    scored = score_candidates(cands, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert scored[0].id == "b" * 32
    for s in scored:
        assert s.tokens == counter.count(s.formatted)
        assert s.formatted.startswith(f"[{s.tag}] ")
        assert s.scores.uniqueness == 1.0
        assert 0.0 <= s.scores.composite <= 1.0
    short = next(s for s in scored if s.id == "c" * 32)
    long = next(s for s in scored if s.id == "b" * 32)
    assert short.scores.informativeness < long.scores.informativeness


def test_intent_changes_the_ranking(counter: TokenCounter) -> None:
    relevant_but_thin = cand("thin", text="RLS is on.", relevance=1.0)
    rich = cand(
        "rich",
        text="Row-level security uses FORCE, per-transaction org settings, a non-owner service role, "
        "policies on every table, and tests with two orgs for every endpoint.",
        relevance=0.7,
    )
    factual = score_candidates([relevant_but_thin, rich], intent=Intent.FACTUAL, counter=counter, now=NOW)
    conceptual = score_candidates([relevant_but_thin, rich], intent=Intent.CONCEPTUAL, counter=counter, now=NOW)
    assert factual[0].id == "thin"
    assert conceptual[0].id == "rich"


def test_naive_datetimes_are_utc(counter: TokenCounter) -> None:
    naive = cand("n", created_at=datetime(2026, 9, 1, 10, 0))
    aware = cand("a", created_at=datetime(2026, 9, 1, 10, 0, tzinfo=UTC))
    scored = {s.id: s for s in score_candidates([naive, aware], intent=Intent.FACTUAL, counter=counter, now=NOW)}
    assert scored["n"].age_hours == scored["a"].age_hours == pytest.approx(2.0)


def test_rules_are_validated() -> None:
    with pytest.raises(ValueError):
        ScoringRules(recency_half_life_hours=0)
    with pytest.raises(ValueError):
        ScoringRules(long_item_tokens=0)

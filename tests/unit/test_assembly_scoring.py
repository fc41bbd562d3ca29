"""Score components, intent weights, merging by id, and justifications."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.assembly.intent import Intent
from service.assembly.justify import humanize_hours, justify
from service.assembly.scoring import (
    DEFAULT_SCORING_RULES,
    DEFAULT_WEIGHTS,
    Candidate,
    ScoreBreakdown,
    ScoredCandidate,
    ScoringRules,
    Weights,
    composite,
    informativeness_score,
    merge_by_id,
    recency_score,
    scale_to_unit,
    score_candidates,
    usefulness_score,
)
from service.text.tokens import TokenCounter, Tokenizers

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
    assert usefulness_score(math.nan, math.nan) == usefulness_score(-1.0, 0.0)  # NaN counts as the low end


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


def test_scale_to_unit() -> None:
    assert scale_to_unit([1 / 61, 1 / 62, 0.0]) == pytest.approx([1.0, 61 / 62, 0.0])
    assert scale_to_unit([0.0, -1.0]) == [0.0, 0.0]
    assert scale_to_unit([]) == []


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
        assert s.tokens == counter.count(s.body)
        assert s.body.startswith(" ") and s.body.endswith("\n")
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


def test_recency_decays_on_the_event_time_not_the_write_time(counter: TokenCounter) -> None:
    written_now = NOW - timedelta(minutes=5)
    old_event = cand("old", created_at=written_now, occurred_at=NOW - timedelta(hours=2 * HALF_LIFE))
    new_event = cand("new", created_at=written_now, occurred_at=NOW - timedelta(hours=1))
    no_event = cand("legacy", created_at=NOW - timedelta(hours=HALF_LIFE))  # no event time: the write time
    future = cand("future", created_at=written_now, occurred_at=NOW + timedelta(days=3))
    scored = {s.id: s for s in score_candidates([old_event, new_event, no_event, future], intent=Intent.FACTUAL,
                                                counter=counter, now=NOW)}
    assert scored["old"].scores.recency == pytest.approx(0.25)
    assert scored["old"].age_hours == pytest.approx(2 * HALF_LIFE)
    assert scored["new"].scores.recency == pytest.approx(0.5 ** (1 / HALF_LIFE))
    assert scored["legacy"].scores.recency == pytest.approx(0.5)
    assert scored["future"].scores.recency == 1.0 and scored["future"].age_hours == 0.0
    assert scored["new"].scores.composite > scored["old"].scores.composite  # same text, same relevance


def test_rules_are_validated() -> None:
    with pytest.raises(ValueError):
        ScoringRules(recency_half_life_hours=0)
    with pytest.raises(ValueError):
        ScoringRules(long_item_tokens=0)


# -- fast paths against plain restatements ------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    relevance=st.one_of(st.floats(-1, 2), st.just(math.nan)),
    age=st.floats(0, 50_000),
    accessed=st.one_of(st.none(), st.floats(0, 50_000)),
    importance=st.floats(-1, 2),
    usefulness=st.floats(-2, 2),
    intent=st.sampled_from(list(Intent)),
)
def test_score_breakdown_is_the_documented_sum(
    counter: TokenCounter,
    relevance: float,
    age: float,
    accessed: float | None,
    importance: float,
    usefulness: float,
    intent: Intent,
) -> None:
    last = None if accessed is None else NOW - timedelta(hours=accessed)
    c = cand("x", relevance=relevance, created_at=NOW - timedelta(hours=age), last_accessed_at=last,
             importance=importance, usefulness=usefulness)  # fmt: skip
    (s,) = score_candidates([c], intent=intent, counter=counter, now=NOW)
    rules = DEFAULT_SCORING_RULES
    recency = recency_score(s.age_hours, s.access_age_hours, rules)
    expected = ScoreBreakdown(
        relevance=0.0 if math.isnan(relevance) else min(1.0, max(0.0, relevance)),
        recency=recency,
        usefulness=usefulness_score(usefulness, importance),
        informativeness=informativeness_score(s.content_terms, s.text_tokens, rules),
        uniqueness=1.0,
        composite=0.0,
    )
    expected = dataclasses.replace(
        expected,
        composite=composite(
            DEFAULT_WEIGHTS[intent],
            relevance=expected.relevance,
            recency=expected.recency,
            usefulness=expected.usefulness,
            informativeness=expected.informativeness,
            uniqueness=1.0,
        ),
    )
    assert s.scores == expected
    assert s.recency_from_access == (recency > recency_score(s.age_hours, None, rules))
    lowered = s.scores.with_uniqueness(0.25, DEFAULT_WEIGHTS[intent])
    delta = DEFAULT_WEIGHTS[intent].uniqueness * (0.25 - 1.0)
    assert lowered == dataclasses.replace(s.scores, uniqueness=0.25, composite=s.scores.composite + delta)


def reference_justify(
    item: ScoredCandidate, scores: ScoreBreakdown, weights: Weights, *, similar_to: str | None, top: int
) -> str:
    """:func:`justify` written plainly: every factor's text, sorted by contribution."""
    cand = item.candidate
    where = cand.origin if not cand.in_hot_and_cold else "hot+cold"
    rel_note = f"rank {cand.rank} {where}" if cand.rank is not None else where
    if item.recency_from_access and item.access_age_hours is not None:
        recency_note = f"accessed {humanize_hours(item.access_age_hours)} ago"
    else:
        recency_note = f"{humanize_hours(item.age_hours)} old"
    if cand.usefulness > 0.05:
        useful_note = f"helpful feedback {cand.usefulness:+.1f}"
    elif cand.usefulness < -0.05:
        useful_note = f"unhelpful feedback {cand.usefulness:+.1f}"
    else:
        useful_note = f"importance {min(1.0, max(0.0, cand.importance)):.2f}"
    recent = "recent" if scores.recency >= 0.5 else "recency"
    factors = [
        (weights.relevance * scores.relevance, f"relevance {scores.relevance:.2f} ({rel_note})"),
        (weights.recency * scores.recency, f"{recent} {scores.recency:.2f} ({recency_note})"),
        (weights.usefulness * scores.usefulness, f"usefulness {scores.usefulness:.2f} ({useful_note})"),
        (
            weights.informativeness * scores.informativeness,
            f"informative {scores.informativeness:.2f} ({item.content_terms} terms/{item.text_tokens} tokens)",
        ),
    ]
    overlap = None
    if similar_to is not None and scores.uniqueness < 0.999:
        overlap = f"overlaps {1 - scores.uniqueness:.2f} with [{similar_to}]"
        factors.append((weights.uniqueness * scores.uniqueness, overlap))
    factors.sort(key=lambda f: -f[0])
    parts = [text for _, text in factors[:top]]
    notable = [text for _, text in factors[top:] if text.startswith("usefulness")]
    if notable and abs(cand.usefulness) >= 0.3:
        parts.extend(notable)
    if overlap is not None and scores.uniqueness < 0.7 and overlap not in parts:
        parts.append(overlap)
    if cand.pinned:
        parts.insert(0, "pinned")
    return f"score {scores.composite:.2f}: " + ", ".join(parts)


unit = st.floats(0, 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    scores=st.builds(ScoreBreakdown, unit, unit, unit, unit, unit, unit),
    shared=st.sampled_from([0.0, 0.25, 0.5]),
    intent=st.sampled_from(list(Intent)),
    similar_to=st.one_of(st.none(), st.just("ab12cd34")),
    top=st.integers(-1, 6),
    usefulness=st.sampled_from([0.0, 0.04, 0.2, 0.3, -0.3, -0.9]),
    importance=st.floats(-0.5, 1.5),
    pinned=st.booleans(),
    rank=st.one_of(st.none(), st.integers(1, 60)),
    both=st.booleans(),
    accessed=st.one_of(st.none(), st.floats(0, 5000)),
)
def test_justify_matches_its_plain_restatement(
    counter: TokenCounter,
    scores: ScoreBreakdown,
    shared: float,
    intent: Intent,
    similar_to: str | None,
    top: int,
    usefulness: float,
    importance: float,
    pinned: bool,
    rank: int | None,
    both: bool,
    accessed: float | None,
) -> None:
    if shared:  # equal contributions: ties keep the listed order
        scores = dataclasses.replace(scores, relevance=shared, recency=shared, usefulness=shared)
    last = None if accessed is None else NOW - timedelta(hours=accessed)
    c = cand("m", usefulness=usefulness, importance=importance, pinned=pinned, rank=rank,
             in_hot_and_cold=both, last_accessed_at=last, created_at=NOW - timedelta(hours=900))  # fmt: skip
    (item,) = score_candidates([c], intent=intent, counter=counter, now=NOW)
    weights = DEFAULT_WEIGHTS[intent]
    got = justify(item, scores, weights, similar_to=similar_to, top=top)
    assert got == reference_justify(item, scores, weights, similar_to=similar_to, top=top)


def test_dates_are_shown_on_request_and_counted_as_content(counter: TokenCounter) -> None:
    said = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    cands = [cand("a" * 32, text="Caroline: I went to the support group yesterday.", occurred_at=said),
             cand("b" * 32, text="Melanie: I painted a sunrise.")]
    plain = {s.id: s for s in score_candidates(cands, intent=Intent.FACTUAL, counter=counter, now=NOW)}
    dated = {s.id: s for s in score_candidates(cands, intent=Intent.FACTUAL, counter=counter, now=NOW,
                                               show_dates=True)}
    assert plain["a" * 32].body == " Caroline: I went to the support group yesterday.\n"
    assert dated["a" * 32].body == " (8 May 2023) Caroline: I went to the support group yesterday.\n"
    assert dated["b" * 32].body == " (1 Sep 2026) Melanie: I painted a sunrise.\n"  # falls back to created_at
    assert dated["a" * 32].tokens == counter.count(dated["a" * 32].body)
    assert dated["a" * 32].text_tokens > plain["a" * 32].text_tokens

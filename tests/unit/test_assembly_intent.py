"""Selective mode: intent, complexity, tier, multipliers, and the reasons given for each."""

from __future__ import annotations

import pytest

from service.assembly.intent import (
    DEFAULT_SELECTIVE_RULES,
    DEFAULT_TIERS,
    Complexity,
    Intent,
    MultiplierRule,
    SelectiveRules,
    Tier,
    assess_complexity,
    classify_intent,
    pick_multiplier,
    plan_selective_budget,
)


@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("What is row-level security?", Intent.FACTUAL),
        ("Define RRF", Intent.FACTUAL),
        ("Who approved the EU retention policy?", Intent.FACTUAL),
        ("How does the lexical-first cascade work?", Intent.CONCEPTUAL),
        ("Explain why HNSW needs iterative scans", Intent.CONCEPTUAL),
        ("Compare pgvector and Elasticsearch", Intent.DETAILED),
        ("What is the difference between L1 and L2 chunks?", Intent.DETAILED),
        ("pros and cons of partial indexes", Intent.DETAILED),
        ("Design a multi-region failover for the memory store", Intent.COMPLEX),
        ("Build the ingestion architecture", Intent.COMPLEX),
    ],
)
def test_intent_from_cues(query: str, intent: Intent) -> None:
    found, cues = classify_intent(query)
    assert found is intent
    assert cues


def test_no_cue_means_no_intent() -> None:
    assert classify_intent("postgres") == (None, ())


def test_multi_word_cues_outweigh_single_words() -> None:
    # "what is" (factual, two words) beats "system" (complex, one word).
    assert classify_intent("What is the system prompt?")[0] is Intent.FACTUAL


def test_complexity_grows_with_length_and_structure() -> None:
    short = assess_complexity("RLS?")
    medium = assess_complexity("How does hybrid search fuse lexical and semantic results?")
    long = assess_complexity(
        "Explain how the lexical-first cascade narrows candidates with full-text search, why it "
        "loses quality on SciFact compared with RRF, and when we should still use it in production"
    )
    assert short.level is Complexity.SIMPLE
    assert medium.level in (Complexity.MODERATE, Complexity.COMPLEX)
    assert long.level is Complexity.VERY_COMPLEX
    assert short.score < medium.score < long.score <= 1.0
    assert long.clauses >= 2 and long.question_words >= 2


def test_structure_raises_complexity_at_equal_length() -> None:
    plain = assess_complexity("tell me about the backup retention policy for the region")
    structured = assess_complexity("backup retention, who approved it, when and why, for `eu-west-1`?")
    assert structured.score > plain.score
    assert structured.entities >= 1


def test_factual_questions_are_not_starved() -> None:
    """A fact is rarely at rank 1: a factual question gets the standard tier, not one to three lines."""
    result = plan_selective_budget("What is RLS?")
    assert result.intent is Intent.FACTUAL
    assert result.tier.name == "standard"
    assert 500 <= result.final_tokens <= 1000
    assert result.multiplier == 1.0 and result.multiplier_keyword is None
    assert not result.temporal


@pytest.mark.parametrize("query", [
    "When did Caroline go to the support group?",
    "How long ago was the migration to the new region?",
    "What year did we move the backups?",
])
def test_temporal_questions_get_a_standard_budget_and_dates(query: str) -> None:
    result = plan_selective_budget(query)
    assert result.temporal and result.intent in (Intent.FACTUAL, Intent.CONCEPTUAL)
    assert result.tier.name == "standard" and result.final_tokens >= 500
    assert any("temporal" in r for r in result.reasons)


def test_the_question_word_outweighs_a_topic_word() -> None:
    """ "design" names the topic here, not the work asked for."""
    result = plan_selective_budget("When did Gina design the limited collection of hoodies?")
    assert result.intent is Intent.FACTUAL and result.tier.name == "standard"
    assert plan_selective_budget("What is the difference between RLS and grants?").intent is Intent.DETAILED
    assert plan_selective_budget("How would you design a backup system for all regions?").intent is Intent.COMPLEX


def test_a_long_question_without_cues_is_not_detailed_work() -> None:
    result = plan_selective_budget("Would Melanie be more interested in going to a national park or a theme park?")
    assert result.intent is Intent.CONCEPTUAL and result.tier.name == "standard"


@pytest.mark.parametrize(
    ("query", "tier"),
    [
        ("How does hybrid search work?", "standard"),
        ("Compare pgvector and Elasticsearch for filtered search", "large"),
        (
            "Design an architecture for multi-tenant memory storage with row-level security, "
            "partial HNSW indexes per large org, Redis hot sets and a degradation ladder, and "
            "explain how it scales out with Citus while keeping p99 under forty milliseconds",
            "comprehensive",
        ),
    ],
)
def test_tier_follows_intent(query: str, tier: str) -> None:
    result = plan_selective_budget(query)
    assert result.tier.name == tier
    assert result.tier.min_tokens <= result.base_tokens <= result.tier.max_tokens


def test_much_more_complex_than_the_intent_moves_one_tier_up() -> None:
    result = plan_selective_budget(
        "What is the retention policy for backups in the EU region, who approved it and when, "
        "and which teams were consulted?"
    )
    assert result.intent is Intent.FACTUAL
    assert result.tier.name == "large"
    assert any("one tier up" in r for r in result.reasons)


def test_much_simpler_than_the_intent_moves_one_tier_down() -> None:
    result = plan_selective_budget("design")
    assert result.intent is Intent.COMPLEX
    assert result.tier.name == "large"
    assert any("one tier down" in r for r in result.reasons)


def test_without_a_cue_the_intent_follows_complexity() -> None:
    result = plan_selective_budget("postgres")
    assert result.intent is Intent.FACTUAL
    assert any("no intent cue" in r for r in result.reasons)


def test_position_inside_the_tier_follows_complexity() -> None:
    low = plan_selective_budget("Explain RLS")
    high = plan_selective_budget("Explain how RLS policies and the per-transaction org setting work together")
    assert low.tier == high.tier
    assert low.base_tokens < high.base_tokens


def test_highest_multiplier_wins_and_does_not_stack() -> None:
    assert pick_multiplier("urgent: debug the security audit") == (2.0, "urgent")
    assert pick_multiplier("debug the failing query") == (1.2, "debug")
    assert pick_multiplier("hello") == (1.0, None)


def test_keywords_match_whole_words_and_normalised_separators() -> None:
    assert pick_multiplier("walk me through it step-by-step")[1] == "step by step"
    assert pick_multiplier("find the ROOT_CAUSE")[1] == "root cause"
    assert pick_multiplier("the allocation table")[1] is None  # "all" inside a word does not count
    assert pick_multiplier("securityguard")[1] is None


def test_multiplier_never_passes_the_tier_ceiling() -> None:
    result = plan_selective_budget("How does failover work during an outage?")
    assert result.multiplier == 2.0
    assert result.final_tokens == result.tier.max_tokens == 1000
    assert any("ceiling" in r for r in result.reasons)


def test_expanding_multiplier_scales_within_the_tier() -> None:
    result = plan_selective_budget("How does the security model work?")
    assert result.multiplier == 1.5
    assert result.final_tokens == min(round(result.base_tokens * 1.5), result.tier.max_tokens)
    assert result.final_tokens > result.base_tokens


def test_reducing_multiplier_shrinks_but_respects_the_floor() -> None:
    result = plan_selective_budget("Explain RLS briefly")
    assert result.multiplier == 0.5
    assert result.final_tokens == round(result.base_tokens * 0.5)
    tiny = plan_selective_budget("RLS tldr")
    assert tiny.tier.name == "standard"
    assert tiny.final_tokens == round(tiny.base_tokens * 0.5) < tiny.tier.min_tokens
    floor = plan_selective_budget("RLS tldr", SelectiveRules(intent_tiers=(0, 1, 2, 3)))
    assert floor.tier.name == "minimal" and floor.final_tokens == DEFAULT_SELECTIVE_RULES.floor_tokens


def test_every_decision_is_explained() -> None:
    result = plan_selective_budget("Give me a comprehensive comparison of the retrieval modes")
    text = " | ".join(result.reasons)
    for fragment in ("complexity", "intent detailed", "tier large", "base", "multiplier x1.5"):
        assert fragment in text
    assert result.multiplier_keyword == "comprehensive"


def test_custom_rules() -> None:
    rules = DEFAULT_SELECTIVE_RULES.with_multipliers(
        MultiplierRule("invoice", 1.4, "billing"), MultiplierRule("urgent", 1.1)
    )
    assert pick_multiplier("invoice totals", rules) == (1.4, "invoice")
    assert pick_multiplier("urgent", rules) == (1.1, "urgent")  # replaced, not duplicated
    tiers = (Tier("a", 10, 20), Tier("b", 30, 40), Tier("c", 50, 60), Tier("d", 70, 80))
    result = plan_selective_budget("What is RLS?", SelectiveRules(tiers=tiers, intent_tiers=(0, 1, 2, 3),
                                                                 floor_tokens=5))
    assert result.tier.name == "a" and 10 <= result.final_tokens <= 20


def test_rules_are_validated() -> None:
    with pytest.raises(ValueError):
        SelectiveRules(tiers=DEFAULT_TIERS[:3])
    with pytest.raises(ValueError, match="intent_tiers"):
        SelectiveRules(intent_tiers=(0, 1, 2, 4))
    with pytest.raises(ValueError):
        Tier("bad", 100, 50)
    with pytest.raises(ValueError):
        MultiplierRule("x", 0.0)
    with pytest.raises(ValueError, match="1 to 4 words"):
        MultiplierRule("one two three four five", 1.5)
    with pytest.raises(ValueError, match="1 to 4 words"):
        MultiplierRule("!!", 1.5)


def test_final_budget_always_within_bounds() -> None:
    queries = [
        "",
        "?",
        "a " * 200,
        "urgent urgent critical all comprehensive detailed",
        "brief summary tl;dr",
        "日本語の質問はどうですか",
    ]
    for query in queries:
        result = plan_selective_budget(query)
        assert DEFAULT_SELECTIVE_RULES.floor_tokens <= result.final_tokens <= result.tier.max_tokens
        assert result.reasons


def test_a_word_longer_than_any_name_is_read_as_its_first_64_characters() -> None:
    """A pasted token (a hash, a base64 blob) is no more entities than its first 64 characters: the entity
    patterns read that much of it, so a long word costs them time in proportion to its length."""
    for word in ("x" * 30_000, "camelCase" * 3_000, "snake_case_" * 3_000):
        assert assess_complexity(f"what is {word}").entities == assess_complexity(f"what is {word[:64]}").entities
    assert assess_complexity("x" * 30_000).entities == 0 and assess_complexity("snake_case_" * 3_000).entities == 1

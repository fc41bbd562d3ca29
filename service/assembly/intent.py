"""Selective mode: how much memory a query deserves, decided from the query alone and explained.

The decision has four steps, each recorded in :attr:`SelectiveBudget.reasons`:

1. **Intent** from cue phrases (``what is`` -> factual, ``how does`` -> conceptual, ``compare``
   -> detailed, ``design`` -> complex, ...). A cue weighs as many words as it has, and one more when
   it opens the query: the question word says what kind of answer is wanted (a time, a person, an
   explanation), where a word further on is often just the topic ("When did Gina *design* the
   hoodies?" asks for a date). The intent with the most weight wins and ties go to the more
   demanding intent, so "what is the difference between" is detailed while "what is the build
   command" stays factual. With no cue, the intent follows the complexity level up to conceptual:
   detailed and complex name a kind of work (comparing, designing) that length alone does not
   reveal — a long question gets its budget from complexity instead. A query that
   asks for a time (``when``, ``how long``, ``what year``, ...) is also marked **temporal**: its
   memories are shown with their event dates.
2. **Complexity**, a score in [0, 1] from the number of words (dominant: 2 words ~ 0.11,
   7 ~ 0.30, 15 ~ 0.53, 30+ = 0.75) plus structure (clauses, conjunctions, extra question words,
   entity-like terms). Levels: simple < 0.25 <= moderate < 0.5 <= complex < 0.75 <= very_complex.
3. **Tier** from the intent (factual and conceptual -> standard 500-1000, detailed -> large
   2000-3000, complex -> comprehensive 5000-8000: :attr:`SelectiveRules.intent_tiers`), moved one
   tier up when the query is two or more levels more complex than that tier suggests and one tier
   down when it is two or more levels simpler. Factual questions used to get the minimal tier
   (50-100 tokens: one to three memory lines); but a fact is found at rank 1 far less often than
   in the first ten or twenty (LoCoMo dev: 0.54 of evidence in the top 10, 0.71 in the ~28 lines of
   1,000 tokens, 0.51 in 250), so a budget of a few lines starved them (temporal questions: 0.45 of
   their evidence in context against 0.95 at 1,000 tokens). The minimal tier stays for rules that
   map an intent to it. The **base** budget sits inside the tier at the square root of the
   complexity score (``min + sqrt(score) * (max - min)``): what a budget keeps grows concavely
   with its size (LoCoMo dev at 250/500/750/1,000 tokens: 0.50/0.61/0.67/0.70 of the evidence), so
   a simpler query gives up part of the tier, not most of it. Placed linearly, the typical
   question (score ~0.35) got 0.66 of the evidence at 705 tokens on average; at the square root,
   0.67 at 816 — 96% of what a fixed 1,000 tokens keeps (0.70 at 986).
4. **Multiplier**: keyword rules scale the base; the highest matching multiplier wins (no
   stacking), the result never exceeds the tier's ceiling, and reductions (``brief``, ``summary``)
   never go below ``SelectiveRules.floor_tokens``.

Everything is data in :class:`~service.assembly.intent_rules.SelectiveRules` (re-exported here); pass a
modified copy to change tiers, cues or multiplier rules.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from typing import Final

from service.assembly.intent_rules import (
    COMPLEXITY_ORDER,
    DEFAULT_SELECTIVE_RULES,
    DEFAULT_TIERS,
    INTENT_ORDER,
    MAX_PHRASE_WORDS,
    Complexity,
    Intent,
    MultiplierRule,
    SelectiveRules,
    Tier,
    normalise_phrase,
    phrase_words,
)
from service.tenancy.orgscope import org_memo

__all__ = [
    "DEFAULT_SELECTIVE_RULES", "DEFAULT_TIERS", "Complexity", "ComplexityAssessment", "Intent", "MultiplierRule",
    "SelectiveBudget", "SelectiveRules", "Tier", "assess_complexity", "classify_intent", "pick_multiplier",
    "plan_selective_budget",
]


@dataclass(frozen=True, slots=True)
class ComplexityAssessment:
    level: Complexity
    score: float
    words: int
    clauses: int
    question_words: int
    entities: int


@dataclass(frozen=True, slots=True)
class SelectiveBudget:
    """The explained outcome of selective mode for one query."""

    intent: Intent
    intent_cues: tuple[str, ...]
    complexity: Complexity
    complexity_score: float
    tier: Tier
    base_tokens: int
    multiplier: float
    multiplier_keyword: str | None
    final_tokens: int
    reasons: tuple[str, ...] = field(default=())
    temporal: bool = False
    """The query asks for a time: memories are shown with their event dates."""


_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")
_QUESTION_WORDS: Final = frozenset({"what", "how", "why", "when", "where", "which", "who", "whom", "whose"})
_CONJUNCTIONS: Final = frozenset(
    {
        "and",
        "or",
        "but",
        "while",
        "whereas",
        "because",
        "although",
        "though",
        "if",
        "unless",
        "then",
        "so",
        "versus",
        "vs",
        "plus",
        "also",
    }
)
# Identifiers, paths, versions and quoted phrases are the "entities" a query asks about.
_ENTITY = re.compile(r"""\w+[_./:]\w[\w./:]*|[a-z]+[A-Z]\w*|"[^"]+"|'[^']{2,}'|`[^`]+`""")
ENTITY_WORD_CHARS: Final = 64
_LONG_WORD = re.compile(rf"\w{{{ENTITY_WORD_CHARS + 1},}}")
"""A word longer than any name: cut to its first 64 characters before ``_ENTITY`` reads it, whose
patterns try each start of a word against the rest of it (time growing with the square of its length: a
pasted 30,000-character token held the event loop for seconds)."""
_CAPITALISED = re.compile(r"(?<![.?!]\s)(?<!^)\b[A-Z][\w-]+")


@org_memo(256)
def _phrases_in(query: str) -> frozenset[str]:
    """Every run of one to four consecutive words: a cue matches by set lookup, as whole words.
    Cached (per org: :mod:`service.tenancy.orgscope`): one plan asks three times for the same query's."""
    ws = phrase_words(query)
    return frozenset(" ".join(ws[i : i + n]) for n in range(1, MAX_PHRASE_WORDS + 1) for i in range(len(ws) - n + 1))


def _piecewise(x: float, points: tuple[tuple[float, float], ...]) -> float:
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


_LENGTH_CURVE: Final = ((0.0, 0.0), (2.0, 0.15), (7.0, 0.4), (15.0, 0.7), (30.0, 1.0))


def assess_complexity(query: str) -> ComplexityAssessment:
    """Complexity from length (75%) and structure (25%): clauses, extra question words, entities."""
    words = _WORD.findall(query)
    lowered = [w.lower() for w in words]
    clause_marks = len(re.findall(r"[,;:]", query)) + sum(1 for w in lowered if w in _CONJUNCTIONS)
    question_words = sum(1 for w in lowered if w in _QUESTION_WORDS) + max(0, query.count("?") - 1)
    bounded = _LONG_WORD.sub(lambda m: m[0][:ENTITY_WORD_CHARS], query)
    entities = len(_ENTITY.findall(bounded)) + len(_CAPITALISED.findall(query))
    length_part = _piecewise(float(len(words)), _LENGTH_CURVE)
    structure = min(1.0, 0.25 * clause_marks + 0.25 * max(0, question_words - 1) + 0.15 * entities)
    score = round(min(1.0, 0.75 * length_part + 0.25 * structure), 3)
    level = COMPLEXITY_ORDER[min(3, int(score / 0.25))]
    return ComplexityAssessment(level, score, len(words), clause_marks, question_words, entities)


def classify_intent(
    query: str, rules: SelectiveRules = DEFAULT_SELECTIVE_RULES
) -> tuple[Intent | None, tuple[str, ...]]:
    """The intent whose cues carry the most weight (multi-word cues weigh more), and those cues.

    ``None`` when no cue matches; the caller then derives the intent from complexity.
    """
    phrases = _phrases_in(query)
    opening = " ".join(phrase_words(query)[:MAX_PHRASE_WORDS]) + " "
    best: tuple[float, int, Intent | None, tuple[str, ...]] = (0.0, -1, None, ())
    for intent, cues in rules.intent_cues:
        matched = tuple(c for c in cues if normalise_phrase(c) in phrases)
        # A cue that opens the query (the question word) weighs one word more.
        weight = sum(len(normalise_phrase(c).split()) + (1 if opening.startswith(normalise_phrase(c) + " ") else 0)
                     for c in matched)
        # Ties go to the more demanding intent: under-serving a hard question costs more.
        key = (float(weight), INTENT_ORDER.index(intent))
        if weight > 0 and key > best[:2]:
            best = (key[0], key[1], intent, matched)
    return best[2], best[3]


def pick_multiplier(query: str, rules: SelectiveRules = DEFAULT_SELECTIVE_RULES) -> tuple[float, str | None]:
    """The highest multiplier among matching rules, with its keyword; ``(1.0, None)`` if none."""
    phrases = _phrases_in(query)
    matches = [r for r in rules.multipliers if normalise_phrase(r.keyword) in phrases]
    if not matches:
        return 1.0, None
    top = max(matches, key=lambda r: r.multiplier)
    return top.multiplier, top.keyword


def plan_selective_budget(query: str, rules: SelectiveRules = DEFAULT_SELECTIVE_RULES) -> SelectiveBudget:
    """Intent, complexity, tier and multiplier for ``query``: the memory token budget, explained."""
    reasons: list[str] = []
    complexity = assess_complexity(query)
    reasons.append(
        f"complexity {complexity.level} ({complexity.score:.2f}): {complexity.words} words, "
        f"{complexity.clauses} clause marks, {complexity.question_words} question words, "
        f"{complexity.entities} entities"
    )
    level_index = COMPLEXITY_ORDER.index(complexity.level)
    found, cues = classify_intent(query, rules)
    if found is None:
        intent = INTENT_ORDER[min(level_index, INTENT_ORDER.index(Intent.CONCEPTUAL))]
        reasons.append(f"intent {intent} (no intent cue; follows complexity)")
    else:
        intent = found
        reasons.append(f"intent {intent} (cues: {', '.join(repr(c) for c in cues)})")

    temporal = any(normalise_phrase(c) in _phrases_in(query) for c in rules.temporal_cues)
    if temporal:
        reasons.append("temporal: asks for a time, so memories show their event dates")
    intent_tier = rules.intent_tiers[INTENT_ORDER.index(intent)]
    tier_index = intent_tier
    if level_index - intent_tier >= 2:
        tier_index = min(len(rules.tiers) - 1, intent_tier + 1)
    elif intent_tier - level_index >= 2:
        tier_index = max(0, intent_tier - 1)
    tier = rules.tiers[tier_index]
    if tier_index == intent_tier:
        reasons.append(f"tier {tier.name} ({tier.min_tokens}-{tier.max_tokens}) for {intent} intent")
    else:
        direction = "up" if tier_index > intent_tier else "down"
        reasons.append(
            f"tier {tier.name} ({tier.min_tokens}-{tier.max_tokens}): one tier {direction} from "
            f"{rules.tiers[intent_tier].name} because the query is {complexity.level}"
        )

    position = math.sqrt(complexity.score)
    base = round(tier.min_tokens + position * (tier.max_tokens - tier.min_tokens))
    reasons.append(f"base {base} tokens ({position:.0%} into the tier: the square root of the complexity)")

    multiplier, keyword = pick_multiplier(query, rules)
    final = base
    if keyword is not None:
        scaled = round(base * multiplier)
        final = max(min(scaled, tier.max_tokens), min(rules.floor_tokens, base))
        note = f"multiplier x{multiplier:g} from {keyword!r}: {base} -> {scaled}"
        if final != scaled:
            limit = "tier ceiling" if scaled > tier.max_tokens else "floor"
            note += f", held at the {limit} {final}"
        reasons.append(note)
    return SelectiveBudget(
        intent=intent,
        intent_cues=cues,
        complexity=complexity.level,
        complexity_score=complexity.score,
        tier=tier,
        base_tokens=base,
        multiplier=multiplier,
        multiplier_keyword=keyword,
        final_tokens=final,
        reasons=tuple(reasons),
        temporal=temporal,
    )

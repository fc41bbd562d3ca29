"""The data selective mode decides from (:mod:`service.assembly.intent`): intents and complexity levels,
token tiers, cue phrases and keyword multiplier rules, each phrase one to four words matched as whole
words. :class:`SelectiveRules` holds them all; pass a modified copy to change tiers, cues or rules."""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass
from typing import Final


class Intent(enum.StrEnum):
    FACTUAL = "factual"
    CONCEPTUAL = "conceptual"
    DETAILED = "detailed"
    COMPLEX = "complex"


class Complexity(enum.StrEnum):
    SIMPLE = "simple"
    MODERATE = "moderate"
    COMPLEX = "complex"
    VERY_COMPLEX = "very_complex"


INTENT_ORDER: Final[tuple[Intent, ...]] = tuple(Intent)
COMPLEXITY_ORDER: Final[tuple[Complexity, ...]] = tuple(Complexity)


_PHRASE_WORD: Final = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
MAX_PHRASE_WORDS: Final = 4


def phrase_words(text: str) -> list[str]:
    # "step-by-step", "Root_Cause" and "tl;dr" must meet "step by step", "root cause", "tl dr".
    return _PHRASE_WORD.findall(text.lower().replace("’", "'"))


@functools.lru_cache(maxsize=4096)
def normalise_phrase(phrase: str) -> str:
    return " ".join(phrase_words(phrase))


def _check_phrase(phrase: str) -> None:
    if not 1 <= len(normalise_phrase(phrase).split()) <= MAX_PHRASE_WORDS:
        raise ValueError(f"cue or keyword {phrase!r} must have 1 to {MAX_PHRASE_WORDS} words")


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    min_tokens: int
    max_tokens: int

    def __post_init__(self) -> None:
        if not 0 < self.min_tokens <= self.max_tokens:
            raise ValueError(f"tier {self.name!r}: need 0 < min_tokens <= max_tokens")


@dataclass(frozen=True, slots=True)
class MultiplierRule:
    """Scale the budget by ``multiplier`` when ``keyword`` (one to four words, matched as whole
    words; case, ``-`` and ``_`` do not matter) occurs in the query."""

    keyword: str
    multiplier: float
    category: str = "custom"

    def __post_init__(self) -> None:
        if self.multiplier <= 0:
            raise ValueError(f"multiplier for {self.keyword!r} must be positive")
        _check_phrase(self.keyword)


DEFAULT_TIERS: Final[tuple[Tier, ...]] = (
    Tier("minimal", 50, 100),
    Tier("standard", 500, 1000),
    Tier("large", 2000, 3000),
    Tier("comprehensive", 5000, 8000),
)


def _phrases(listing: str) -> tuple[str, ...]:
    """Comma-separated phrases; keeps the tables below one readable block each."""
    return tuple(p.strip() for p in listing.split(",") if p.strip())


DEFAULT_INTENT_CUES: Final[tuple[tuple[Intent, tuple[str, ...]], ...]] = (
    (
        Intent.FACTUAL,
        _phrases(
            "what is, what's, what are, what was, what were, what did, what does, what do, who is, who, when, "
            "where, which, define, definition, meaning, "
            "how many, how much, how long, how often, is there, list"
        ),
    ),
    (
        Intent.CONCEPTUAL,
        _phrases(
            "how does, how do, how is, how can, explain, why, understand, describe, what happens, "
            "overview, purpose, concept, example"
        ),
    ),
    (
        Intent.DETAILED,
        _phrases(
            "compare, compared to, compared with, comparison, analyze, analyse, analysis, difference, "
            "differences, difference between, differences between, differ, "
            "versus, vs, trade off, trade offs, tradeoff, tradeoffs, pros and cons, contrast, "
            "evaluate, assess, walk through"
        ),
    ),
    (
        Intent.COMPLEX,
        _phrases(
            "design, build, architecture, architect, implement, plan, strategy, migrate, migration, "
            "refactor, end to end, roadmap, system"
        ),
    ),
)


def _rules(multiplier: float, category: str, listing: str) -> tuple[MultiplierRule, ...]:
    return tuple(MultiplierRule(k, multiplier, category) for k in _phrases(listing))


DEFAULT_MULTIPLIERS: Final[tuple[MultiplierRule, ...]] = (
    *_rules(2.0, "critical", "critical, emergency, urgent, production incident, outage, data loss"),
    *_rules(1.5, "domain", "financial, compliance, legal, security, medical, regulatory, audit"),
    *_rules(1.5, "scope", "comprehensive, exhaustive, everything, in depth"),
    *_rules(1.3, "scope", "detailed, all, step by step, thorough, full"),
    *_rules(1.2, "analysis", "debug, troubleshoot, analyze, investigate, root cause, diagnose"),
    *_rules(0.6, "brevity", "summary, summarize, summarise, overview"),
    *_rules(0.5, "brevity", "brief, briefly, quick, short, tl dr, tldr"),
)


DEFAULT_TEMPORAL_CUES: Final[tuple[str, ...]] = _phrases(
    "when, what time, what date, what day, what year, what month, which year, which day, which month, "
    "how long, how long ago, since when, how recently, ago"
)


@dataclass(frozen=True, slots=True)
class SelectiveRules:
    tiers: tuple[Tier, ...] = DEFAULT_TIERS
    """Four tiers, least to most tokens."""
    intent_tiers: tuple[int, int, int, int] = (1, 1, 2, 3)
    """Index into ``tiers`` for each :class:`Intent`, in its order (factual, conceptual, detailed, complex)."""
    intent_cues: tuple[tuple[Intent, tuple[str, ...]], ...] = DEFAULT_INTENT_CUES
    temporal_cues: tuple[str, ...] = DEFAULT_TEMPORAL_CUES
    multipliers: tuple[MultiplierRule, ...] = DEFAULT_MULTIPLIERS
    floor_tokens: int = 50
    """Lowest budget a reducing multiplier can reach."""

    def __post_init__(self) -> None:
        if len(self.tiers) != len(INTENT_ORDER):
            raise ValueError(f"need exactly {len(INTENT_ORDER)} tiers, got {len(self.tiers)}")
        if self.floor_tokens <= 0:
            raise ValueError("floor_tokens must be positive")
        if len(self.intent_tiers) != len(INTENT_ORDER) or not all(0 <= t < len(self.tiers) for t in self.intent_tiers):
            raise ValueError(f"intent_tiers needs one tier index per intent, each below {len(self.tiers)}")
        for cue in self.temporal_cues:
            _check_phrase(cue)
        for _, cues in self.intent_cues:
            for cue in cues:
                _check_phrase(cue)

    def with_multipliers(self, *rules: MultiplierRule) -> SelectiveRules:
        """A copy with extra rules; a rule for an existing keyword replaces it."""
        keywords = {normalise_phrase(r.keyword) for r in rules}
        kept = tuple(r for r in self.multipliers if normalise_phrase(r.keyword) not in keywords)
        return SelectiveRules(self.tiers, self.intent_tiers, self.intent_cues, self.temporal_cues, kept + rules,
                              self.floor_tokens)


DEFAULT_SELECTIVE_RULES: Final = SelectiveRules()

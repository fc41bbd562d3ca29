"""Is a new text a near-duplicate of a stored one? Vector and lexical similarity together, no model call.

The embedding's cosine finds candidates and must clear a floor, but cosine alone cannot tell "takes
3 pills" from "takes 4 pills" (0.97 apart) or "likes tea" from "does not like tea". So the words
decide: after normalization (case, punctuation, contractions, articles, filler) the two texts must
hold the same words, in any order (clause order is free), except for at most a few pairs of WordNet
synonyms in the same inflection. A number, a negation, a date or time word, or any other word
present on one side only (a name, a different object) makes them different facts. What this
leaves out -- a paraphrase with other words, a role swap ("Alice called Bob" / "Bob called Alice")
-- is kept as a separate memory (or, with consolidation on, handed to the model).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Final

from service.memories.facts.lexicon import lexicon
from service.memories.facts.normalize import content

NEGATIONS: Final = frozenset({"not", "no", "never", "none", "nobody", "nothing", "nowhere", "neither", "nor",
                              "without", "cannot", "hardly", "barely", "seldom", "rarely", "nt"})
NUMBER_WORDS: Final = frozenset({
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty",
    "forty", "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million", "billion",
    "trillion", "dozen", "half", "twice", "once", "thrice", "double", "triple", "first", "second", "third",
    "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "last", "next", "previous", "few",
    "several", "many", "more", "less", "most", "least", "all", "some", "every", "each", "any", "both", "single",
    "only",
})
TIME_WORDS: Final = frozenset({
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
    "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "mon", "tue", "tues", "wed",
    "thu", "thur", "thurs", "fri", "sat", "sun", "today", "yesterday", "tomorrow", "tonight", "morning",
    "afternoon", "evening", "night", "noon", "midnight", "week", "weekend", "month", "year", "decade",
    "century", "spring", "summer", "autumn", "fall", "winter", "ago", "later", "earlier", "before", "after",
    "since", "until", "till", "am", "pm", "daily", "weekly", "monthly", "yearly", "annually", "always",
    "usually", "often", "sometimes", "now", "then",
})
_NUMERIC = re.compile(r"\d")
_NUMBER = re.compile(r"\d+(?:\.\d+)*")


def critical(word: str) -> bool:
    """Words whose change always changes a fact: numbers, negations, dates and times."""
    return bool(_NUMERIC.search(word)) or word in NEGATIONS or word in NUMBER_WORDS or word in TIME_WORDS


@dataclass(frozen=True, slots=True)
class Thresholds:
    cosine: float = 0.70
    """Embedding cosine a near-duplicate must reach (the words decide above it)."""
    max_synonyms: int = 1
    """Most word pairs that may differ, each a pair of synonyms."""
    synonym_share: float = 0.25
    """... and at most this share of the shorter text's words (one pair is always allowed)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    duplicate: bool
    lexical: float
    """Word overlap after normalization (Jaccard of the word multisets, synonyms counted as equal)."""
    reason: str
    """``same_words``, ``synonyms``, or why not: ``low_cosine``, ``critical_word``, ``other_words``."""


def compare(a: tuple[str, ...], b: tuple[str, ...], cosine: float, limits: Thresholds) -> Verdict:
    """Compare two normalized token sequences (:func:`service.memories.facts.normalize.tokens`) with their cosine."""
    ca, cb = Counter(content(a)), Counter(content(b))
    only_a, only_b = ca - cb, cb - ca
    shared = sum((ca & cb).values())
    words_a, words_b = list(only_a.elements()), list(only_b.elements())
    pairs = _synonym_pairs(words_a, words_b) if words_a and len(words_a) == len(words_b) else None
    paired = len(words_a) if pairs else 0
    union = sum((ca | cb).values())
    lexical = (shared + paired) / union if union else 1.0
    if cosine < limits.cosine:
        return Verdict(False, lexical, "low_cosine")
    if _joined(a) == _joined(b) and _numbers(a) == _numbers(b):  # "dark-roast" / "dark roast" / "5-hmC" / "5hmC"
        return Verdict(True, lexical, "joined_words")
    if _number_runs(a) != _number_runs(b):  # "won 2-1" / "won 1-2": the same numbers, another fact
        return Verdict(False, lexical, "critical_word")
    if not words_a and not words_b:
        return Verdict(True, lexical, "same_words")
    if any(critical(w) for w in (*words_a, *words_b)):
        return Verdict(False, lexical, "critical_word")
    shorter = min(sum(ca.values()), sum(cb.values()))
    if pairs and len(words_a) <= min(limits.max_synonyms, max(1.0, limits.synonym_share * shorter)):
        return Verdict(True, lexical, "synonyms")
    return Verdict(False, lexical, "other_words")


def _number_runs(words: tuple[str, ...]) -> Counter[tuple[str, ...]]:
    """Runs of adjacent numbers ("9 40"), each with the word before it (or after it, at the start):
    clauses may move, but "batch 1 item 2" is not "batch 2 item 1", nor "won 2 1" "won 1 2"."""
    runs: Counter[tuple[str, ...]] = Counter()
    run: list[str] = []
    start = 0
    for i, w in enumerate((*words, "")):
        if _NUMERIC.search(w):
            if not run:
                start = i
            run.extend(_NUMBER.findall(w))
        elif run:
            letters = _NUMBER.sub("", words[start])  # "il6" is anchored like "il 6"
            anchor = letters or (words[start - 1] if start > 0 else "^" + w)
            runs[(anchor, *run)] += 1
            run = []
    return runs


def _joined(words: tuple[str, ...]) -> str:
    return "".join(content(words))


def _numbers(words: tuple[str, ...]) -> list[str]:
    """The numbers of a text in order, each whole ("3 5" is not "35", "IL-6" is "IL6")."""
    return [n for w in words for n in _NUMBER.findall(w)]


def _synonym_pairs(left: list[str], right: list[str]) -> bool:
    """Whether every word of ``left`` pairs with a distinct synonym in ``right`` (small lists: greedy
    with backtracking)."""
    lex = lexicon()

    def match(i: int, used: frozenset[int]) -> bool:
        if i == len(left):
            return True
        return any(j not in used and lex.synonyms(left[i], right[j]) and match(i + 1, used | {j})
                   for j in range(len(right)))

    return len(left) <= 4 and match(0, frozenset())

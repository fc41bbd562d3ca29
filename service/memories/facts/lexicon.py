"""Synonym groups and a small lemmatizer over WordNet 3.0 (``synonyms.tsv.gz``, see build_lexicon).

Two words are synonyms here when some lemma of each, of the same part of speech and in the same
inflection ("bought"/"purchased": past tense of buy/purchase), shares a group: a synset that is one
of both lemmas' two most frequent tagged senses. Inflection must agree so that a change of number
or tense ("cat"/"cats", "lives"/"lived") never passes for a synonym.
"""

from __future__ import annotations

import functools
import gzip
from importlib import resources

# WordNet's detachment rules (morphy): suffix -> replacement, and the inflection each marks.
_RULES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "n": (("ses", "s", "pl"), ("xes", "x", "pl"), ("zes", "z", "pl"), ("ches", "ch", "pl"), ("shes", "sh", "pl"),
          ("men", "man", "pl"), ("ies", "y", "pl"), ("s", "", "pl")),
    "v": (("ies", "y", "s"), ("es", "e", "s"), ("es", "", "s"), ("s", "", "s"), ("ed", "e", "ed"),
          ("ed", "", "ed"), ("ing", "e", "ing"), ("ing", "", "ing")),
    "a": (("er", "", "er"), ("est", "", "est"), ("er", "e", "er"), ("est", "e", "est")),
    "r": (),
}
_EXCEPTION_FORM = {"n": "pl", "v": "ed", "a": "er", "r": "er"}


class Lexicon:
    def __init__(self, groups: dict[tuple[str, str], frozenset[int]], exceptions: dict[tuple[str, str], str],
                 lemmas: dict[str, frozenset[str]]) -> None:
        self.groups = groups
        """(pos, lemma) -> ids of the groups it belongs to."""
        self.exceptions = exceptions
        """(pos, irregular form) -> lemma."""
        self.lemmas = lemmas
        """pos -> every lemma in some group (a detached form must be one to count)."""

    def analyses(self, word: str) -> set[tuple[str, str, str]]:
        """(pos, lemma, inflection) readings of ``word`` whose lemma is in some group."""
        out: set[tuple[str, str, str]] = set()
        for pos, known in self.lemmas.items():
            if word in known:
                out.add((pos, word, "base"))
            base = self.exceptions.get((pos, word))
            if base is not None and base in known:
                out.add((pos, base, _EXCEPTION_FORM[pos]))
            for suffix, replacement, form in _RULES[pos]:
                if word.endswith(suffix) and len(word) > len(suffix) + 1:
                    lemma = word[: len(word) - len(suffix)] + replacement
                    if lemma in known:
                        out.add((pos, lemma, form))
        return out

    def synonyms(self, a: str, b: str) -> bool:
        if a == b:
            return True
        for pos, lemma_a, form_a in self.analyses(a):
            for pos_b, lemma_b, form_b in self.analyses(b):
                if pos == pos_b and form_a == form_b and lemma_a != lemma_b \
                        and self.groups[(pos, lemma_a)] & self.groups[(pos, lemma_b)]:
                    return True
        return False


@functools.cache
def lexicon() -> Lexicon:
    """The shipped lexicon, read once (about 60 KB compressed)."""
    raw = gzip.decompress(resources.files("service.memories.facts").joinpath("synonyms.tsv.gz").read_bytes()).decode()
    groups: dict[tuple[str, str], set[int]] = {}
    exceptions: dict[tuple[str, str], str] = {}
    for number, line in enumerate(raw.splitlines()):
        kind, pos, *rest = line.split("\t")
        if kind == "g":
            for lemma in rest[0].split():
                groups.setdefault((pos, lemma), set()).add(number)
        elif kind == "x":
            exceptions[(pos, rest[0])] = rest[1]
    lemmas: dict[str, set[str]] = {pos: set() for pos in _RULES}
    for pos, lemma in groups:
        lemmas[pos].add(lemma)
    return Lexicon({k: frozenset(v) for k, v in groups.items()}, exceptions,
                   {pos: frozenset(v) for pos, v in lemmas.items()})

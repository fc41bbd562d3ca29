"""The duplicate rule on its own: what normalization folds, and which changes always make another fact."""

from __future__ import annotations

import pytest

from service.memories.facts.lexicon import lexicon
from service.memories.facts.normalize import content, text_hash, tokens
from service.memories.facts.similarity import Thresholds, compare

LIMITS = Thresholds()


def same(a: str, b: str, cosine: float = 0.95) -> bool:
    return compare(tokens(a), tokens(b), cosine, LIMITS).duplicate


@pytest.mark.parametrize(("a", "b"), [
    ("The user prefers dark roast coffee.", "the user prefers dark roast coffee"),
    ("The user prefers dark roast coffee.", "THE   USER\tprefers dark roast coffee!!"),
    ("I didn't go to the gym.", "I did not go to the gym"),
    ("Basically, I'm swamped with work.", "i am swamped with work"),
    ("After lunch, Alice went hiking.", "Alice went hiking after lunch."),
    ("The user bought a car.", "The user purchased a car."),
    ("On Sundays the kids love the big park near the river.",
     "On Sundays the children love the big park near the river."),
    ("IL-6 levels rose in 12 patients.", "IL6 levels rose in 12 patients"),
    ("At 9:40 the flight lands after 2 stops.", "The flight lands after 2 stops at 9:40."),
    ("Well, you know, the office closes at six.", "The office closes at six."),
])
def test_the_same_fact_rewritten(a: str, b: str) -> None:
    assert same(a, b), (tokens(a), tokens(b))


@pytest.mark.parametrize(("a", "b"), [
    ("Alice takes 3 pills.", "Alice takes 4 pills."),
    ("Alice takes three pills.", "Alice takes four pills."),
    ("The dose is 3.5 mg.", "The dose is 35 mg."),
    ("Batch 1 item 2 failed.", "Batch 2 item 1 failed."),
    ("The final score was 2-1.", "The final score was 1-2."),
    ("Alice likes tea.", "Alice does not like tea."),
    ("Alice likes tea.", "Alice never likes tea."),
    ("Alice likes tea.", "Bob likes tea."),
    ("Alice likes tea.", "Alice likes coffee."),
    ("The meeting is on Monday.", "The meeting is on Tuesday."),
    ("The meeting is in May.", "The meeting is in June."),
    ("Alice has a cat.", "Alice has cats."),
    ("Alice lives in Paris.", "Alice lived in Paris."),
])
def test_a_changed_meaning_is_another_fact_whatever_the_cosine(a: str, b: str) -> None:
    assert not compare(tokens(a), tokens(b), 0.999, LIMITS).duplicate


def test_more_synonym_pairs_when_the_setting_allows() -> None:
    a = "On Sundays the kids love the big park near the river."
    b = "On Sundays the children love the large park near the river."
    assert not compare(tokens(a), tokens(b), 0.95, LIMITS).duplicate  # the default: one pair
    assert compare(tokens(a), tokens(b), 0.95, Thresholds(max_synonyms=2)).duplicate


def test_the_cosine_floor_applies_too() -> None:
    assert not same("The user prefers dark roast coffee.", "the user prefers dark roast coffee", cosine=0.5)


def test_the_exact_key_folds_case_spacing_punctuation_and_contractions_only() -> None:
    assert text_hash("It's  RAINING!") == text_hash("it is raining")
    assert text_hash("It is raining") != text_hash("It was raining")
    assert text_hash("Basically, it is raining") != text_hash("it is raining")  # filler: the near check's job
    assert content(tokens("Um, basically the cat is, you know, asleep")) == ["cat", "is", "asleep"]


def test_synonyms_keep_their_inflection() -> None:
    lex = lexicon()
    assert lex.synonyms("bought", "purchased") and lex.synonyms("movie", "film")
    assert not lex.synonyms("cat", "cats") and not lex.synonyms("tea", "coffee")
    assert not lex.synonyms("bought", "purchase")  # past tense vs base form

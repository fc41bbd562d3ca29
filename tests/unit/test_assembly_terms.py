"""Words, content terms and similarity features (service.assembly.terms), against plain restatements."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from service.assembly.terms import content_terms, feature_hashes, jaccard, similarity_features, words


def test_words_and_terms() -> None:
    assert words("Hello, World! snake_case 42") == ["hello", "world", "snake_case", "42"]
    assert words("日本語abc") == ["日", "本", "語", "abc"]
    assert content_terms("The cat and the hat, a cat.") == frozenset({"cat", "hat"})
    assert "a depends" not in similarity_features("B depends on A")
    assert jaccard(similarity_features("A depends on B"), similarity_features("B depends on A")) < 0.85
    assert jaccard(frozenset(), frozenset()) == 0.0


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(alphabet=st.characters(max_codepoint=127)), st.text()))
def test_words_match_the_regex_definition(text: str) -> None:
    expected = re.findall(r"\w+", text.lower())
    if text.isascii():  # the fast path; other texts also split CJK characters apart
        assert words(text) == expected
    else:
        assert "".join(words(text)) == "".join(expected)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "the", "of", "cat", "hat", "A", "日本", "x_1", " ", ", ", "\n"]), max_size=30),
    st.lists(st.sampled_from(["a", "b", "the", "of", "cat", "hat", "A", "日本", "x_1", " ", ", ", "\n"]), max_size=30),
)
def test_feature_hashes_count_like_similarity_features(left: list[str], right: list[str]) -> None:
    a, b = " ".join(left), " ".join(right)
    ha, hb = feature_hashes(a), feature_hashes(b)
    assert ha.tolist() == sorted(set(ha.tolist()))  # distinct and sorted
    assert ha.size == len(similarity_features(a))
    assert len(set(ha.tolist()) & set(hb.tolist())) == len(similarity_features(a) & similarity_features(b))

"""Words and content terms (service.assembly.terms), against plain restatements."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from service.assembly.terms import content_terms, words


def test_words_and_terms() -> None:
    assert words("Hello, World! snake_case 42") == ["hello", "world", "snake_case", "42"]
    assert words("日本語abc") == ["日", "本", "語", "abc"]
    assert content_terms("The cat and the hat, a cat.") == frozenset({"cat", "hat"})


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(alphabet=st.characters(max_codepoint=127)), st.text()))
def test_words_match_the_regex_definition(text: str) -> None:
    expected = re.findall(r"\w+", text.lower())
    if text.isascii():  # the fast path; other texts also split CJK characters apart
        assert words(text) == expected
    else:
        assert "".join(words(text)) == "".join(expected)

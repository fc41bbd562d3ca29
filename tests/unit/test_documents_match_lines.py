"""``exact`` lookup places matches on lines in time linear in the chunk (a one-line chunk of minified
code holds hundreds of thousands of matches of a short query), with the answer of counting line breaks."""

from __future__ import annotations

import random
import re

from service.documents.lookup import _match_lines


def _counted(text: str, spans: list[tuple[int, int]]) -> list[int]:
    """The lines as counting the line breaks before each span's ends says."""
    found: set[int] = set()
    for begin, stop in spans:
        found.update(range(text.count("\n", 0, begin), text.count("\n", 0, max(stop - 1, begin)) + 1))
    return sorted(found)


def test_lines_of_matches_are_those_the_line_breaks_say() -> None:
    rng = random.Random(7)
    for _ in range(300):
        text = "".join(rng.choice("ab\n") for _ in range(rng.randint(0, 60)))
        needle = rng.choice(["a", "ab", "b\na", "\n", "ba\nb"])
        spans = [m.span() for m in re.finditer(re.escape(needle), text)]
        assert _match_lines(text, spans) == _counted(text, spans), (text, needle)
    assert _match_lines("", []) == []
    assert _match_lines("one\ntwo\nthree", [(4, 11)]) == [1, 2]  # a match across a line break covers both

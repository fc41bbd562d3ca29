"""Over-long lines: L2 pieces of a line over the chunk bound (:func:`cut_line`), and bounded prefixes
of such a line (:func:`line_prefix`) for the L1 sections that start on it."""

from __future__ import annotations

import base64
import dataclasses
import itertools
import random

import pytest

from service.documents import chunking
from service.documents.chunking import chunk_file
from service.documents.languages import split_lines
from service.documents.long_lines import cut_line, line_prefix
from service.text.tokens import Tokenizers
from tests.unit.test_documents_chunking import Counter, assert_invariants, chunk, quarter, words


@pytest.fixture(scope="module")
def tiktoken_count(tmp_path_factory: pytest.TempPathFactory) -> Counter:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken")).get("o200k_base").count


class Tally:
    """A counter that records how many characters it was asked to count."""

    def __init__(self, count: Counter) -> None:
        self.count = count
        self.chars = 0

    def __call__(self, text: str) -> int:
        self.chars += len(text)
        return self.count(text)


def prose(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    vocabulary = ["the", "context", "service", "retrieves", "chunks,", "tokens;", "embedding", "window.", "a",
                  "Postgres", "minified", "paragraph", "written", "on", "one", "line", "(really)", "42"]
    return " ".join(rng.choice(vocabulary) for _ in range(n_words))


def test_5000_token_line_is_cut_at_whitespace_into_pieces_within_bound(tiktoken_count: Counter) -> None:
    line = prose(4000) + "\n"
    assert tiktoken_count(line) >= 5000
    content = "# Notes\n\n" + line + "\nEnd.\n"
    fc = chunk_file("notes.md", content, count_tokens=tiktoken_count, max_chunk_tokens=400)
    assert_invariants(fc, content, bound=400, count=tiktoken_count)
    pieces = [c for c in fc.at_level(2) if c.line_start == 3]
    assert len(pieces) >= 13 and all(c.line_end == 3 for c in pieces)
    assert "".join(c.text for c in pieces) == line
    sizes = [tiktoken_count(c.text) for c in pieces]
    assert max(sizes) <= 400 and min(sizes[:-1]) >= 300  # within the bound, and reasonably full
    assert all(a.text.endswith(" ") and not b.text.startswith(" ") for a, b in itertools.pairwise(pieces))
    assert {(c.breadcrumb, c.section_title) for c in pieces} == {("notes.md > Notes", "Notes")}


def test_line_without_whitespace_is_cut_anyway(tiktoken_count: Counter) -> None:
    line = base64.b64encode(random.Random(1).randbytes(30_000)).decode()
    content = "data = [\n" + line + "\n]\n"
    fc = chunk_file("blob.txt", content, count_tokens=tiktoken_count, max_chunk_tokens=256)
    assert_invariants(fc, content, bound=256, count=tiktoken_count)
    pieces = [c for c in fc.at_level(2) if c.line_start == 2]
    assert len(pieces) >= tiktoken_count(line) // 256 + 1
    assert "".join(c.text for c in pieces) == line + "\n"


@pytest.mark.parametrize("kind", ["prose", "base64"])
def test_cutting_a_megabyte_line_counts_it_a_few_times_only(kind: str, tiktoken_count: Counter) -> None:
    line = prose(200_000) if kind == "prose" else base64.b64encode(random.Random(2).randbytes(750_000)).decode()
    tally = Tally(tiktoken_count)
    pieces = cut_line(line, 256, tally)
    assert "".join(pieces) == line and len(line) >= 1_000_000
    assert all(tiktoken_count(p) <= 256 for p in pieces)
    assert tally.chars <= 4 * len(line)  # linear: each piece is counted a few times, the line once


@pytest.mark.parametrize("length", range(30, 62))
def test_crlf_stays_whole_in_the_last_piece(length: int) -> None:
    line = "x" * length + "\r\n"
    content = "a\r\n" + line + "b\r\n"
    fc = chunk("f.txt", content, bound=3, count=quarter)
    pieces = [c.text for c in fc.at_level(2) if c.line_start == 2]
    assert len(pieces) > 2 and pieces[-1].endswith("\r\n")
    assert not any("\r" in p for p in pieces[:-1])


def test_emoji_and_combining_sequences_are_not_split(tiktoken_count: Counter) -> None:
    unit = "\U0001f468\u200d\U0001f469\u200d\U0001f467\U0001f1eb\U0001f1f7e\u0301\U0001f44d\U0001f3fd\U0001f389"
    line = unit * 300 + "\n"
    fc = chunk("emoji.txt", line, bound=16, count=tiktoken_count)
    pieces = [c.text for c in fc.at_level(2)]
    assert len(pieces) > 10
    for a, b in itertools.pairwise(pieces):
        assert "\u200d" not in (a[-1], b[0]) and b[0] not in ("\u0301", "\U0001f3fd")
        assert not ("\U0001f1e6" <= a[-1] <= "\U0001f1ff" and "\U0001f1e6" <= b[0] <= "\U0001f1ff")


def test_surrogate_pairs_are_not_split() -> None:
    line = "\ud83c\udf89" * 500 + "\n"  # a str holding UTF-16 surrogate pairs (decoded with surrogatepass)
    for bound in (1, 2, 3, 7):
        pieces = cut_line(line, bound, quarter)
        assert "".join(pieces) == line and len(pieces) > 10
        assert not any("\ud800" <= p[-1] <= "\udbff" for p in pieces)
        assert all(quarter(p) <= bound for p in pieces)


def test_normal_lines_are_chunked_as_without_the_cutting(monkeypatch: pytest.MonkeyPatch) -> None:
    functions = "".join(f"def f{n}(a, b):\n" + "".join(f"    v{i} = a + b + {i}\n" for i in range(6)) + "\n\n"
                        for n in range(6))
    long_line = "TABLE = [" + ", ".join(f"'entry {i}'" for i in range(300)) + "]\n"
    content = "import os\n\n" + functions + long_line + "\n" + functions.replace("def f", "def g")
    cut = chunk("m.py", content, bound=40)
    monkeypatch.setattr(chunking, "cut_line", lambda line, *args: [line])  # the line as one chunk
    whole = chunk_file("m.py", content, count_tokens=words, max_chunk_tokens=40)
    number = split_lines(content).index(long_line) + 1
    assert cut.at_level(0) == whole.at_level(0) and cut.at_level(1) == whole.at_level(1)
    assert [c for c in cut.at_level(2) if c.line_start != number] == [
        c for c in whole.at_level(2) if c.line_start != number]
    pieces = [c for c in cut.at_level(2) if c.line_start == number]
    assert len(pieces) > 10 and "".join(c.text for c in pieces) == long_line
    (single,) = [c for c in whole.at_level(2) if c.line_start == number]
    assert all(dataclasses.replace(c, text=single.text) == single for c in pieces)



# --------------------------------------------------------------------------- bounded prefix of a line


@pytest.mark.parametrize("bound", [1, 3, 16, 256])
def test_line_prefix_is_the_first_piece_of_the_line(bound: int, tiktoken_count: Counter) -> None:
    for line in (prose(3000, seed=bound) + "\n", base64.b64encode(random.Random(bound).randbytes(9000)).decode(),
                 "\U0001f468\u200d\U0001f469\u200d\U0001f467e\u0301 " * 400 + "\r\n"):
        prefix = line_prefix(line, bound, tiktoken_count)
        first = cut_line(line, bound, tiktoken_count)[0]
        # Never over the bound: "" when the first piece is one character that is (an emoji for 1 token).
        assert prefix == (first if tiktoken_count(first) <= bound else "")
        assert line.startswith(prefix) and tiktoken_count(prefix) <= bound and (prefix or bound == 1)
        assert line_prefix(line, bound, tiktoken_count, tiktoken_count(line)) == prefix
    assert line_prefix("short line\n", 16, tiktoken_count) == "short line\n"


def test_line_prefix_is_empty_when_even_one_character_is_over_the_bound() -> None:
    def per_char(text: str) -> int:
        return 3 * len(text)

    assert line_prefix("\U0001f389" * 50 + "\n", 2, per_char) == ""


def test_line_prefix_of_a_megabyte_line_counts_about_one_piece(tiktoken_count: Counter) -> None:
    line = prose(200_000, seed=3) + "\n"
    tokens = tiktoken_count(line)
    tally = Tally(tiktoken_count)
    prefix = line_prefix(line, 2048, tally, tokens)
    assert 1500 <= tiktoken_count(prefix) <= 2048 and line.startswith(prefix)
    assert tally.chars <= 4 * len(prefix)  # the line itself is not counted again


def minified_js(size: int, functions: int) -> str:
    """One line of ``functions`` top-level functions of about ``size // functions`` characters each."""
    body = size // functions
    parts = []
    for n in range(functions):
        head = f"function f{n}(a,b){{var t=["
        numbers = ",".join(str((n * 7919 + i * 104729) % 100003) for i in range(body // 5))
        parts.append(head + numbers[: body - len(head) - 30] + f"];return t[a]+b+{n};}}")
    return "".join(parts)


def test_sections_of_a_megabyte_one_line_file_are_bounded_prefixes_of_the_line(tiktoken_count: Counter) -> None:
    content = minified_js(1_000_000, 150)
    assert len(content) >= 950_000 and "\n" not in content
    tally = Tally(tiktoken_count)
    fc = chunk_file("bundle.min.js", content, count_tokens=tally, max_chunk_tokens=400, max_section_tokens=2048)
    # Counting stays linear in the file: the line is counted once for its estimate, its L2 pieces a
    # few times, and each section's prefix costs about one piece (not the whole line again).
    assert tally.chars <= 8 * len(content)
    assert_invariants(fc, content, bound=400, count=tiktoken_count)
    # The line's many functions share one section: each would hold the same prefix of the line.
    (section,) = fc.at_level(1)
    assert (section.line_start, section.line_end, section.symbol) == (1, 1, "f0")
    assert section.truncated and section.text and content.startswith(section.text)
    assert tiktoken_count(section.text) <= 2048


def test_a_section_whose_first_line_fits_keeps_whole_lines() -> None:
    # Whole lines first: the long third line is left out whole rather than cut.
    content = "function f(a) {\n  return a;\n  var t = [" + ", ".join(str(i) for i in range(200)) + "];\n}\n"
    fc = chunk("f.js", content, bound=20, max_section_tokens=30)
    (f,) = fc.at_level(1)
    assert f.truncated and f.text == "".join(split_lines(content)[:2])

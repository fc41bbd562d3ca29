"""Chunking: exact L2 tiling, exact line spans, token bounds, outlines and breadcrumbs."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.documents.chunking import Chunk, FileChunks, chunk_file, content_hash
from service.documents.code_outline import tree_sitter_available
from service.documents.languages import detect_language, outline, split_lines
from service.documents.sections import MAX_OUTLINE_DEPTH

Counter = Callable[[str], int]


def words(text: str) -> int:
    return len(text.split())


def quarter(text: str) -> int:
    """Not additive over lines (rounding), like a real tokenizer."""
    return len(text) // 4


def assert_invariants(fc: FileChunks, content: str, *, bound: int, count: Counter, section_bound: int = 2048) -> None:
    lines = split_lines(content)
    expected_count = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    assert fc.line_count == len(lines) == expected_count
    assert fc.content_hash == hashlib.sha256(content.encode("utf-8")).hexdigest()

    l0 = fc.at_level(0)
    assert len(l0) == 1 and fc.chunks[0] is l0[0]
    assert (l0[0].line_start, l0[0].line_end) == (1, fc.line_count)
    assert l0[0].breadcrumb == fc.path
    assert count(l0[0].text) <= section_bound

    l2 = fc.at_level(2)
    assert "".join(c.text for c in l2) == content
    expected_start = 1
    # Every L2 chunk is within the bound: whole lines, or consecutive pieces of one over-long line.
    for (start, end), same_span in itertools.groupby(l2, key=lambda c: (c.line_start, c.line_end)):
        group = list(same_span)
        assert start == expected_start and end >= start
        span = "".join(lines[start - 1 : end])
        assert "".join(c.text for c in group) == span
        for c in group:
            assert c.text and count(c.text) <= bound
            assert c.breadcrumb == group[0].breadcrumb and c.breadcrumb.startswith(fc.path)
        if len(group) > 1:
            assert start == end and count(span) > bound
            assert all("\n" not in c.text for c in group[:-1])  # the terminator stays in the last piece
            terminator = "\r\n" if span.endswith("\r\n") else "\n" if span.endswith("\n") else ""
            assert group[-1].text.endswith(terminator)
        expected_start = end + 1
    assert expected_start == fc.line_count + 1

    for c in fc.at_level(1):
        span = "".join(lines[c.line_start - 1 : c.line_end])
        assert 1 <= c.line_start <= c.line_end <= fc.line_count
        if c.truncated:
            assert span.startswith(c.text) and span != c.text
            assert count(c.text) <= section_bound
        else:
            assert c.text == span
    # Level order: L0, then L1s by position, then L2s.
    assert [c.level for c in fc.chunks] == sorted(c.level for c in fc.chunks)


def chunk(path: str, content: str, bound: int = 400, count: Counter = words, **kw: int) -> FileChunks:
    fc = chunk_file(path, content, count_tokens=count, max_chunk_tokens=bound, **kw)  # type: ignore[arg-type]
    assert_invariants(fc, content, bound=bound, count=count, section_bound=kw.get("max_section_tokens", 2048))
    return fc


def by_symbol(fc: FileChunks, level: int = 1) -> dict[str | None, Chunk]:
    return {c.symbol: c for c in fc.at_level(level)}


# ------------------------------------------------------------------------------------- exact tiling


@pytest.mark.parametrize(
    "content",
    [
        "",
        "\n",
        "\n\n\n",
        "one line without newline",
        "a\nb\nc",
        "a\nb\nc\n",
        "a\r\nb\r\n\r\nc",
        "crlf\r\nonly\r\n",
        "mixed\r\nendings\nand a lone\rcarriage return\n",
        "\ufeffbom first\nunicode é 日本 🎉\n",
        "trailing spaces   \n\t\ttabs\n   \n",
        "form\x0cfeed and \u2028 line separator are not line breaks\n",
    ],
)
@pytest.mark.parametrize("path", ["f.txt", "f.py", "f.md", "f.js", "f.c"])
@pytest.mark.parametrize("bound", [1, 3, 400])
def test_l2_reconstructs_edge_cases(content: str, path: str, bound: int) -> None:
    for count in (words, quarter):
        chunk(path, content, bound=bound, count=count)


def test_empty_file() -> None:
    fc = chunk("empty.py", "")
    assert fc.line_count == 0
    assert [c.level for c in fc.chunks] == [0]
    assert (fc.chunks[0].line_start, fc.chunks[0].line_end) == (1, 0)
    assert fc.content_hash == hashlib.sha256(b"").hexdigest()


def test_single_line_longer_than_bound_is_cut_into_pieces_of_that_line() -> None:
    long_line = " ".join(f"w{i}" for i in range(50)) + "\n"
    content = "a b\nc d\n" + long_line + "e f\n"
    fc = chunk("f.txt", content, bound=5)
    pieces = [c for c in fc.at_level(2) if c.line_start == 3]
    assert len(pieces) >= 10 and all(c.line_end == 3 and words(c.text) <= 5 for c in pieces)
    assert "".join(c.text for c in pieces) == long_line
    assert all(c.text.endswith(" ") for c in pieces[:-1])  # cut after whitespace, no word split
    assert pieces[-1].text.endswith("w49\n")


def test_file_with_one_huge_line_and_no_newline() -> None:
    content = "x " * 1000
    fc = chunk("f.txt", content, bound=10)
    l2 = fc.at_level(2)
    assert len(l2) >= 100 and {(c.line_start, c.line_end) for c in l2} == {(1, 1)}
    assert "".join(c.text for c in l2) == content


def test_crlf_survives_byte_for_byte() -> None:
    content = "".join(f"line {i} with some words\r\n" for i in range(200)) + "last"
    fc = chunk("f.txt", content, bound=20)
    assert len(fc.at_level(2)) > 5
    assert "".join(c.text for c in fc.at_level(2)).encode() == content.encode()


def test_non_additive_counter_still_respects_bound() -> None:
    # Three-character lines count 0 each but together they add up: the real count decides.
    content = "abc\n" * 500
    fc = chunk("f.txt", content, bound=7, count=quarter)
    assert all(quarter(c.text) <= 7 for c in fc.at_level(2))


def test_invalid_bounds() -> None:
    with pytest.raises(ValueError):
        chunk_file("f.py", "x\n", count_tokens=words, max_chunk_tokens=0)


def test_content_hash_is_sha256_of_utf8() -> None:
    assert content_hash("héllo") == hashlib.sha256("héllo".encode()).hexdigest()


# ----------------------------------------------------------------------------------------- property

_LINE_POOL = [
    "",
    "   ",
    "def f(x):",
    "    return x",
    "class A:",
    "    def m(self):",
    "        pass",
    "@decorator",
    "# Heading",
    "## Sub heading",
    "```",
    "=====",
    "-----",
    "function g() {",
    "}",
    "fn main() {",
    "[table]",
    "x = 1  # comment",
]
_line_text = st.one_of(
    st.sampled_from(_LINE_POOL),
    st.text(
        alphabet=st.characters(blacklist_characters="\n", blacklist_categories=["Cs"]),
        max_size=60,
    ),
    # Long lines: minified code, prose on one line, emoji and combining sequences, runs without breaks.
    st.lists(
        st.sampled_from(["word ", "alpha", ",", ";", "}", " ", "\t", "\r", "\U0001f389", "\u200d", "e\u0301",
                         "x" * 30]),
        min_size=20,
        max_size=200,
    ).map("".join),
)


@st.composite
def line_structured_texts(draw: st.DrawFn) -> str:
    lines = draw(st.lists(_line_text, max_size=60))
    endings = draw(st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines)))
    text = "".join(line + ending for line, ending in zip(lines, endings, strict=True))
    if draw(st.booleans()):
        text += draw(_line_text)  # a last line without a newline (possibly empty)
    return text


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    content=line_structured_texts(),
    path=st.sampled_from(["a.py", "a.md", "a.txt", "a.js", "a.go", "a.rs", "a.toml", "a.c", "a.rb"]),
    bound=st.integers(min_value=1, max_value=60),
    use_quarter=st.booleans(),
)
def test_property_l2_tiles_file_exactly(content: str, path: str, bound: int, use_quarter: bool) -> None:
    """L2 tiles the file byte for byte and every L2 chunk is within the bound, long lines included."""
    count = quarter if use_quarter else words
    chunk(path, content, bound=bound, count=count, max_section_tokens=40)


# ------------------------------------------------------------------------------------------- Python

PYTHON_SOURCE = '''"""Module docstring: builds apps.

More detail.
"""

import typing

if typing.TYPE_CHECKING:
    def typed_helper() -> None: ...


@dataclass
@other(
    arg=1,
)
class App:
    """The app."""

    class Config:
        def load(self) -> None:
            return None

    def build(self) -> None:
        def inner() -> None:
            pass
        inner()

    async def serve(self) -> None:
        pass


def main() -> None:
    App().build()
'''


def test_python_symbols_and_breadcrumbs() -> None:
    fc = chunk("service/app.py", PYTHON_SOURCE)
    l1 = by_symbol(fc)
    assert set(l1) == {"typed_helper", "App", "App.Config", "App.Config.load", "App.build", "App.serve", "main"}
    assert l1["App.build"].breadcrumb == "service/app.py > class App > def build"
    assert l1["App.Config.load"].breadcrumb == "service/app.py > class App > class Config > def load"
    assert l1["App.serve"].breadcrumb == "service/app.py > class App > async def serve"
    assert l1["App.build"].section_title is None
    # Decorators are part of the class's span.
    lines = split_lines(PYTHON_SOURCE)
    assert lines[l1["App"].line_start - 1].startswith("@dataclass")
    assert lines[l1["App"].line_end - 1].strip() == "pass"
    assert l1["main"].text == "def main() -> None:\n    App().build()\n"


def test_python_summary_lists_symbols() -> None:
    fc = chunk("service/app.py", PYTHON_SOURCE)
    summary = fc.chunks[0].text
    assert "service/app.py" in summary and "python" in summary and "33 lines" in summary
    assert "Module docstring: builds apps." in summary
    assert "class App: Config, build, serve" in summary
    assert "def main" in summary


def test_l2_breadcrumb_is_innermost_at_first_line() -> None:
    body = "".join(f"        x{i} = compute(a, b, c, d)\n" for i in range(60))
    content = "class Outer:\n    def big(self):\n" + body + "\n\ndef tail():\n    pass\n"
    fc = chunk("m.py", content, bound=40)
    l2 = fc.at_level(2)
    assert l2[0].breadcrumb == "m.py > class Outer"
    middle = [c for c in l2 if 3 < c.line_start <= 62]
    assert middle and all(c.breadcrumb == "m.py > class Outer > def big" for c in middle)
    assert all(c.symbol == "Outer.big" for c in middle)
    assert l2[-1].breadcrumb == "m.py > def tail"


def test_l2_cuts_align_with_symbol_boundaries() -> None:
    functions = [
        f"# helper {n} comment\ndef f{n}(a, b):\n" + "".join(f"    v{i} = a + b + {i}\n" for i in range(6)) + "\n\n"
        for n in range(8)
    ]
    content = "import os\n\n\n" + "".join(functions)
    fc = chunk("m.py", content, bound=60)
    lines = split_lines(content)
    starts = [lines[c.line_start - 1] for c in fc.at_level(2)]
    assert len(starts) > 2
    # Every chunk after the first starts at a function's leading comment: no function is split.
    assert all(s.startswith("# helper") for s in starts[1:])


def test_python_syntax_error_falls_back_to_heuristic() -> None:
    content = "def ok():\n    pass\n\nclass Broken(\n    def method(self):\n        x = = 1\n"
    fc = chunk("broken.py", content)
    assert "ok" in by_symbol(fc)


def test_huge_section_is_truncated_with_full_span() -> None:
    content = "class Big:\n" + "".join(f"    def m{i}(self): return {i} + {i}\n" for i in range(300))
    fc = chunk("big.py", content, max_section_tokens=100)
    big = by_symbol(fc)["Big"]
    assert big.truncated and (big.line_start, big.line_end) == (1, 301)
    assert words(big.text) <= 100
    assert not by_symbol(fc)["Big.m5"].truncated


def test_huge_first_line_is_truncated_by_characters() -> None:
    content = "def f(" + ", ".join(f"a{i}" for i in range(500)) + "): pass\n"
    fc = chunk("f.py", content, max_section_tokens=50)
    f = by_symbol(fc)["f"]
    assert f.truncated and words(f.text) <= 50 and content.startswith(f.text)


def test_summary_is_bounded() -> None:
    content = "".join(f"def function_number_{i}():\n    pass\n" for i in range(2000))
    fc = chunk("many.py", content, max_section_tokens=60)
    assert words(fc.chunks[0].text) <= 60
    assert "more" in fc.chunks[0].text


# ----------------------------------------------------------------------------------------- Markdown

MARKDOWN = """---
title: front matter
---
# A

Intro paragraph for the document.

## B

```python
# not a heading
def f(): pass
```

### C

Deep text.

Setext Title
------------

Under setext.

# Second
text
"""


def test_markdown_breadcrumbs() -> None:
    fc = chunk("docs/guide.md", MARKDOWN)
    titles = {c.section_title: c for c in fc.at_level(1)}
    assert set(titles) == {"A", "B", "C", "Setext Title", "Second"}
    assert titles["C"].breadcrumb == "docs/guide.md > A > B > C"
    assert titles["Setext Title"].breadcrumb == "docs/guide.md > A > Setext Title"
    assert titles["Second"].breadcrumb == "docs/guide.md > Second"
    assert titles["B"].symbol is None
    assert "# not a heading" in titles["B"].text
    summary = fc.chunks[0].text
    assert "Intro paragraph for the document." in summary and "\n    - C\n" in summary


def test_markdown_l2_carry_section_title() -> None:
    content = "# A\n\n## B\n\n### C\n\n" + "".join(f"sentence number {i} here.\n" for i in range(100))
    fc = chunk("x.md", content, bound=30)
    last = fc.at_level(2)[-1]
    assert last.breadcrumb == "x.md > A > B > C" and last.section_title == "C"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("# Title #\n", ["Title"]),
        ("#hashtag\n", []),
        ("    # indented code\n", []),
        ("####### seven\n", []),
        ("~~~\n# in tilde fence\n~~~\n## after\n", ["after"]),
        ("````\n```\n# still fenced\n````\n# out\n", ["out"]),
        ("- item\n---\n", []),
        ("para\n===\n", ["para"]),
    ],
)
def test_markdown_heading_rules(text: str, expected: list[str]) -> None:
    assert [s.title for s in outline("markdown", text, split_lines(text))] == expected


# ---------------------------------------------------------------------------------- other languages

def test_tree_sitter_grammars_are_installed() -> None:
    # The grammars are pinned dependencies: their absence must fail here, not silently fall back.
    assert all(tree_sitter_available(lang) for lang in ("javascript", "typescript", "go", "rust", "java"))


def test_typescript_tree_sitter() -> None:
    content = (
        "/** Doc. */\n@Component()\nexport class Widget<T> {\n  constructor() {}\n"
        "  render(): string {\n    return 'x'\n  }\n}\n\nexport const helper = async (a: number) => {\n"
        "  return a\n}\nconst data = 3\ninterface Shape { area(): number }\n"
    )
    fc = chunk("ui/widget.ts", content)
    l1 = by_symbol(fc)
    assert set(l1) == {"Widget", "Widget.constructor", "Widget.render", "helper", "Shape"}
    assert l1["Widget"].line_start == 2  # the decorator before `export` is part of the class
    assert l1["Widget.render"].breadcrumb == "ui/widget.ts > class Widget > method render"
    assert (l1["helper"].line_start, l1["helper"].line_end) == (10, 12)


def test_go_rust_java_tree_sitter() -> None:
    go = "package main\n\ntype Server struct {\n\tport int\n}\n\nfunc (s *Server) Start() error {\n\treturn nil\n}\n"
    assert set(by_symbol(chunk("main.go", go))) == {"Server", "Server.Start"}
    rust = "#[derive(Debug)]\npub struct P { x: i32 }\n\nimpl Display for P {\n    fn fmt(&self) {}\n}\n"
    rs = {c.breadcrumb: c for c in chunk("lib.rs", rust).at_level(1)}
    assert set(rs) == {"lib.rs > struct P", "lib.rs > impl Display for P", "lib.rs > impl Display for P > fn fmt"}
    assert rs["lib.rs > struct P"].line_start == 1  # attributes belong to the item
    # An impl block carries its type's name, so a symbol lookup for `P` finds both.
    assert rs["lib.rs > impl Display for P"].symbol == "P"
    assert rs["lib.rs > impl Display for P > fn fmt"].symbol == "P::fmt"
    java = "package x;\n\n@Entity\npublic class User {\n  public String name() { return n; }\n}\n"
    jv = by_symbol(chunk("User.java", java))
    assert set(jv) == {"User", "User.name"} and jv["User"].line_start == 3


def test_heuristic_c_and_ruby() -> None:
    c = "#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n    return 0;\n}\n\nstruct point {\n    int x;\n};\n"
    assert set(by_symbol(chunk("main.c", c))) == {"main", "point"}
    ruby = "module Shop\n  class Cart\n    def total\n      endpoint = 1\n    end\n  end\nend\n"
    rb = by_symbol(chunk("cart.rb", ruby))
    assert rb["Shop.Cart.total"].breadcrumb == "cart.rb > module Shop > class Cart > def total"
    assert (rb["Shop.Cart.total"].line_start, rb["Shop.Cart.total"].line_end) == (3, 5)
    assert (rb["Shop"].line_start, rb["Shop"].line_end) == (1, 7)


def test_toml_tables_and_plain_text() -> None:
    toml = 'title = "x"\n\n[project]\nname = "p"\n\n[[tool.items]]\na = 1\n'
    assert [c.breadcrumb for c in chunk("pyproject.toml", toml).at_level(1)] == [
        "pyproject.toml > [project]",
        "pyproject.toml > [tool.items]",
    ]
    assert chunk("notes.txt", "class Foo is prose here\n").at_level(1) == ()


@pytest.mark.parametrize(
    ("path", "language"),
    [
        ("a/b.py", "python"),
        ("README.md", "markdown"),
        ("x.TSX", "tsx"),
        ("src/main.rs", "rust"),
        ("Dockerfile", "dockerfile"),
        ("Makefile", "make"),
        ("noext", "text"),
        ("archive.tar.gz", "text"),
    ],
)
def test_detect_language(path: str, language: str) -> None:
    assert detect_language(path) == language


def test_language_override_and_chunk_fields() -> None:
    fc = chunk_file("script", "def f():\n    pass\n", count_tokens=words, language="python")
    assert fc.language == "python" and {c.language for c in fc.chunks} == {"python"}
    assert by_symbol(fc)["f"].breadcrumb == "script > def f"


def test_chunks_this_repository_service_package() -> None:
    root = Path(__file__).resolve().parents[2] / "service"
    for file in sorted(root.rglob("*.py")):
        content = file.read_text(encoding="utf-8")
        chunk(file.relative_to(root).as_posix(), content, bound=200)


def test_without_tree_sitter_the_heuristic_outlines_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.documents import code_outline

    monkeypatch.setattr(code_outline, "_tree_sitter_language", lambda language: None)
    content = "export class Store {\n  async load() {\n    return 1\n  }\n}\n\nfunction helper(x) {\n  return x\n}\n"
    fc = chunk("store.js", content)
    assert {c.breadcrumb for c in fc.at_level(1)} == {"store.js > class Store", "store.js > function helper"}
    assert (by_symbol(fc)["Store"].line_start, by_symbol(fc)["Store"].line_end) == (1, 5)


def test_python_lone_carriage_return_keeps_line_numbers() -> None:
    # Python itself breaks lines on a lone "\r"; our line model (and git's, and editors') does not.
    content = 'x = "a\rb"\n\n@dec\ndef f():\n    pass\n'
    f = by_symbol(chunk("cr.py", content))["f"]
    assert (f.line_start, f.line_end) == (3, 5)


# --------------------------------------------------------------------- hostile nesting

DEPTH = 1000
DEEPLY_NESTED = {
    "blocks.js": "function f() {\n" + "{\n" * DEPTH + "  g();\n" + "}\n" * DEPTH + "}\n",
    "closures.js": "".join(f"const f{i} = () => {{\n" for i in range(DEPTH)) + "g();\n" + "};\n" * DEPTH,
    "spaces.ts": "".join(f"namespace N{i} {{\n" for i in range(DEPTH)) + "let x = 1;\n" + "}\n" * DEPTH,
    "mods.rs": "".join(f"mod m{i} {{\n" for i in range(DEPTH)) + "fn f() {}\n" + "}\n" * DEPTH,
    "Classes.java": "".join(f"class C{i} {{\n" for i in range(DEPTH)) + "void f() {}\n" + "}\n" * DEPTH,
    "classes.py": "".join("    " * i + f"class C{i}:\n" for i in range(DEPTH)) + "    " * DEPTH + "pass\n",
}


@pytest.mark.parametrize("path", sorted(DEEPLY_NESTED))
def test_source_nested_a_thousand_levels_is_chunked(path: str) -> None:
    """A thousand nested blocks/namespaces/modules/classes raised RecursionError (a 500 failing the
    whole ingest batch) and indentation-nested code took ~18 s: now sections stop at
    MAX_OUTLINE_DEPTH, the file is still tiled exactly and its outline is bounded."""
    content = DEEPLY_NESTED[path]
    result = chunk_file(path, content, count_tokens=lambda s: len(s) // 4, max_chunk_tokens=200)
    assert "".join(c.text for c in result.at_level(2)) == content
    sections = outline(detect_language(path), content, split_lines(content))
    assert sections, "the outer levels are still sections"
    assert max(s.depth for s in sections) <= MAX_OUTLINE_DEPTH
    assert len(result.at_level(1)) <= MAX_OUTLINE_DEPTH + 1

"""Outlines of real-world files the parsers would misread: a byte order mark, Python that does not
parse, and minified code with thousands of symbols on one line."""

from __future__ import annotations

from service.documents.chunking import FileChunks, chunk_file
from service.documents.languages import split_lines


def quarter(text: str) -> int:
    return len(text) // 4


def chunk(path: str, content: str, *, bound: int = 100, section_bound: int = 400) -> FileChunks:
    fc = chunk_file(path, content, count_tokens=quarter, max_chunk_tokens=bound, max_section_tokens=section_bound)
    assert "".join(c.text for c in fc.at_level(2)) == content
    lines = split_lines(content)
    for c in fc.at_level(1):
        span = "".join(lines[c.line_start - 1 : c.line_end])
        assert span.startswith(c.text) and (c.truncated or c.text == span)
    return fc


def outline_of(fc: FileChunks) -> list[tuple[str, int, int]]:
    return [(c.breadcrumb, c.line_start, c.line_end) for c in fc.at_level(1)]


def test_a_byte_order_mark_hides_no_heading_docstring_or_table() -> None:
    md = chunk("guide.md", "\ufeff# Guide\r\n\r\nWhat this is.\r\n\r\n## Install\r\n\r\nRun it.\r\n")
    assert outline_of(md) == [("guide.md > Guide", 1, 7), ("guide.md > Guide > Install", 5, 7)]
    assert md.chunks[0].text == "guide.md\nmarkdown, 7 lines\nWhat this is.\nHeadings:\n- Guide\n  - Install\n"
    # Front matter after a BOM is metadata, not a setext heading.
    front = chunk("post.md", "\ufeff---\ntitle: Post\n---\n# Body\ntext\n")
    assert outline_of(front) == [("post.md > Body", 4, 5)]
    py = chunk("geo.py", '\ufeff"""Geometry."""\nclass Circle:\n    def area(self):\n        return 1\n')
    assert [c.symbol for c in py.at_level(1)] == ["Circle", "Circle.area"]
    assert "Geometry." in py.chunks[0].text
    toml = chunk("pyproject.toml", "\ufeff[project]\nname = 'x'\n[tool]\n")
    assert outline_of(toml) == [("pyproject.toml > [project]", 1, 2), ("pyproject.toml > [tool]", 3, 3)]
    # The L1 and L2 texts are still the file's own lines, the BOM included.
    assert md.at_level(1)[0].text.startswith("\ufeff# Guide")
    assert chunk("bom.md", "\ufeff").line_count == 1


def test_python_that_does_not_parse_names_a_class_without_its_colon() -> None:
    fc = chunk("broken.py", "class Config:\n    debug = True\n\nprint(\n")
    (section,) = fc.at_level(1)
    assert (section.symbol, section.breadcrumb) == ("Config", "broken.py > class Config")


def test_minified_code_is_not_one_section_copy_per_symbol() -> None:
    """Each of the thousands of functions on one minified line was an L1 chunk holding the same prefix
    of that line (none holding its own code): 28,000 of them for a 990 KB bundle, which took minutes
    to embed and filled searches with copies."""
    content = "".join(f"var a{i}=function(){{return {i}}};" for i in range(3000)) + "\n"
    fc = chunk("bundle.min.js", content)
    assert len(fc.at_level(1)) == 1
    texts = [(c.line_start, c.text) for c in fc.at_level(1)]
    assert len(set(texts)) == len(texts)
    # Symbols sharing one short line: one section for the line, not a copy per symbol.
    short = chunk("one.js", "class A { m() { return 1 } n() { return 2 } }\nfunction f() {\n  return 3\n}\n")
    assert outline_of(short) == [("one.js > class A", 1, 1), ("one.js > function f", 2, 4)]


def test_kotlin_swift_and_enum_class_definitions_are_symbols() -> None:
    """Kotlin's `fun` was no definition keyword (a Kotlin file had no function symbols), `enum class
    Color` (C++, Kotlin) was named `class`, and Swift's protocols and extensions were not outlined."""
    kotlin = ("enum class Color { RED }\nsuspend fun load() {\n    fetch()\n}\nclass Repo {\n"
              "    override fun toString(): String {\n        return \"\"\n    }\n}\n")
    kt = chunk("Repo.kt", kotlin)
    assert [(c.symbol, c.line_start, c.line_end) for c in kt.at_level(1)] == [
        ("Color", 1, 1), ("load", 2, 4), ("Repo", 5, 9), ("Repo.toString", 6, 8)]
    cpp = chunk("color.hpp", "enum class Color {\n  Red,\n};\nenum struct Mode { A };\n")
    assert [c.symbol for c in cpp.at_level(1)] == ["Color", "Mode"]
    swift = chunk("View.swift", "protocol Drawable {\n}\nextension View: Drawable {\n    func draw() {\n    }\n}\n")
    assert [c.breadcrumb for c in swift.at_level(1)] == [
        "View.swift > protocol Drawable", "View.swift > extension View", "View.swift > extension View > func draw"]


def test_a_script_without_an_extension_is_outlined_by_its_shebang() -> None:
    """`bin/deploy` starting `#!/usr/bin/env python3` was plain text: no symbols, no summary outline."""
    script = "#!/usr/bin/env -S python3 -u\n\"\"\"Deploy the site.\"\"\"\n\ndef main():\n    pass\n"
    fc = chunk("bin/deploy", script)
    assert fc.language == "python" and [c.symbol for c in fc.at_level(1)] == ["main"]
    assert "Deploy the site." in fc.chunks[0].text
    assert chunk("bin/build", "#!/bin/bash -e\nfunction build {\n  make\n}\n").language == "shell"
    assert chunk("tools/serve", "#!/usr/bin/env node\nfunction serve() {\n}\n").language == "javascript"
    # An extension still decides; an unknown interpreter is text.
    assert chunk("notes.txt", "#!/bin/bash\n").language == "text"
    assert chunk("bin/x", "#!/usr/bin/env unknown-tool\n").language == "text"


def test_a_c_function_with_its_return_type_on_the_line_above_starts_there() -> None:
    """GNU style (PostgreSQL, BSD) writes `static int` above `main(...)`: the section started at the
    name, so its L1 chunk lacked the return type and an L2 cut could fall inside the signature."""
    content = ("#include <postgres.h>\n\nstatic int\nparse(const char *s)\n{\n\treturn 0;\n}\n\n"
               "int x;\nDatum\npg_fn(PG_FUNCTION_ARGS)\n{\n\tPG_RETURN_NULL();\n}\n")
    fc = chunk("parse.c", content)
    assert [(c.symbol, c.line_start, c.line_end) for c in fc.at_level(1)] == [("parse", 3, 7), ("pg_fn", 10, 14)]
    template = chunk("max.hpp", "template <typename T>\nT max_of(T a, T b)\n{\n  return a;\n}\n")
    assert [(c.symbol, c.line_start) for c in template.at_level(1)] == [("max_of", 1)]


def test_posix_shell_functions_are_symbols() -> None:
    """`deploy() {` (no `function` keyword, the POSIX form) was not a symbol."""
    script = "set -e\n\nfunction old_style {\n  echo\n}\n\ndeploy() {\n  build\n}\n\nlog () {\n  echo \"$@\"\n}\nmain\n"
    fc = chunk("deploy.sh", script)
    assert [(c.symbol, c.line_start, c.line_end) for c in fc.at_level(1)] == [
        ("old_style", 3, 5), ("deploy", 7, 9), ("log", 11, 13)]


def test_headings_commented_out_in_markdown_are_not_sections() -> None:
    """`<!-- ... -->` hides what it holds: a commented-out `## Old section` became an L1 section (and a
    heading of the file's summary) that no reader of the rendered page sees."""
    content = "# Guide\n\n<!--\n## Old install steps\nrun old.sh\n-->\n\n## Install\n\nrun new.sh\n<!-- ## inline -->\n"
    fc = chunk("guide.md", content)
    assert outline_of(fc) == [("guide.md > Guide", 1, 11), ("guide.md > Guide > Install", 8, 11)]
    assert "Old install" not in fc.chunks[0].text

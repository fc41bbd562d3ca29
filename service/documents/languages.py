"""Language detection and structural outlines (symbols / sections) per language.

An *outline* is the list of :class:`Section` s of a file: Markdown heading sections, Python
classes/functions/methods, and symbols of other languages. Sections nest properly (a child's line span
lies inside its parent's) and carry the labels of their ancestors, which is what breadcrumbs are built
from. Parsers, best first:

* Python: the standard library ``ast`` (exact spans, decorators included); on a syntax error the
  keyword/indentation heuristic (:mod:`service.documents.code_outline`).
* Markdown: a line scanner for ATX (``#``) and setext (``===`` / ``---``) headings that skips fenced
  code blocks, HTML comments and YAML front matter (:mod:`service.documents.markdown`).
* JavaScript, TypeScript/TSX, Go, Rust, Java: tree-sitter, when the ``tree-sitter`` package and the
  language's grammar package are installed; otherwise the heuristic (both in
  :mod:`service.documents.code_outline`).
* Other code (C, C++, C#, Ruby, shell, ...): the heuristic — a line that starts (after modifiers such
  as ``export``/``pub``/``static``) with a definition keyword (``class``, ``def``, ``function``,
  ``fn``, ``struct``, ...) opens a symbol, and the symbol runs until the next non-blank line indented
  no deeper than it (a closing ``}``/``end`` line at that indentation is included).
* TOML/INI: ``[table]`` headers. Everything else (plain text, JSON, YAML, ...) has no outline.

Functions never contain symbols here: nested helpers are part of their parent's text, which keeps L1
chunks to the symbols a reader would look up.

Lines are 1-based, and only ``"\\n"`` ends a line (``"\\r\\n"`` keeps its ``"\\r"`` inside the line)
— the same line model as :func:`split_lines`, which the chunker relies on for exact reconstruction.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Final

from service.documents.code_outline import TREE_SITTER_LANGUAGES, heuristic_sections, tree_sitter_sections
from service.documents.markdown import markdown_sections
from service.documents.sections import MAX_OUTLINE_DEPTH, Section

LANGUAGE_BY_EXTENSION: Final[Mapping[str, str]] = MappingProxyType(
    {
        ".py": "python",
        ".pyi": "python",
        ".pyw": "python",
        ".md": "markdown",
        ".markdown": "markdown",
        ".mdx": "markdown",
        ".js": "javascript",
        ".mjs": "javascript",
        ".cjs": "javascript",
        ".jsx": "javascript",
        ".ts": "typescript",
        ".mts": "typescript",
        ".cts": "typescript",
        ".tsx": "tsx",
        ".go": "go",
        ".rs": "rust",
        ".java": "java",
        ".kt": "kotlin",
        ".kts": "kotlin",
        ".scala": "scala",
        ".swift": "swift",
        ".c": "c",
        ".h": "c",
        ".cc": "cpp",
        ".cpp": "cpp",
        ".cxx": "cpp",
        ".hh": "cpp",
        ".hpp": "cpp",
        ".hxx": "cpp",
        ".cs": "csharp",
        ".rb": "ruby",
        ".php": "php",
        ".lua": "lua",
        ".pl": "perl",
        ".pm": "perl",
        ".r": "r",
        ".sh": "shell",
        ".bash": "shell",
        ".zsh": "shell",
        ".sql": "sql",
        ".html": "html",
        ".htm": "html",
        ".css": "css",
        ".scss": "css",
        ".json": "json",
        ".jsonl": "json",
        ".yaml": "yaml",
        ".yml": "yaml",
        ".toml": "toml",
        ".ini": "ini",
        ".cfg": "ini",
        ".rst": "rst",
        ".txt": "text",
        ".xml": "xml",
        ".proto": "protobuf",
    }
)

LANGUAGE_BY_FILENAME: Final[Mapping[str, str]] = MappingProxyType(
    {
        "Dockerfile": "dockerfile",
        "Makefile": "make",
        "GNUmakefile": "make",
        "CMakeLists.txt": "cmake",
        "Gemfile": "ruby",
        "Rakefile": "ruby",
        ".gitignore": "text",
    }
)

# Languages the keyword heuristic is allowed to run on: in prose or data formats a line starting with
# "class" or "function" is ordinary text, not a definition.
_HEURISTIC_LANGUAGES: Final = frozenset(
    {
        "python",
        "javascript",
        "typescript",
        "tsx",
        "go",
        "rust",
        "java",
        "kotlin",
        "scala",
        "swift",
        "c",
        "cpp",
        "csharp",
        "ruby",
        "php",
        "lua",
        "perl",
        "r",
        "shell",
        "protobuf",
    }
)

BREADCRUMB_SEPARATOR: Final = " > "


LANGUAGE_BY_INTERPRETER: Final[Mapping[str, str]] = MappingProxyType(
    {"python": "python", "node": "javascript", "deno": "typescript", "bun": "javascript", "sh": "shell",
     "bash": "shell", "zsh": "shell", "ksh": "shell", "dash": "shell", "ruby": "ruby", "perl": "perl",
     "php": "php", "lua": "lua", "Rscript": "r"}
)


def detect_language(path: str, content: str = "") -> str:
    """Language name for ``path`` from its file name or extension; for a name without a known extension,
    from the ``#!`` line ``content`` starts with (``bin/deploy``: ``#!/usr/bin/env python3``); else ``"text"``."""
    name = PurePosixPath(path).name
    if name in LANGUAGE_BY_FILENAME:
        return LANGUAGE_BY_FILENAME[name]
    if name.startswith("Dockerfile."):
        return "dockerfile"
    suffix = PurePosixPath(name).suffix.lower()
    if suffix in LANGUAGE_BY_EXTENSION or not content.startswith("#!"):
        return LANGUAGE_BY_EXTENSION.get(suffix, "text")
    return LANGUAGE_BY_INTERPRETER.get(_interpreter(content[2:200].partition("\n")[0]), "text")


def _interpreter(shebang: str) -> str:
    """``python`` for ``/usr/bin/env -S python3.11 -u``: the program a ``#!`` line runs, version dropped."""
    words = shebang.split()
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if program == "env":
        rest = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        program = rest[0].rsplit("/", 1)[-1] if rest else ""
    return program.rstrip("0123456789.") or program


def split_lines(content: str) -> list[str]:
    """Split into lines that keep their terminator, so ``"".join(split_lines(s)) == s``.

    Only ``"\\n"`` ends a line: ``str.splitlines`` also breaks on ``\\r``, ``\\f``, ``\\x1c``,
    ``\\u2028`` ..., which would make line numbers disagree with editors, git and tree-sitter.
    A final line without a newline is kept; an empty string has no lines.
    """
    if not content:
        return []
    parts = content.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def outline(language: str, content: str, lines: Sequence[str]) -> list[Section]:
    """The sections of a file, sorted by (line_start, depth); spans are clamped to the file."""
    line_count = len(lines)
    if line_count == 0:
        return []
    sections: list[Section] | None = None
    if language == "python":
        sections = _python_sections(content)
    elif language == "markdown":
        sections = markdown_sections(lines)
    elif language in ("toml", "ini"):
        sections = _table_sections(lines)
    elif language in TREE_SITTER_LANGUAGES:
        sections = tree_sitter_sections(language, content)
    if sections is None and language in _HEURISTIC_LANGUAGES:
        sections = heuristic_sections(language, lines)
    return _normalise(sections or [], line_count)


def _normalise(sections: list[Section], line_count: int) -> list[Section]:
    """Clamp spans to the file and children to their parents (parsers count lines differently).

    A span past the last line or a child poking out of its parent would break the chunker's
    invariants, so whatever a parser reports is made to fit here.
    """
    clamped: list[Section] = []
    for s in sections:
        if len(s.trail) > MAX_OUTLINE_DEPTH:
            continue
        start = min(max(s.line_start, 1), line_count)
        end = min(max(s.line_end, start), line_count)
        if (start, end) != (s.line_start, s.line_end):
            s = Section(s.kind, s.label, start, end, s.trail, s.symbol, s.title)
        clamped.append(s)
    clamped.sort(key=lambda s: (s.line_start, s.depth, -s.line_end))
    kept: list[Section] = []
    open_stack: list[Section] = []
    for s in clamped:
        while open_stack and (open_stack[-1].line_end < s.line_start or len(open_stack[-1].trail) >= len(s.trail)):
            open_stack.pop()
        parent = open_stack[-1] if open_stack else None
        if parent is not None and s.line_end > parent.line_end:
            s = Section(s.kind, s.label, s.line_start, parent.line_end, s.trail, s.symbol, s.title)
        kept.append(s)
        open_stack.append(s)
    return kept


# --------------------------------------------------------------------------------------------- Python


def _python_sections(content: str) -> list[Section] | None:
    """Classes, functions and methods from ``ast``; None when the source does not parse."""
    if "\r" in content:
        # Python breaks lines on a lone "\r" too; blanking those keeps ast's line numbers on our model.
        content = _LONE_CR.sub(" ", content)
    try:
        # SyntaxWarnings (e.g. invalid escapes in old code) are the file's business, not the indexer's.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(content)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: list[Section] = []
    _python_visit(tree.body, (), (), in_class=False, out=out)
    return out


_PY_BLOCK_FIELDS: Final = ("body", "orelse", "finalbody")
_LONE_CR: Final = re.compile(r"\r(?!\n)")


def _python_visit(
    stmts: Sequence[ast.stmt],
    trail: tuple[str, ...],
    qual: tuple[str, ...],
    *,
    in_class: bool,
    out: list[Section],
) -> None:
    for node in stmts:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            end = node.end_lineno or node.lineno
            if isinstance(node, ast.ClassDef):
                keyword, kind = "class", "class"
            else:
                keyword = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
                kind = "method" if in_class else "function"
            label = f"{keyword} {node.name}"
            name = (*qual, node.name)
            out.append(Section(kind, label, start, end, (*trail, label), symbol=".".join(name)))
            if isinstance(node, ast.ClassDef):
                _python_visit(node.body, (*trail, label), name, in_class=True, out=out)
            continue
        # Definitions under `if TYPE_CHECKING:`, `try:` import fallbacks etc. are still module- or
        # class-level definitions, so look through compound statements that are not scopes.
        for field in _PY_BLOCK_FIELDS:
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                _python_visit(block, trail, qual, in_class=in_class, out=out)
        if isinstance(node, ast.Try | ast.TryStar):
            for handler in node.handlers:
                _python_visit(handler.body, trail, qual, in_class=in_class, out=out)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                _python_visit(case.body, trail, qual, in_class=in_class, out=out)


# ------------------------------------------------------------------------------------------ TOML/INI

_TABLE = re.compile(r"[ \t]*\[\[?[ \t]*([^\]\r\n]+?)[ \t]*\]\]?[ \t]*(?:[#;].*)?")


def _table_sections(lines: Sequence[str]) -> list[Section]:
    """``[table]`` / ``[[array]]`` headers; each runs to the line before the next header."""
    heads = [(i + 1, m.group(1)) for i, line in enumerate(lines) if (m := _TABLE.fullmatch(line.rstrip("\r\n")))]
    out: list[Section] = []
    for n, (line, name) in enumerate(heads):
        end = heads[n + 1][0] - 1 if n + 1 < len(heads) else len(lines)
        out.append(Section("table", f"[{name}]", line, end, (f"[{name}]",), symbol=name))
    return out


def breadcrumb(path: str, trail: Sequence[str]) -> str:
    """``path > outer > inner``."""
    return BREADCRUMB_SEPARATOR.join((path, *trail))

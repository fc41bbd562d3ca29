"""Language detection and structural outlines (symbols / sections) per language.

An *outline* is the list of :class:`Section` s of a file: Markdown heading sections, Python
classes/functions/methods, and symbols of other languages. Sections nest properly (a child's line span
lies inside its parent's) and carry the labels of their ancestors, which is what breadcrumbs are built
from. Parsers, best first:

* Python: the standard library ``ast`` (exact spans, decorators included); on a syntax error the
  keyword/indentation heuristic below.
* Markdown: a line scanner for ATX (``#``) and setext (``===`` / ``---``) headings that skips fenced
  code blocks and YAML front matter.
* JavaScript, TypeScript/TSX, Go, Rust, Java: tree-sitter, when the ``tree-sitter`` package and the
  language's grammar package are installed; otherwise the heuristic.
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
import importlib
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import PurePosixPath
from types import MappingProxyType
from typing import Any, Final

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


def detect_language(path: str) -> str:
    """Language name for ``path`` from its file name or extension; ``"text"`` when unknown."""
    name = PurePosixPath(path).name
    if name in LANGUAGE_BY_FILENAME:
        return LANGUAGE_BY_FILENAME[name]
    if name.startswith("Dockerfile."):
        return "dockerfile"
    return LANGUAGE_BY_EXTENSION.get(PurePosixPath(name).suffix.lower(), "text")


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


@dataclass(frozen=True, slots=True)
class Section:
    """A symbol or heading section of a file, with its place in the nesting."""

    kind: str
    """What it is: ``heading``, ``class``, ``function``, ``method``, ``struct``, ``impl``, ``table``..."""
    label: str
    """Its breadcrumb element: ``class App``, ``def build``, ``Installation``."""
    line_start: int
    """First line (1-based, inclusive), decorators/attributes included."""
    line_end: int
    """Last line (1-based, inclusive)."""
    trail: tuple[str, ...]
    """Labels of the enclosing sections, outermost first, ending with this section's own label."""
    symbol: str | None = None
    """Qualified code symbol (``App.build``, ``Server::new``); None for prose sections."""
    title: str | None = None
    """Heading text for prose sections; None for code symbols."""

    @property
    def depth(self) -> int:
        """0 for a top-level section, 1 for its children, and so on."""
        return len(self.trail) - 1


MAX_OUTLINE_DEPTH: Final = 32
"""Sections nested deeper than this are not sections of their own (their lines stay in their
ancestors' text): real code rarely nests a tenth as deep, and a hostile file nested a thousand levels
must cost neither recursion nor a thousand overlapping section chunks."""


def outline(language: str, content: str, lines: Sequence[str]) -> list[Section]:
    """The sections of a file, sorted by (line_start, depth); spans are clamped to the file."""
    line_count = len(lines)
    if line_count == 0:
        return []
    sections: list[Section] | None = None
    if language == "python":
        sections = _python_sections(content)
    elif language == "markdown":
        sections = _markdown_sections(lines)
    elif language in ("toml", "ini"):
        sections = _table_sections(lines)
    elif language in _TREE_SITTER_SPECS:
        sections = _tree_sitter_sections(language, content)
    if sections is None and language in _HEURISTIC_LANGUAGES:
        sections = _heuristic_sections(language, lines)
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


# ------------------------------------------------------------------------------------------- Markdown

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_SETEXT = re.compile(r" {0,3}(=+|-+)[ \t]*")
_NOT_PARAGRAPH = re.compile(r"(?:[ \t]*$| {4}|\t| {0,3}(?:[>#|]|[-+*][ \t]|\d{1,9}[.)][ \t]|<))")


def _markdown_headings(lines: Sequence[str]) -> list[tuple[int, int, str]]:
    """(line, level, title) of every heading outside fenced code blocks and front matter."""
    headings: list[tuple[int, int, str]] = []
    fence: str | None = None
    prev_is_paragraph = False
    start = 0
    if lines and lines[0].rstrip("\r\n") == "---":
        # YAML front matter: its closing "---" would otherwise read as a setext underline.
        for i in range(1, len(lines)):
            if lines[i].rstrip("\r\n").rstrip() in ("---", "..."):
                start = i + 1
                break
    for i in range(start, len(lines)):
        text = lines[i].rstrip("\r\n")
        if fence is not None:
            closing = _FENCE_CLOSE.fullmatch(text)
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence):
                fence = None
            continue
        opening = _FENCE_OPEN.fullmatch(text)
        if opening and not (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            fence = opening.group(1)
            prev_is_paragraph = False
            continue
        atx = _atx_heading(text)
        if atx is not None:
            headings.append((i + 1, *atx))
            prev_is_paragraph = False
            continue
        setext = _SETEXT.fullmatch(text)
        if setext and prev_is_paragraph:
            # Only the paragraph's last line becomes the title: multi-line setext titles are rare and
            # the earlier lines stay with the previous section.
            level = 1 if setext.group(1)[0] == "=" else 2
            headings.append((i, level, lines[i - 1].strip()))
            prev_is_paragraph = False
            continue
        prev_is_paragraph = not _NOT_PARAGRAPH.match(text) and not setext
    return headings


def _atx_heading(text: str) -> tuple[int, str] | None:
    """(level, title) if ``text`` is an ATX heading — parsed by hand: a regex with optional closing
    ``#`` s backtracks quadratically on long lines."""
    stripped = text.lstrip(" ")
    if len(text) - len(stripped) > 3 or not stripped.startswith("#"):
        return None
    level = len(stripped) - len(stripped.lstrip("#"))
    rest = stripped[level:]
    if level > 6 or (rest and rest[0] not in " \t"):
        return None
    rest = rest.strip(" \t")
    without_closing = rest.rstrip("#")
    if not without_closing:
        rest = ""
    elif without_closing[-1] in " \t":
        rest = without_closing.rstrip(" \t")
    return level, rest or "#" * level


def _markdown_sections(lines: Sequence[str]) -> list[Section]:
    """A heading's section runs to the line before the next heading of the same or a higher level."""
    out: list[Section] = []
    stack: list[tuple[int, int, str, tuple[str, ...]]] = []  # (line, level, title, trail)

    def close(end: int) -> None:
        line, _level, title, trail = stack.pop()
        out.append(Section("heading", title, line, end, trail, title=title))

    for line, level, title in _markdown_headings(lines):
        while stack and stack[-1][1] >= level:
            close(line - 1)
        trail = (*stack[-1][3], title) if stack else (title,)
        stack.append((line, level, title, trail))
    while stack:
        close(len(lines))
    return out


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


# ---------------------------------------------------------------------------------------- tree-sitter


@dataclass(frozen=True, slots=True)
class _SymbolKind:
    keyword: str
    kind: str
    container: bool = False


@dataclass(frozen=True, slots=True)
class _TreeSitterSpec:
    module: str
    """Grammar package to import (``tree_sitter_javascript``)."""
    factory: str
    """Function of that package returning the language capsule."""
    symbols: Mapping[str, _SymbolKind]
    descend: frozenset[str]
    """Node types looked through on the way to symbols (program, export wrappers, class bodies)."""
    separator: str = "."


_JS_SYMBOLS: Final[Mapping[str, _SymbolKind]] = {
    "class_declaration": _SymbolKind("class", "class", container=True),
    "abstract_class_declaration": _SymbolKind("class", "class", container=True),
    "function_declaration": _SymbolKind("function", "function"),
    "generator_function_declaration": _SymbolKind("function", "function"),
    "method_definition": _SymbolKind("method", "method"),
    "variable_declarator": _SymbolKind("function", "function"),
    "interface_declaration": _SymbolKind("interface", "interface"),
    "enum_declaration": _SymbolKind("enum", "enum"),
    "type_alias_declaration": _SymbolKind("type", "type"),
    "internal_module": _SymbolKind("namespace", "namespace", container=True),
    "module": _SymbolKind("module", "namespace", container=True),
}
_JS_DESCEND: Final = frozenset(
    {
        "program",
        "export_statement",
        "lexical_declaration",
        "variable_declaration",
        "expression_statement",
        "ambient_declaration",
        "class_body",
        "statement_block",
    }
)

_TREE_SITTER_SPECS: Final[Mapping[str, _TreeSitterSpec]] = MappingProxyType(
    {
        "javascript": _TreeSitterSpec("tree_sitter_javascript", "language", _JS_SYMBOLS, _JS_DESCEND),
        "typescript": _TreeSitterSpec("tree_sitter_typescript", "language_typescript", _JS_SYMBOLS, _JS_DESCEND),
        "tsx": _TreeSitterSpec("tree_sitter_typescript", "language_tsx", _JS_SYMBOLS, _JS_DESCEND),
        "go": _TreeSitterSpec(
            "tree_sitter_go",
            "language",
            {
                "function_declaration": _SymbolKind("func", "function"),
                "method_declaration": _SymbolKind("func", "method"),
                "type_spec": _SymbolKind("type", "type"),
            },
            frozenset({"source_file", "type_declaration"}),
        ),
        "rust": _TreeSitterSpec(
            "tree_sitter_rust",
            "language",
            {
                "function_item": _SymbolKind("fn", "function"),
                "function_signature_item": _SymbolKind("fn", "function"),
                "struct_item": _SymbolKind("struct", "struct"),
                "enum_item": _SymbolKind("enum", "enum"),
                "union_item": _SymbolKind("union", "struct"),
                "trait_item": _SymbolKind("trait", "trait", container=True),
                "impl_item": _SymbolKind("impl", "impl", container=True),
                "mod_item": _SymbolKind("mod", "module", container=True),
                "macro_definition": _SymbolKind("macro_rules!", "macro"),
            },
            frozenset({"source_file", "declaration_list"}),
            separator="::",
        ),
        "java": _TreeSitterSpec(
            "tree_sitter_java",
            "language",
            {
                "class_declaration": _SymbolKind("class", "class", container=True),
                "interface_declaration": _SymbolKind("interface", "interface", container=True),
                "enum_declaration": _SymbolKind("enum", "enum", container=True),
                "record_declaration": _SymbolKind("record", "class", container=True),
                "annotation_type_declaration": _SymbolKind("@interface", "interface"),
                "method_declaration": _SymbolKind("method", "method"),
                "constructor_declaration": _SymbolKind("constructor", "method"),
            },
            frozenset({"program", "class_body", "interface_body", "enum_body", "enum_body_declarations"}),
        ),
    }
)

# Wrappers whose first line belongs to the symbol they wrap (`export`, decorators before `export`).
_WRAPPERS: Final = frozenset({"export_statement", "ambient_declaration", "lexical_declaration"})
_PRECEDING_ATTRIBUTES: Final = frozenset({"decorator", "attribute_item"})
_FUNCTION_VALUES: Final = frozenset({"arrow_function", "function_expression", "function", "generator_function"})


@cache
def _tree_sitter_language(language: str) -> Any | None:
    """The tree-sitter ``Language`` for ``language``, or None if the packages are not installed."""
    spec = _TREE_SITTER_SPECS[language]
    try:
        tree_sitter = importlib.import_module("tree_sitter")
        grammar = importlib.import_module(spec.module)
        return tree_sitter.Language(getattr(grammar, spec.factory)())
    except (ImportError, AttributeError, ValueError, TypeError):
        # A missing package or a grammar built for an incompatible tree-sitter ABI: use the heuristic.
        return None


def tree_sitter_available(language: str) -> bool:
    """Whether ``language`` is parsed with tree-sitter here (package and grammar importable)."""
    return language in _TREE_SITTER_SPECS and _tree_sitter_language(language) is not None


def _tree_sitter_sections(language: str, content: str) -> list[Section] | None:
    ts_language = _tree_sitter_language(language)
    if ts_language is None:
        return None
    tree_sitter = importlib.import_module("tree_sitter")
    # Parsers are cheap and not thread-safe, so one per call rather than a shared one.
    parser = tree_sitter.Parser(ts_language)
    tree = parser.parse(content.encode("utf-8"))
    out: list[Section] = []
    _ts_visit(tree.root_node, _TREE_SITTER_SPECS[language], out)
    return out


def _ts_visit(root: Any, spec: _TreeSitterSpec, out: list[Section]) -> None:
    """Symbols in source order, depth first, with an explicit stack: a file nested a thousand levels
    deep (blocks, namespaces, modules, classes) must not exhaust Python's recursion limit."""
    # (children still to visit, breadcrumb trail, qualified name, row of an enclosing wrapper)
    stack: list[tuple[Iterator[Any], tuple[str, ...], tuple[str, ...], int | None]] = [
        (iter(root.named_children), (), (), None)
    ]
    while stack:
        children, trail, qual, wrapper_row = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            continue
        kind = spec.symbols.get(child.type)
        if kind is None:
            if child.type in spec.descend:
                row = child.start_point.row if child.type in _WRAPPERS else None
                stack.append((iter(child.named_children), trail, qual, row if wrapper_row is None else wrapper_row))
            continue
        named = _ts_name(child, kind)
        if named is None:
            continue
        label, name = named
        start = child.start_point.row
        if wrapper_row is not None:
            start = min(start, wrapper_row)
        sibling = child.prev_named_sibling
        while sibling is not None and sibling.type in _PRECEDING_ATTRIBUTES:
            start = min(start, sibling.start_point.row)
            sibling = sibling.prev_named_sibling
        end = child.end_point.row
        if child.end_point.column == 0 and end > child.start_point.row:
            end -= 1  # a node ending at column 0 ends with the previous line's newline
        symbol = spec.separator.join((*qual, name))
        out.append(Section(kind.kind, label, start + 1, end + 1, (*trail, label), symbol=symbol))
        if kind.container and len(trail) + 1 < MAX_OUTLINE_DEPTH:
            body = child.child_by_field_name("body")
            if body is not None:
                stack.append((iter(body.named_children), (*trail, label), (*qual, name), None))


def _ts_text(node: Any) -> str:
    return " ".join(bytes(node.text).decode("utf-8", "replace").split())


def _ts_name(node: Any, kind: _SymbolKind) -> tuple[str, str] | None:
    """(breadcrumb label, name) of a symbol node, or None if it is not a symbol after all."""
    if node.type == "variable_declarator":
        value = node.child_by_field_name("value")
        if value is None or value.type not in _FUNCTION_VALUES:
            return None  # `const x = 3` is data, not a symbol
    if node.type == "impl_item":
        type_node = node.child_by_field_name("type")
        if type_node is None:
            return None
        type_name = _ts_text(type_node)
        trait = node.child_by_field_name("trait")
        label = f"impl {_ts_text(trait)} for {type_name}" if trait is not None else f"impl {type_name}"
        return label, type_name.split("<", 1)[0]
    name_node = node.child_by_field_name("name")
    if name_node is None:
        return None
    name = _ts_text(name_node)
    if node.type == "method_declaration" and kind.keyword == "func":
        receiver = _first_descendant(node.child_by_field_name("receiver"), "type_identifier")
        if receiver is not None:
            name = f"{_ts_text(receiver)}.{name}"
    return f"{kind.keyword} {name}", name


def _first_descendant(node: Any, node_type: str) -> Any | None:
    """The first node of ``node_type`` in pre-order under ``node`` (itself included)."""
    stack = [] if node is None else [node]
    while stack:
        current = stack.pop()
        if current.type == node_type:
            return current
        stack.extend(reversed(current.named_children))
    return None


# ------------------------------------------------------------------------------------------ heuristic

_MODIFIERS = (
    r"(?:(?:export|default|declare|public|private|protected|internal|static|abstract|final|sealed|"
    r"async|unsafe|extern|inline|virtual|override|open|data|partial|pub(?:\([^)]*\))?)\s+)*"
)
_DEFINITION = re.compile(
    r"(?P<indent>[ \t]*)" + _MODIFIERS + r"(?P<keyword>class|def|function\*?|func|fn|struct|enum|trait|"
    r"impl|interface|module|namespace|object|record|message|service|sub|union)"
    r"[ \t]+(?P<name>[A-Za-z_$][\w$.:]*)"
)
# C-family functions have no keyword: a return type and a name followed by "(" at column 0.
_C_FUNCTION = re.compile(
    r"(?!(?:if|for|while|switch|return|else|do|case|typedef|using|#)\b)(?:[A-Za-z_][\w\s\*&:<>,~]*?\b)?"
    r"(?P<name>[A-Za-z_~][\w:~]*)[ \t]*\([^;]*"
)
_CONTAINER_KEYWORDS: Final = frozenset(
    {"class", "struct", "enum", "trait", "impl", "interface", "module", "namespace", "object", "record"}
)
_CLOSER = re.compile(r"(?:[}\])]|end\b)")


def _indent_width(line: str) -> int:
    return len(line[: len(line) - len(line.lstrip(" \t"))].expandtabs(4))


def _heuristic_sections(language: str, lines: Sequence[str]) -> list[Section]:
    """Keyword/indentation outline, for code no parser is available for (see the module docstring)."""
    c_like = language in ("c", "cpp", "csharp")
    found: list[tuple[int, int, str, str, bool]] = []  # (line index, indent, keyword, name, container)
    for i, raw in enumerate(lines):
        m = _DEFINITION.match(raw)
        if m:
            keyword = m.group("keyword").rstrip("*")
            found.append((i, _indent_width(raw), keyword, m.group("name"), keyword in _CONTAINER_KEYWORDS))
            continue
        # The C pattern backtracks on long lines; a signature is short and has a "(".
        if c_like and raw[:1].isalpha() and "(" in raw and len(raw) <= 400:
            c = _C_FUNCTION.match(raw.rstrip("\r\n"))
            if c and not raw.rstrip().endswith(";"):
                found.append((i, 0, "function", c.group("name"), False))
    out: list[Section] = []
    stack: list[tuple[int, tuple[str, ...], tuple[str, ...], bool]] = []  # (end idx, trail, qual, cont.)
    indents: list[int | None] = [None] * len(lines)  # each line's indent, measured once (deep files)
    for i, indent, keyword, name, container in found:
        while stack and stack[-1][0] < i:
            stack.pop()
        if stack and not stack[-1][3]:
            continue  # inside a function: nested helpers are part of their parent
        if len(stack) >= MAX_OUTLINE_DEPTH:
            continue  # too deep to be a section of its own (see MAX_OUTLINE_DEPTH)
        end = _block_end(lines, i, indent, indents)
        if stack:
            end = min(end, stack[-1][0])
        start = _with_preceding_attributes(lines, i, indent)
        trail = stack[-1][1] if stack else ()
        qual = stack[-1][2] if stack else ()
        label = f"{keyword} {name}"
        kind = keyword if container else ("method" if stack else "function")
        separator = "::" if language in ("rust", "cpp") else "."
        out.append(Section(kind, label, start + 1, end + 1, (*trail, label), symbol=separator.join((*qual, name))))
        stack.append((end, (*trail, label), (*qual, name), container))
    return out


def _block_end(lines: Sequence[str], i: int, indent: int, indents: list[int | None]) -> int:
    """Index of the last line of the block opened at ``lines[i]`` (see the module docstring);
    ``indents`` caches each line's indent width across calls."""
    end = i
    first = True
    for j in range(i + 1, len(lines)):
        width = indents[j]
        if width is None:
            width = indents[j] = _indent_width(lines[j])
        if width > indent:
            if lines[j].strip():
                end = j
                first = False
            continue
        stripped = lines[j].strip()
        if not stripped:
            continue
        if first and stripped.startswith("{"):
            end = j  # K&R/Allman brace on its own line under the signature
            first = False
            continue
        if _CLOSER.match(stripped):
            end = j
            # `) -> int:` or `} else {` continue the header/block rather than closing it.
            if stripped.endswith((":", "{", "(")):
                first = False
                continue
        break
    return end


def _with_preceding_attributes(lines: Sequence[str], i: int, indent: int) -> int:
    """Extend a definition upwards over decorators/attributes (``@x``, ``#[x]``) at its indentation."""
    start = i
    while start > 0:
        prev = lines[start - 1]
        if prev.strip().startswith(("@", "#[")) and _indent_width(prev) == indent:
            start -= 1
        else:
            break
    return start


def breadcrumb(path: str, trail: Sequence[str]) -> str:
    """``path > outer > inner``."""
    return BREADCRUMB_SEPARATOR.join((path, *trail))

"""Outlines of code other than Python: tree-sitter where its grammar is installed, else a keyword heuristic.

* JavaScript, TypeScript/TSX, Go, Rust, Java: tree-sitter, when the ``tree-sitter`` package and the
  language's grammar package are installed (:func:`tree_sitter_sections`).
* Other code (C, C++, C#, Ruby, shell, ...), and the above without a grammar: a line that starts
  (after modifiers such as ``export``/``pub``/``static``) with a definition keyword (``class``,
  ``def``, ``function``, ``fn``, ``fun``, ``struct``, ...) opens a symbol, and the symbol runs until the
  next non-blank line indented no deeper than it (:func:`heuristic_sections`). C-family functions
  (``name(`` at column 0, their return type on that line or the one above) and POSIX shell functions
  (``name() {``) have no keyword and are recognised by their shape.

Both return :class:`~service.documents.sections.Section` s; :func:`service.documents.languages.outline`
picks the parser and normalises what it reports.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any, Final

from service.documents.sections import MAX_OUTLINE_DEPTH, Section

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
TREE_SITTER_LANGUAGES: Final = frozenset(_TREE_SITTER_SPECS)
"""Languages outlined by tree-sitter when its grammar is installed (else by the heuristic)."""

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


def tree_sitter_sections(language: str, content: str) -> list[Section] | None:
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
    r"(?:(?:export|default|declare|public|private|protected|internal|fileprivate|static|abstract|final|sealed|"
    r"async|suspend|unsafe|extern|inline|virtual|override|open|data|partial|inner|case|operator|infix|tailrec|"
    r"pub(?:\([^)]*\))?)\s+)*"
)
# Kotlin's `fun`, Swift's `protocol`/`extension`; `enum class Color` (C++, Kotlin) names `Color`.
_DEFINITION = re.compile(
    r"(?P<indent>[ \t]*)" + _MODIFIERS + r"(?P<keyword>class|def|function\*?|func|fun|fn|struct|enum|trait|"
    r"impl|interface|protocol|extension|module|namespace|object|record|message|service|sub|union)"
    r"(?:(?<=enum)[ \t]+(?:class|struct))?[ \t]+(?P<name>[A-Za-z_$][\w$.:]*)"
)
# C-family functions have no keyword: a return type and a name followed by "(" at column 0.
_C_FUNCTION = re.compile(
    r"(?!(?:if|for|while|switch|return|else|do|case|typedef|using|#)\b)(?:[A-Za-z_][\w\s\*&:<>,~]*?\b)?"
    r"(?P<name>[A-Za-z_~][\w:~]*)[ \t]*\([^;]*"
)
# POSIX shell functions have no keyword: `deploy() {`.
_SHELL_FUNCTION = re.compile(r"[ \t]*(?P<name>[A-Za-z_][\w.:-]*)[ \t]*\(\)")
_C_RETURN_TYPE = re.compile(
    r"(?!(?:else|return|do|case|default|goto|break|continue|typedef|using|public|private|protected)\b)"
    r"[A-Za-z_][\w \t\*&:<>,]*"
)
"""A line that is only a return type (``static const char *``, ``template <typename T>``)."""
_CONTAINER_KEYWORDS: Final = frozenset(
    {"class", "struct", "enum", "trait", "impl", "interface", "protocol", "extension", "module", "namespace",
     "object", "record"}
)
_CLOSER = re.compile(r"(?:[}\])]|end\b)")


def _indent_width(line: str) -> int:
    return len(line[: len(line) - len(line.lstrip(" \t"))].expandtabs(4))


def heuristic_sections(language: str, lines: Sequence[str]) -> list[Section]:
    """Keyword/indentation outline, for code no parser is available for (see the module docstring)."""
    c_like = language in ("c", "cpp", "csharp")
    shell = language == "shell"
    # (line index, indent, keyword, name, container, first line of the header)
    found: list[tuple[int, int, str, str, bool, int]] = []
    for i, raw in enumerate(lines):
        m = _DEFINITION.match(raw)
        if m:
            keyword = m.group("keyword").rstrip("*")
            # `class A:` (Python that does not parse) names `A`: a trailing `:` or `.` ends the header.
            name = m.group("name").rstrip(":.") or m.group("name")
            found.append((i, _indent_width(raw), keyword, name, keyword in _CONTAINER_KEYWORDS, i))
            continue
        if shell:
            posix = _SHELL_FUNCTION.match(raw)
            if posix:
                found.append((i, _indent_width(raw), "function", posix.group("name"), False, i))
                continue
        # The C pattern backtracks on long lines; a signature is short and has a "(".
        if c_like and raw[:1].isalpha() and "(" in raw and len(raw) <= 400:
            c = _C_FUNCTION.match(raw.rstrip("\r\n"))
            if c and not raw.rstrip().endswith(";"):
                # GNU style (PostgreSQL, BSD) puts the return type on the line above: `static int\nmain(`.
                typed = i > 0 and _C_RETURN_TYPE.fullmatch(lines[i - 1].rstrip()) is not None
                found.append((i, 0, "function", c.group("name"), False, i - 1 if typed else i))
    out: list[Section] = []
    stack: list[tuple[int, tuple[str, ...], tuple[str, ...], bool]] = []  # (end idx, trail, qual, cont.)
    indents: list[int | None] = [None] * len(lines)  # each line's indent, measured once (deep files)
    for i, indent, keyword, name, container, first in found:
        while stack and stack[-1][0] < i:
            stack.pop()
        if stack and not stack[-1][3]:
            continue  # inside a function: nested helpers are part of their parent
        if len(stack) >= MAX_OUTLINE_DEPTH:
            continue  # too deep to be a section of its own (see MAX_OUTLINE_DEPTH)
        end = _block_end(lines, i, indent, indents)
        if stack:
            end = min(end, stack[-1][0])
        start = _with_preceding_attributes(lines, first, indent)
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

"""Path globs and prefixes compiled for SQL: a LIKE prefix the index can use, an anchored POSIX regex.

The ``path`` lookup mode's pattern language (:mod:`service.documents.lookup`): ``**`` any number of
directories, ``*`` and ``?`` within one segment, ``[abc]``/``[!abc]`` classes; a pattern without
``/`` matches a file name at any depth, one with ``/`` the whole path, a trailing ``/`` everything
under a directory. A pattern also matches the path (or file name) equal to it read as plain text, for
file names that hold glob characters. A class PostgreSQL would reject is the caller's 400.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from service.errors import BadRequest


def escape_like(text: str) -> str:
    """Escape ``\\``, ``%`` and ``_`` for LIKE/ILIKE (default escape character ``\\``)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


@dataclass(frozen=True, slots=True)
class PathPattern:
    """A path query compiled for SQL: LIKE prefix (index), anchored POSIX regex, and the literal."""

    like: str
    regex: str
    literal: str | None
    """The pattern itself when it has no wildcards (ranks exact paths first), else None."""
    basename: bool
    """True when the pattern has no ``/`` and may match a file name at any depth."""
    verbatim: str
    """The pattern as a plain path: a path (or, for a pattern without ``/``, a file name) equal to it
    matches and ranks first even when it holds glob characters (``app/[id]/page.tsx``)."""


def _re_escape(text: str) -> str:
    """Escape for a PostgreSQL ARE (and Python ``re``): backslash before every non-word character."""
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in text)


def _check_class(pattern: str, escaped: str) -> None:
    """A ``[...]`` class PostgreSQL would reject (a reversed range such as ``[z-a]``) is the caller's error."""
    try:
        re.compile("[" + escaped + "]")
    except re.error as exc:
        raise BadRequest(f"path glob {pattern[:200]!r} has an invalid character class: {exc.msg}",
                         code="validation_error", details={"field": "query", "glob": pattern[:200]}) from exc


MAX_WILDCARDS = 16
"""Most ``*``, ``**`` and ``?`` a glob may hold (after repeats of ``**/`` collapse to one): each is a
regex the database backtracks through, and hundreds of them took longer than any deadline."""


def compile_path(pattern: str) -> PathPattern | None:
    """Compile a glob/prefix (see the module docstring); None for an empty pattern."""
    p = pattern.strip()
    while p.startswith("./"):
        p = p[2:]
    p = p.lstrip("/")
    if not p:
        return None
    p = re.sub(r"\*{3,}", "**", re.sub(r"(?:\*\*/){2,}", "**/", p))  # the same paths, one regex each
    wildcards = len(re.findall(r"\*+|\?", p))
    if wildcards > MAX_WILDCARDS:
        raise BadRequest(f"path glob {pattern[:200]!r} has {wildcards} wildcards; at most {MAX_WILDCARDS}",
                         code="validation_error", details={"field": "query", "glob": pattern[:200]})
    wild = any(c in p for c in "*?[")
    base = "/" not in p.rstrip("/")
    if not wild:
        if p.endswith("/"):
            return PathPattern(like=escape_like(p) + "%", regex="^" + _re_escape(p), literal=None, basename=False,
                               verbatim=p)
        if base:
            regex = "(^|/)" + _re_escape(p)
            return PathPattern(like="%", regex=regex, literal=p, basename=True, verbatim=p)
        return PathPattern(like=escape_like(p) + "%", regex="^" + _re_escape(p), literal=p, basename=False,
                           verbatim=p)
    out: list[str] = []
    i = 0
    literal_prefix: list[str] = []
    seen_wild = False
    while i < len(p):
        c = p[i]
        if c == "*":
            seen_wild = True
            if p.startswith("**/", i):
                out.append("(.*/)?")
                i += 3
                continue
            if p.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            seen_wild = True
            out.append("[^/]")
        elif c == "[" and p.find("]", i + 2) != -1:
            seen_wild = True
            negate = p[i + 1 : i + 2] in ("!", "^")
            close = p.find("]", i + (3 if negate else 2))
            if close == -1:
                close = p.find("]", i + 2)
            body = p[i + (2 if negate else 1) : close]
            escaped = "".join("\\" + ch if ch in "\\]^[" else ch for ch in body)
            out.append(("[^" if negate else "[") + escaped + "]")
            _check_class(pattern, escaped)
            i = close + 1
            continue
        else:
            out.append(_re_escape(c))
            if not seen_wild:
                literal_prefix.append(c)
        i += 1
    body = "".join(out)
    # File names may hold glob characters (`[id].tsx`, `[...slug]`): the pattern read as a plain path
    # matches too, so such a file can be looked up by its own path.
    plain = _re_escape(p)
    if p.endswith("/"):
        body += ".*"
        plain += ".*"
    body = "(" + body + "|" + plain + ")"
    if base:
        return PathPattern(like="%", regex="(^|/)" + body + "$", literal=None, basename=True, verbatim=p)
    return PathPattern(like=escape_like("".join(literal_prefix)) + "%", regex="^" + body + "$", literal=None,
                       basename=False, verbatim=p)


def path_score(p: PathPattern, path: str) -> float:
    """How well ``path`` matches ``p`` (the ``path`` mode's scores, see :mod:`service.documents.lookup`)."""
    if path == p.verbatim:
        return 1.0
    lit = p.literal
    if lit is None:
        return 0.9 if p.basename and path.rsplit("/", 1)[-1] == p.verbatim else 0.8
    if path == lit:
        return 1.0
    if p.basename and path.rsplit("/", 1)[-1] == lit:
        return 0.9
    if path.startswith(lit.rstrip("/") + "/"):
        return 0.8
    return 0.7

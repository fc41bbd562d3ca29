"""Line-anchored chunks of one file, at three levels.

* **L0** — one per file: a generated summary (path, language, line count, a one-paragraph description
  when the file has one, top-level symbols or headings). Its span is the whole file.
* **L1** — one per section/symbol of the file's outline (:mod:`service.documents.languages`): the
  section's own lines. A huge section's text is cut to ``max_section_tokens`` (whole lines, or if
  even its first line is too big, a prefix of that line cut as an L2 piece would be) and flagged
  ``truncated``; its span stays the section's full span, because the span is what anchors the chunk
  in the file.
* **L2** — size-bounded chunks that tile the file, in order, with
  ``"".join(c.text for c in l2) == content`` byte for byte (CRLF, a missing final newline and an
  empty file included); each is at most ``max_chunk_tokens`` tokens as measured by ``count_tokens``
  on its text. A chunk is whole lines; cuts prefer section boundaries (shallower first), then blank
  lines, as long as the chunk stays reasonably full. A line over the bound is the one exception: it
  is cut into consecutive pieces (:mod:`service.documents.long_lines`: after whitespace or
  punctuation when there is some, never inside a character or ``"\\r\\n"``, the terminator in the
  last piece), each its own chunk with ``line_start == line_end`` that line.

Line model (shared with :func:`split_lines`): lines are 1-based and end after each ``"\\n"``; a
line's text includes its terminator (``"\\r\\n"`` stays inside the line), and a final line without
``"\\n"`` is still a line. A chunk's ``text`` is exactly the concatenation of lines
``line_start..line_end`` — for L0 (generated), truncated L1 chunks and the pieces of an over-long
line it is not (the pieces of a line, in order, are that line).
An empty file has ``line_count == 0``, no L1/L2 chunks, and an L0 with the empty span (1, 0).
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

from service.documents.describe import description
from service.documents.languages import breadcrumb, detect_language, outline, split_lines
from service.documents.long_lines import CountTokens, cut_line, line_prefix
from service.documents.sections import Section

__all__ = [
    "Chunk",
    "CountTokens",
    "FileChunks",
    "chunk_file",
    "content_hash",
    "detect_language",
    "split_lines",
]

LEVEL_FILE: Final = 0
LEVEL_SECTION: Final = 1
LEVEL_CHUNK: Final = 2
CHUNKER_VERSION: Final = 1
"""Raise it when a change makes a file's chunks differ (its outline, cuts or texts): files a smaller
version cut are cut again on their next ingest, even unchanged (``documents.chunker``, migration 0015)."""

# A cut is moved to a better boundary only while the chunk keeps at least this share of the budget:
# below it, many tiny chunks would cost more retrieval quality than a cut mid-section.
_MIN_FILL: Final = 0.25
_COMMENT_PREFIXES: Final = ("#", "//", "/*", "*", "--", ";;", "///", "%")
_BOM: Final = "\ufeff"


@dataclass(frozen=True, slots=True)
class Chunk:
    """One line-anchored chunk of a file."""

    level: int
    """0 file summary, 1 section/symbol, 2 size-bounded chunk."""
    line_start: int
    """First line, 1-based inclusive."""
    line_end: int
    """Last line, 1-based inclusive (``line_start - 1`` only for the L0 of an empty file)."""
    text: str
    section_title: str | None
    """Title of the innermost enclosing prose section (Markdown heading), else None."""
    breadcrumb: str
    """``path > outer > inner``, e.g. ``service/app.py > class App > def build``."""
    symbol: str | None
    """Qualified code symbol of the innermost enclosing symbol (``App.build``), else None."""
    language: str
    truncated: bool = False
    """True when ``text`` is only a prefix of the span's lines (huge L1 sections)."""


@dataclass(frozen=True, slots=True)
class FileChunks:
    """All chunks of one file: the L0 first, then L1 by position, then L2 in file order."""

    path: str
    language: str
    content_hash: str
    line_count: int
    chunks: tuple[Chunk, ...]

    def at_level(self, level: int) -> tuple[Chunk, ...]:
        return tuple(c for c in self.chunks if c.level == level)


def content_hash(content: str) -> str:
    """sha256 hex of the UTF-8 encoding — equal to the hash of the file's bytes for decoded text."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


def chunk_file(
    path: str,
    content: str,
    *,
    count_tokens: CountTokens,
    max_chunk_tokens: int = 400,
    max_section_tokens: int = 2048,
    language: str | None = None,
) -> FileChunks:
    """Chunk ``content`` (the text of the file at relative posix ``path``) at levels 0, 1 and 2.

    ``language`` overrides detection (by name, else by a ``#!`` line). ``max_section_tokens`` bounds L0
    and L1 texts.
    """
    if max_chunk_tokens < 1 or max_section_tokens < 1:
        raise ValueError("token bounds must be positive")
    lang = language or detect_language(path, content)
    lines = split_lines(content)
    # A byte order mark is an encoding mark, not text: parsers read the file without it (so that a
    # heading, docstring or table on line 1 is seen), and the line numbers stay the same.
    bom = content.startswith(_BOM)
    source = content[len(_BOM) :] if bom else content
    source_lines = split_lines(source) if bom else lines
    sections = outline(lang, source, source_lines)
    # Per-line counts steer every cut; a non-empty line counts at least 1, so a counter that rounds
    # short lines down to 0 cannot make one window swallow the whole file.
    estimates = [max(1, count_tokens(line)) if line else 0 for line in lines]
    prefix = list(accumulate(estimates, initial=0))
    chunks: list[Chunk] = [_summary_chunk(path, lang, len(lines), description(lang, source_lines), sections,
                                          count_tokens, max_section_tokens)]
    for s in _distinct_sections(sections, prefix, max_section_tokens):
        text, truncated = _section_text(lines, prefix, s, max_section_tokens, count_tokens)
        chunks.append(
            Chunk(
                level=LEVEL_SECTION,
                line_start=s.line_start,
                line_end=s.line_end,
                text=text,
                section_title=s.title,
                breadcrumb=breadcrumb(path, s.trail),
                symbol=s.symbol,
                language=lang,
                truncated=truncated,
            )
        )
    owners = _innermost_sections(sections, len(lines))
    strength = _cut_strength(lang, lines, sections)
    for start, end in _l2_spans(lines, estimates, strength, max_chunk_tokens, count_tokens):
        owner = sections[owners[start]] if owners[start] >= 0 else None
        title, symbol, trail = (owner.title, owner.symbol, owner.trail) if owner else (None, None, ())
        # A span is one line when that line alone is over the bound: it is cut into pieces.
        texts = (["".join(lines[start:end])] if end - start > 1 or estimates[start] <= max_chunk_tokens
                 else cut_line(lines[start], max_chunk_tokens, count_tokens, estimates[start]))
        chunks.extend(Chunk(level=LEVEL_CHUNK, line_start=start + 1, line_end=end, text=text, section_title=title,
                            breadcrumb=breadcrumb(path, trail), symbol=symbol, language=lang) for text in texts)
    return FileChunks(
        path=path,
        language=lang,
        content_hash=content_hash(content),
        line_count=len(lines),
        chunks=tuple(chunks),
    )


# ----------------------------------------------------------------------------------------------- L2


def _l2_spans(
    lines: Sequence[str],
    estimates: Sequence[int],
    strength: Sequence[int],
    bound: int,
    count: CountTokens,
) -> list[tuple[int, int]]:
    """0-based half-open line ranges tiling ``lines``, each within ``bound`` unless a single line
    (which :func:`~service.documents.long_lines.cut_line` then cuts).

    Greedy on the per-line ``estimates``, then the cut is moved back to the strongest boundary that
    keeps the chunk at least ``_MIN_FILL`` full, then checked with one real count of the chunk's
    text — tokenizers are not additive over lines — and shrunk if it is over.
    """
    n = len(lines)
    prefix = list(accumulate(estimates, initial=0))
    min_fill = bound * _MIN_FILL
    spans: list[tuple[int, int]] = []
    i = 0
    while i < n:
        j = i + 1
        while j < n and prefix[j + 1] - prefix[i] <= bound:
            j += 1
        end = j
        if j < n:
            # Scan from the overflow point backwards; only a strictly stronger boundary wins, so
            # among equals the latest (fullest chunk) is kept.
            best_strength = strength[j]
            for c in range(j - 1, i, -1):
                if prefix[c] - prefix[i] < min_fill:
                    break
                if strength[c] > best_strength:
                    end, best_strength = c, strength[c]
        end = _fit(lines, i, end, bound, count)
        spans.append((i, end))
        i = end
    return spans


def _fit(lines: Sequence[str], start: int, end: int, bound: int, count: CountTokens) -> int:
    """Largest ``k`` in ``(start, end]`` with ``lines[start:k]`` within ``bound`` (or ``start + 1``)."""
    if end - start <= 1 or count("".join(lines[start:end])) <= bound:
        return end
    lo, hi = start + 1, end - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count("".join(lines[start:mid])) <= bound:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _cut_strength(language: str, lines: Sequence[str], sections: Sequence[Section]) -> list[int]:
    """``strength[c]``: how good it is to start a chunk at 0-based line ``c`` (0 = no reason)."""
    n = len(lines)
    strength = [0] * (n + 1)
    code = language != "markdown"
    for s in sections:
        value = 100 - 10 * min(s.depth, 8)
        start = s.line_start - 1
        if code:
            # A symbol's leading comment (docstring-style `//`, `#`, `///`) belongs with it.
            while start > 0 and lines[start - 1].strip().startswith(_COMMENT_PREFIXES):
                start -= 1
        for c in (start, s.line_end):
            if 0 < c < n:
                strength[c] = max(strength[c], value)
    for c in range(1, n):
        if not lines[c - 1].strip():
            strength[c] = max(strength[c], 10)
    return strength


def _innermost_sections(sections: Sequence[Section], line_count: int) -> list[int]:
    """For each 0-based line, the index of the deepest section containing it, or -1."""
    owners = [-1] * line_count
    # Deeper sections are written last so they overwrite their ancestors.
    for index in sorted(range(len(sections)), key=lambda k: sections[k].depth):
        s = sections[index]
        owners[s.line_start - 1 : s.line_end] = [index] * (s.line_end - s.line_start + 1)
    return owners


# ------------------------------------------------------------------------------------------ L0 / L1


def _distinct_sections(sections: Sequence[Section], prefix: Sequence[int], bound: int) -> list[Section]:
    """The sections whose L1 text differs from every earlier one's: the first of those with the same span,
    and of those starting on a line over ``bound`` (their text is a prefix of that line whatever their
    end) the first. Minified code holds thousands of symbols on one line, and each would otherwise be
    one more copy of the same text to embed, store and find."""
    seen: set[tuple[int, int]] = set()
    kept: list[Section] = []
    for s in sections:
        first = s.line_start - 1
        key = (s.line_start, s.line_start if prefix[first + 1] - prefix[first] > bound else s.line_end)
        if key not in seen:
            seen.add(key)
            kept.append(s)
    return kept


def _section_text(
    lines: Sequence[str], prefix: Sequence[int], section: Section, bound: int, count: CountTokens
) -> tuple[str, bool]:
    """A section's lines, or for a huge one a prefix of them within ``bound`` tokens.

    The per-line counts (``prefix``) pick the candidate prefix so that a 5000-line class is never
    counted whole, and a first line over ``bound`` is cut like a long L2 line: real counting stays
    proportional to ``bound`` per section, however long its lines.
    """
    first, last = section.line_start - 1, section.line_end
    if prefix[first + 1] - prefix[first] > bound:
        return line_prefix(lines[first], bound, count, prefix[first + 1] - prefix[first]), True
    fitting = bisect_right(prefix, prefix[first] + bound, lo=first, hi=last + 1) - 1
    if fitting >= last:
        return _bounded_prefix(lines[first:last], bound, count)
    text, _ = _bounded_prefix(lines[first:fitting], bound, count)
    return text, True


def _bounded_prefix(lines: Sequence[str], bound: int, count: CountTokens) -> tuple[str, bool]:
    """The lines' text if within ``bound`` tokens, else its longest fitting prefix of whole lines
    (or :func:`~service.documents.long_lines.line_prefix` of the first, when even it is over) and True."""
    text = "".join(lines)
    if count(text) <= bound:
        return text, False
    lo, hi = 0, len(lines) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count("".join(lines[:mid])) <= bound:
            lo = mid
        else:
            hi = mid - 1
    if lo > 0:
        return "".join(lines[:lo]), True
    return line_prefix(lines[0], bound, count), True


def _summary_chunk(
    path: str,
    language: str,
    line_count: int,
    about: str,
    sections: Sequence[Section],
    count: CountTokens,
    bound: int,
) -> Chunk:
    header = [path, f"{language}, {line_count} lines"]
    if about:
        header.append(about)
    entries = _outline_entries(language, sections)
    if entries:
        header.append("Headings:" if language == "markdown" else "Symbols:")
    text = _fit_summary(header, entries, bound, count)
    return Chunk(
        level=LEVEL_FILE,
        line_start=1,
        line_end=line_count,
        text=text,
        section_title=None,
        breadcrumb=path,
        symbol=None,
        language=language,
    )


def _outline_entries(language: str, sections: Sequence[Section]) -> list[str]:
    """Headings down to level 3 (indented), or top-level symbols with their members' names."""
    if language == "markdown":
        return ["  " * s.depth + "- " + s.label for s in sections if s.depth <= 2]
    members: dict[tuple[str, ...], list[str]] = {}
    for s in sections:
        if s.depth == 1:
            members.setdefault(s.trail[:1], []).append(s.label.rsplit(" ", 1)[-1])
    return [
        s.label + (f": {', '.join(members[s.trail])}" if s.trail in members else "") for s in sections if s.depth == 0
    ]


def _fit_summary(header: list[str], entries: list[str], bound: int, count: CountTokens) -> str:
    """Header plus as many outline entries as fit in ``bound`` tokens, noting how many were left."""
    text = "\n".join([*header, *entries]) + "\n"
    if count(text) <= bound:
        return text
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        candidate = "\n".join([*header, *entries[:mid], f"… {len(entries) - mid} more"]) + "\n"
        if count(candidate) <= bound:
            lo = mid
        else:
            hi = mid - 1
    text = "\n".join([*header, *entries[:lo], f"… {len(entries) - lo} more"]) + "\n"
    prefix, _ = _bounded_prefix(split_lines(text), bound, count)
    return prefix

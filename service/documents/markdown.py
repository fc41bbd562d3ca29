"""Markdown outlines: heading sections, from a line scanner (no Markdown parser needed).

ATX (``#``) and setext (``===`` / ``---``) headings count; fenced code blocks, HTML comments and YAML
front matter hide what they hold. A heading's section runs to the line before the next heading of the
same or a higher level; its trail is the titles of the headings it is under. Lines are those of
:func:`service.documents.languages.split_lines` (1-based, ``"\\r\\n"`` inside a line).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from service.documents.sections import Section

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,}|~{3,})[ \t]*")
_COMMENT_OPEN = re.compile(r" {0,3}<!--")
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
    in_comment = False
    for i in range(start, len(lines)):
        text = lines[i].rstrip("\r\n")
        if fence is not None:
            closing = _FENCE_CLOSE.fullmatch(text)
            if closing and closing.group(1)[0] == fence[0] and len(closing.group(1)) >= len(fence):
                fence = None
            continue
        if in_comment or _COMMENT_OPEN.match(text):
            # An HTML comment (`<!-- old section ... -->`) is raw HTML to its end: no heading inside.
            in_comment = "-->" not in (text if in_comment else text.split("<!--", 1)[1])
            prev_is_paragraph = False
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


def markdown_sections(lines: Sequence[str]) -> list[Section]:
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

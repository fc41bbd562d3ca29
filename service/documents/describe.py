"""The one-paragraph description of a file's L0 summary: a Python module docstring's first paragraph,
or a Markdown file's first paragraph (after front matter, headings, code and HTML), flattened and
clipped to ``DESCRIPTION_CHARS``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

DESCRIPTION_CHARS: Final = 300


def description(language: str, lines: Sequence[str]) -> str:
    """A module docstring (Python) or first paragraph (Markdown), flattened and clipped."""
    paragraph: list[str] = []
    if language == "python":
        paragraph = _python_docstring(lines)
    elif language == "markdown":
        in_paragraph = False
        start = 0
        if lines and lines[0].rstrip() == "---":  # YAML front matter is metadata, not a description
            start = next((i + 1 for i in range(1, len(lines)) if lines[i].rstrip() in ("---", "...")), 0)
        for line in lines[start : start + 200]:
            stripped = line.strip()
            if not stripped:
                if in_paragraph:
                    break
                continue
            if stripped.startswith(("#", "```", "~~~", "<", "!", "[!", "---", "===", "|", ">")):
                if in_paragraph:
                    break
                continue
            in_paragraph = True
            paragraph.append(stripped)
    text = " ".join(" ".join(paragraph).split())
    if len(text) > DESCRIPTION_CHARS:
        text = text[: DESCRIPTION_CHARS - 1].rstrip() + "…"
    return text


def _python_docstring(lines: Sequence[str]) -> list[str]:
    """First paragraph of a module docstring, found without a second ``ast`` parse."""
    for index, line in enumerate(lines[:50]):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        body = stripped.lstrip("rRuUbB")
        quote = body[:3] if body[:3] in ('"""', "'''") else None
        if quote is None:
            return []
        first = body[3:]
        if quote in first:
            return [first.split(quote, 1)[0]]
        out = [first] if first.strip() else []
        for following in lines[index + 1 : index + 40]:
            text = following.strip()
            if quote in text:
                before = text.split(quote, 1)[0]
                return [*out, before] if before else out
            if not text and out:
                return out
            out.append(text)
        return out
    return []

"""Links between the README and docs/ point at files and headings that exist (GitHub's anchor rules)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in prose(path.read_text()):
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading:
            base = slug(heading.group(1))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def test_slug_follows_githubs_rules() -> None:
    assert slug("Planned vs ran: the `retrieval` report") == "planned-vs-ran-the-retrieval-report"
    assert slug("Memory over a soak (`soak.py`)") == "memory-over-a-soak-soakpy"
    assert slug("Rate limits and Redis memory (tenant isolation)") == "rate-limits-and-redis-memory-tenant-isolation"


def test_every_relative_link_resolves() -> None:
    broken: list[str] = []
    for doc in DOCS:
        for line in prose(doc.read_text()):
            for match in LINK.finditer(line):
                target = match["target"]
                if re.match(r"[a-z]+:", target):  # http:, mailto: ...
                    continue
                file_part, _, anchor = target.partition("#")
                path = (doc.parent / file_part).resolve() if file_part else doc
                if not path.exists():
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
                elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                    broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)

"""A file's outline entry (:class:`Section`) and how deep outlines may nest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


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

"""A framework's own object (a LangChain message, an Agents SDK item) kept in a conversation message's
metadata, its long text kept once (pure functions; the adapters use them).

The message's ``content`` is the object's text; the object itself goes in ``metadata[name]``. Its long
strings that the text holds (a message's text, a tool call's arguments, a tool's output) are left out
of it (as null) and put back from the text on read, with where they are in ``metadata[name + "_text"]``
(``[[path, start, end], ...]``), so an object whose text is as long as the service's text limit fits its
metadata limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

ELIDE_MIN: Final = 256
"""Strings shorter than this stay in the metadata (they cost little and keep it readable)."""


def elide(record: Any, text: str) -> tuple[Any, list[list[Any]]]:
    """``record`` without its long strings that ``text`` holds (each left as null), and where each is in ``text``."""
    spans: list[list[Any]] = []

    def walk(node: Any, path: list[str | int]) -> Any:
        if isinstance(node, str):
            start = text.find(node) if len(node) >= ELIDE_MIN else -1
            if start < 0:
                return node
            spans.append([path, start, start + len(node)])
            return None
        if isinstance(node, dict):
            return {k: walk(v, [*path, k]) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, [*path, i]) for i, v in enumerate(node)]
        return node

    return walk(record, []), spans


def restore(record: Any, text: str, spans: list[list[Any]]) -> Any:
    """``record`` with the strings :func:`elide` left out put back from ``text``."""
    for path, start, end in spans:
        node = record
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = text[start:end]
    return record


def keep(name: str, record: Any, text: str) -> dict[str, Any]:
    """The metadata of a message whose ``content`` is ``text`` holding ``record`` under ``name``."""
    kept, spans = elide(record, text)
    return {name: kept, name + "_text": spans} if spans else {name: kept}


def kept(name: str, metadata: Mapping[str, Any], text: str) -> dict[str, Any] | None:
    """The object :func:`keep` put under ``name`` (None: the message holds none, e.g. appended without
    the adapter)."""
    record = metadata.get(name)
    if not isinstance(record, dict):
        return None
    spans = metadata.get(name + "_text")
    return restore(record, text, spans) if isinstance(spans, list) else record

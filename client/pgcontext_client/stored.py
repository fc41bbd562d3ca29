"""A framework's own object (a LangChain message, an Agents SDK item) kept in a conversation message's
metadata, its long text kept once (pure functions; the adapters use them).

The message's ``content`` is the object's text; the object itself goes in ``metadata[name]``. Its long
strings that the text holds (a message's text, a tool call's arguments, a tool's output) are left out
of it (as null) and put back from the text on read, with where they are in ``metadata[name + "_text"]``
(``[[path, start, end], ...]``; ``[path, start, end, "json"]`` where the text holds the string as the
inside of a JSON string literal, quotes and newlines escaped, non-ASCII characters as they are or as
``\\u`` escapes, as in a tool call's JSON arguments), so an object whose text is as long as the
service's text limit fits its metadata limit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

ELIDE_MIN: Final = 256
"""Strings shorter than this stay in the metadata (they cost little and keep it readable)."""
JSON: Final = "json"
"""A span's marker: the text holds the string JSON-escaped."""


def elide(record: Any, text: str) -> tuple[Any, list[list[Any]]]:
    """``record`` without its long strings that ``text`` holds (each left as null), and where each is in ``text``."""
    spans: list[list[Any]] = []

    def walk(node: Any, path: list[str | int]) -> Any:
        if isinstance(node, str):
            if len(node) < ELIDE_MIN:
                return node
            if (start := text.find(node)) >= 0:
                spans.append([path, start, start + len(node)])
                return None
            for escaped in dict.fromkeys((json.dumps(node, ensure_ascii=False)[1:-1], json.dumps(node)[1:-1])):
                if escaped != node and (start := text.find(escaped)) >= 0:
                    spans.append([path, start, start + len(escaped), JSON])
                    return None
            return node
        if isinstance(node, dict):
            return {k: walk(v, [*path, k]) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, [*path, i]) for i, v in enumerate(node)]
        return node

    return walk(record, []), spans


def restore(record: Any, text: str, spans: list[list[Any]]) -> Any:
    """``record`` with the strings :func:`elide` left out put back from ``text``."""
    for path, start, end, *encoding in spans:
        node = record
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = json.loads(f'"{text[start:end]}"') if encoding == [JSON] else text[start:end]
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

"""How a LangGraph item lives in pgcontext as one memory, and the store's matching rules (pure functions).

An item ``(namespace, key) -> value`` is a memory of agent ``namespace[0]`` with kind ``langgraph_item``
(``langgraph_unindexed`` when put with ``index=False``: kept, listed and filtered, never found by a query).
Its metadata holds everything else under ``"langgraph"``: the whole namespace (its labels joined with
``.``, which a label cannot contain), every prefix of it (so a namespace prefix is a JSON containment
filter the service runs), the key, the value and the TTL in minutes. The memory's text, what hybrid
search reads, is the value's indexed fields (the store's or the put's ``index``), else its JSON. The
memory's single-valued ``key`` (:func:`fact_key`) makes the service keep one current memory per item.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from langgraph.store.base import InvalidNamespaceError, MatchCondition, get_text_at_path, tokenize_path

META: Final = "langgraph"
KIND: Final = "langgraph_item"
UNINDEXED_KIND: Final = "langgraph_unindexed"
AGENT_ID: Final = re.compile(r"^[A-Za-z0-9_.:@-]{1,200}$")


def agent_of(namespace: Sequence[str]) -> str:
    """The pgcontext agent an item of ``namespace`` belongs to: its first label."""
    if not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    if not AGENT_ID.match(namespace[0]):
        raise InvalidNamespaceError(
            f"the first namespace label is the pgcontext agent id: 1-200 letters, digits and _:@-, "
            f"got {namespace[0]!r}")
    return namespace[0]


def joined(namespace: Sequence[str]) -> str:
    return ".".join(namespace)


def fact_key(namespace: Sequence[str], key: str) -> str:
    """The memory's single-valued ``key`` (per agent): the service keeps one current memory per item, so
    writers racing to create the same item cannot leave two."""
    digest = hashlib.sha256(json.dumps([list(namespace), key], ensure_ascii=False).encode()).hexdigest()
    return f"langgraph:{digest[:48]}"


def item_metadata(namespace: Sequence[str], key: str, value: Mapping[str, Any], ttl: float | None) -> dict[str, Any]:
    prefixes = [joined(namespace[:depth]) for depth in range(1, len(namespace) + 1)]
    return {META: {"namespace": joined(namespace), "prefixes": prefixes, "key": key, "value": dict(value),
                   "ttl": ttl}}


def item_text(key: str, value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """What search reads: the value's ``fields`` (LangGraph path syntax) one per line, else its JSON; a
    value with none of the fields reads as its key, or as its JSON when the key is blank too (a memory's
    text may not be: LangGraph stores any key, ``""`` included)."""
    everything = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if fields is None or fields == ["$"]:
        return everything
    text = "\n".join(t for path in fields for t in get_text_at_path(dict(value), tokenize_path(path)) if t)
    return next((t for t in (text, key) if t.strip()), everything)


def expiry(ttl: float | None, now: datetime | None = None) -> datetime | None:
    return None if ttl is None else (now or datetime.now(UTC)) + timedelta(minutes=ttl)


def containment(namespace_prefix: Sequence[str], key: str | None = None,
                filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The metadata a memory must contain to be an item under ``namespace_prefix`` (with ``key``), equality
    filters included (the service narrows; :func:`matches` decides)."""
    inner: dict[str, Any] = {}
    if namespace_prefix:
        inner["prefixes"] = [joined(namespace_prefix)]
    if key is not None:
        inner["namespace"], inner["key"] = joined(namespace_prefix), key
    equal = {k: v for k, v in (filter or {}).items() if _service_side(v)}
    if equal:
        inner["value"] = equal
    return {META: inner}


def _service_side(wanted: Any) -> bool:
    return isinstance(wanted, str | bool | int)


def fully_contained(filter: Mapping[str, Any] | None) -> bool:
    """Whether the service runs the whole filter (exact strings, integers and booleans), so :func:`matches`
    drops nothing it returns."""
    return all(_service_side(v) for v in (filter or {}).values())


_OPS: Final[Mapping[str, Callable[[Any, Any], bool]]] = {
    "$eq": operator.eq, "$ne": operator.ne, "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt,
    "$lte": operator.le,
}


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict) and wanted and all(k.startswith("$") for k in wanted):
        for op, operand in wanted.items():
            if op not in _OPS:
                raise ValueError(f"unsupported filter operator {op!r} (use {', '.join(_OPS)})")
            try:
                if not _OPS[op](actual, operand):
                    return False
            except TypeError:  # e.g. None > 3: no match, like a missing field
                return False
        return True
    if isinstance(wanted, dict):
        return isinstance(actual, dict) and all(k in actual and _compare(actual[k], v) for k, v in wanted.items())
    return bool(actual == wanted)


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a LangGraph filter: exact values (nested objects compared field by
    field) and the operators ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``; a missing field is null."""
    return all(_compare(value.get(field), wanted) for field, wanted in (filter or {}).items())


def namespace_matches(namespace: Sequence[str], condition: MatchCondition) -> bool:
    """LangGraph's prefix/suffix match, ``*`` matching any one label."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path, strict=False) if condition.match_type == "prefix" else zip(
        reversed(namespace), reversed(path), strict=False)
    return all(p == "*" or n == p for n, p in pairs)


def list_namespaces(found: set[tuple[str, ...]], conditions: Sequence[MatchCondition] | None,
                    max_depth: int | None, limit: int, offset: int) -> list[tuple[str, ...]]:
    kept = [ns for ns in found if all(namespace_matches(ns, c) for c in conditions or ())]
    shown = sorted({ns[:max_depth] for ns in kept} if max_depth is not None else set(kept))
    return shown[offset:offset + limit]


def fixed_prefix(conditions: Sequence[MatchCondition] | None) -> tuple[str, ...]:
    """The literal labels every listed namespace must start with (before the first wildcard)."""
    for condition in conditions or ():
        if condition.match_type == "prefix":
            labels: list[str] = []
            for label in condition.path:
                if label == "*":
                    break
                labels.append(label)
            return tuple(labels)
    return ()

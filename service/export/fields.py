"""What a bad import line is told: the field it names (``lines[3].importance``), from a check or from
msgspec's own wording of a schema error."""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

MAX_COUNT: Final = 2**31 - 1
"""The most a memory's count can be (no write of the API comes near it)."""
BIGINT_MAX: Final = 2**63 - 1
"""The most a message's position, or a conversation's count, can be: a bigint, as appends write them (they
go on from the last position whatever it is), so a conversation an org holds always imports."""


def line_field(index: int, name: str = "") -> dict[str, str]:
    """An error's ``details``: the line, and the field of it when there is one."""
    return {"field": f"lines[{index}]" + (f".{name}" if name else "")}


_AT: Final = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)|missing required field `([A-Za-z_][A-Za-z0-9_]*)`")
"""The field a line's schema error is about, as msgspec words it (``... - at `$.seen_count```)."""


def schema_field(exc: msgspec.ValidationError) -> str:
    found = _AT.search(str(exc))
    return "" if found is None else found.group(1) or found.group(2)


def has_nul(value: Any) -> bool:
    """A NUL character in any string (key or value) of a JSON value, which Postgres cannot store."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False

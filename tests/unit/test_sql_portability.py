"""The schema and the named queries stay within PostgreSQL 16: no function or syntax that only 17 or 18
has, except the one native ``uuidv7()`` call migration 0001 guards by the server version."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "sql").glob("*/*.sql"), *(ROOT / "migrations").glob("**/*.py")])

NEWER_THAN_16 = {
    # PostgreSQL 18
    "uuidv7/uuidv4": re.compile(r"(?<![\w.])uuidv[47]\(", re.I),
    "casefold": re.compile(r"(?<![\w.])casefold\(", re.I),
    "array_sort/array_reverse": re.compile(r"(?<![\w.])array_(sort|reverse)\(", re.I),
    "crc32/crc32c": re.compile(r"(?<![\w.])crc32c?\(", re.I),
    "OLD/NEW in RETURNING": re.compile(r"RETURNING\s+(OLD|NEW)\b|RETURNING[^;]*\b(OLD|NEW)\.", re.I),
    "virtual generated column": re.compile(r"\)\s*VIRTUAL\b", re.I),
    "NOT ENFORCED": re.compile(r"\bNOT\s+ENFORCED\b", re.I),
    "WITHOUT OVERLAPS / PERIOD": re.compile(r"\bWITHOUT\s+OVERLAPS\b|\bPERIOD\s+\w+\s*\)", re.I),
    # PostgreSQL 17
    "uuid_extract_*": re.compile(r"(?<![\w.])uuid_extract_(timestamp|version)\(", re.I),
    "JSON_TABLE / JSON_QUERY / JSON_VALUE / JSON_EXISTS": re.compile(
        r"(?<![\w.])json_(table|query|value|exists)\(", re.I),
    "MERGE ... RETURNING / merge_action": re.compile(r"(?<![\w.])merge_action\(", re.I),
    "to_bin/to_oct": re.compile(r"(?<![\w.])to_(bin|oct)\(", re.I),
    "transaction_timeout": re.compile(r"\btransaction_timeout\b", re.I),
    "AT LOCAL": re.compile(r"\bAT\s+LOCAL\b", re.I),
}
# The one allowed native call: 0001 (and 0006, which repairs databases from before it) creates
# pgcontext_uuidv7() from it only when server_version_num >= 180000.
GUARDED = re.compile(r"IF current_setting\('server_version_num'\)::int >= 180000 THEN\s+"
                     r"CREATE (?:OR REPLACE )?FUNCTION "
                     r"pgcontext_uuidv7\(\) [^$]*\$fn\$ SELECT uuidv7\(\) \$fn\$;")


def generated_columns_not_stored(text: str) -> list[str]:
    """``GENERATED ALWAYS AS (expr)`` without STORED is a virtual column on 18 and an error before."""
    found = []
    for match in re.finditer(r"GENERATED\s+ALWAYS\s+AS\s*\(", text, re.I):
        depth, end = 1, match.end()
        while depth and end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
        if not re.match(r"\s*STORED\b", text[end:], re.I):
            found.append(text[match.start():end])
    return found


def test_there_are_sources() -> None:
    assert len([p for p in SOURCES if p.suffix == ".sql"]) >= 20
    assert len([p for p in SOURCES if "versions" in p.parts]) >= 4


@pytest.mark.parametrize("path", SOURCES, ids=[str(p.relative_to(ROOT)) for p in SOURCES])
def test_no_feature_newer_than_postgresql_16(path: Path) -> None:
    text = GUARDED.sub("", path.read_text())
    found = {name: m.group(0) for name, pattern in NEWER_THAN_16.items() if (m := pattern.search(text))}
    if virtual := generated_columns_not_stored(text):
        found["generated column without STORED"] = virtual[0]
    assert not found, f"{path.relative_to(ROOT)} uses PostgreSQL 17/18-only features: {found}"


def test_the_checks_see_what_they_look_for() -> None:
    assert generated_columns_not_stored("tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', t)),")
    assert not generated_columns_not_stored("tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', t)) STORED,")
    assert NEWER_THAN_16["OLD/NEW in RETURNING"].search("UPDATE t SET a = 1 RETURNING old.a, new.a")
    assert not NEWER_THAN_16["uuidv7/uuidv4"].search("SELECT pgcontext_uuidv7()")


def test_the_native_call_is_guarded() -> None:
    foundation = (ROOT / "migrations/versions/0001_foundation.py").read_text()
    assert GUARDED.search(foundation)
    assert NEWER_THAN_16["uuidv7/uuidv4"].search(foundation)  # the pattern does see the call it lets through

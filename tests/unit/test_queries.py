"""Named SQL: every file in sql/ loads by its name; bad names fail loudly."""

from __future__ import annotations

import pytest

from service.db.queries import SQL_DIR, all_query_names, query

NAMES = all_query_names()


def test_there_are_queries() -> None:
    assert len(NAMES) >= 20
    for expected in ("memories.insert_batch", "memories.list", "directives.upsert", "auth.resolve_key",
                     "idempotency.claim", "admin.create_key"):
        assert expected in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_query_loads(name: str) -> None:
    text = query(name)
    assert text.strip()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    assert body.split()[0].upper() in {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}, name
    assert query(name) is text  # cached


def test_every_query_is_documented() -> None:
    for name in NAMES:
        assert query(name).lstrip().startswith("--"), f"{name} should open with a comment saying what it does"


@pytest.mark.parametrize("name", ["memories", "memories.", ".get", "memories.nope", "../etc.passwd", "a/b.c"])
def test_bad_names_raise(name: str) -> None:
    with pytest.raises(KeyError):
        query(name)


def test_names_match_files() -> None:
    assert sorted(f"{p.parent.name}.{p.stem}" for p in SQL_DIR.glob("*/*.sql")) == NAMES

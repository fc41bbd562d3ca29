"""Named SQL: every file in sql/ loads by its name; bad names fail loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def test_names_match_the_repository_files() -> None:
    # The installed package (editable here) reads the repository's sql/ folder, file for file.
    repo_sql = Path(__file__).resolve().parents[2] / "sql"
    assert sorted(f"{p.parent.name}.{p.stem}" for p in repo_sql.glob("*/*.sql")) == NAMES
    assert Path(str(SQL_DIR)).resolve() == repo_sql


def test_sql_dir_override(tmp_path: Path) -> None:
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "one.sql").write_text("-- a query\nSELECT 1\n")
    code = ("from service.db.queries import all_query_names, query; "
            "print(all_query_names(), query('demo.one').split()[-1])")
    env = {**os.environ, "PGCONTEXT_SQL_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['demo.one'] 1"

"""Named SQL: every query lives in ``sql/<feature>/<name>.sql`` and is referred to as ``feature.name``.

Files are read lazily and cached; a missing name fails loudly at first use (tests load every query).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

SQL_DIR = Path(os.environ.get("PGCONTEXT_SQL_DIR") or Path(__file__).resolve().parents[2] / "sql")


@functools.cache
def query(name: str) -> str:
    """Return the SQL text of ``feature.name`` (``sql/feature/name.sql``)."""
    feature, _, leaf = name.partition(".")
    if not feature or not leaf or "/" in name or ".." in name:
        raise KeyError(f"bad query name {name!r}; expected 'feature.name'")
    path = SQL_DIR / feature / f"{leaf}.sql"
    try:
        return path.read_text()
    except FileNotFoundError as exc:
        raise KeyError(f"no SQL file for query {name!r} at {path}") from exc


def all_query_names() -> list[str]:
    return sorted(f"{p.parent.name}.{p.stem}" for p in SQL_DIR.glob("*/*.sql"))

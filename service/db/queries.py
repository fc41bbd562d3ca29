"""Named SQL: every query lives in ``sql/<feature>/<name>.sql`` and is referred to as ``feature.name``.

The repository's ``sql/`` folder is installed as the package ``service._sql`` (see pyproject.toml), so
the files are read through :mod:`importlib.resources` the same way from a checkout, an editable install
and a wheel. ``PGCONTEXT_SQL_DIR`` points at another folder instead (e.g. to try changed queries
against an installed service). Files are read lazily and cached; a missing name fails loudly at first
use (tests load every query).
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path


def _sql_dir() -> Traversable:
    override = os.environ.get("PGCONTEXT_SQL_DIR")
    return Path(override) if override else resources.files("service._sql")


SQL_DIR = _sql_dir()


@functools.cache
def query(name: str) -> str:
    """Return the SQL text of ``feature.name`` (``sql/feature/name.sql``)."""
    feature, _, leaf = name.partition(".")
    if not feature or not leaf or "/" in name or ".." in name:
        raise KeyError(f"bad query name {name!r}; expected 'feature.name'")
    path = SQL_DIR / feature / f"{leaf}.sql"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise KeyError(f"no SQL file for query {name!r} at {path}") from exc


def all_query_names() -> list[str]:
    """Every ``feature.name`` that has a file."""
    return sorted(
        f"{feature.name}.{file.name.removesuffix('.sql')}"
        for feature in SQL_DIR.iterdir()
        if feature.is_dir()
        for file in feature.iterdir()
        if file.is_file() and file.name.endswith(".sql")
    )

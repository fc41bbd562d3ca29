"""Serving without migrating: `pgcontext serve --no-migrate` (or PGCONTEXT_MIGRATE_ON_START=false) with
only the service role's DSN, and the refusal when the schema is not at head; the server requirements
every upgrade checks first."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from service.auth import admin
from service.db import guard, migrate
from service.embedded.postgres import free_port
from service.settings import Settings, load_settings
from tests.integration.test_cli import (
    PGCONTEXT,
    ROOT,
    Output,
    clean_env,
    copy_models,
    wait_until_answering,
    with_database,
)
from tests.integration.test_migrations import alembic, revisions
from tests.servers import fresh_database


def app_dsn_for(app_dsn: str, owner_dsn: str) -> str:
    """The session's service-role DSN (its password) pointed at another database."""
    return with_database(app_dsn, urlsplit(owner_dsn).path.lstrip("/"))


def fetchval(dsn: str, sql: str) -> object:
    async def run() -> object:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(run())


def refused(env: dict[str, str], *args: str) -> str:
    result = subprocess.run([*PGCONTEXT, "serve", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, f"{result.stdout}\n{result.stderr}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.slow
def test_serves_with_the_app_dsn_alone(pg_server: str, app_dsn: str, redis_url: str, settings: Settings,
                                       tmp_path: Path) -> None:
    with fresh_database(pg_server) as owner:
        migrate.upgrade(owner)
        issued = asyncio.run(_issue_key(owner))
        data_dir = tmp_path / "data"
        copy_models(settings.data_dir / "models", data_dir / "models")
        port = free_port()
        # No owner DSN anywhere: the service role's DSN is all it gets.
        env = clean_env(PGCONTEXT_APP_DATABASE_URL=app_dsn_for(app_dsn, owner), PGCONTEXT_REDIS_URL=redis_url,
                        PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(port))
        proc = subprocess.Popen([*PGCONTEXT, "serve", "--no-migrate"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        out = Output(proc)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_answering(proc, out, f"{base}/readyz")
            headers = {"Authorization": f"Bearer {issued.key}"}
            r = httpx.post(f"{base}/v1/memories", json={"text": "Served without migrating."}, headers=headers,
                           timeout=30)
            assert r.status_code == 201, r.text
            r = httpx.get(f"{base}/v1/memories/{r.json()['ids'][0]}", headers=headers, timeout=10)
            assert r.status_code == 200 and r.json()["text"] == "Served without migrating."
            assert not (data_dir / "postgres").exists()  # no embedded PostgreSQL was started
            assert "Created org 'default'" not in out.text()  # that needs the owner: not done
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


async def _issue_key(owner: str) -> admin.IssuedKey:
    conn = await asyncpg.connect(owner)
    try:
        await admin.create_org(conn, "no-migrate")
        return await admin.create_key(conn, "no-migrate", "test")
    finally:
        await conn.close()


@pytest.mark.slow
def test_refuses_when_the_schema_is_behind(pg_server: str, app_dsn: str, redis_url: str, tmp_path: Path) -> None:
    chain = revisions()
    with fresh_database(pg_server) as owner:
        migrate.upgrade(owner, chain[-2])
        env = clean_env(PGCONTEXT_APP_DATABASE_URL=app_dsn_for(app_dsn, owner), PGCONTEXT_REDIS_URL=redis_url,
                        PGCONTEXT_DATA_DIR=str(tmp_path / "data"), PGCONTEXT_PORT=str(free_port()))
        for args, extra in ((["--no-migrate"], {}), ([], {"PGCONTEXT_MIGRATE_ON_START": "false"})):
            line = refused({**env, **extra}, *args)
            assert f"is at revision {chain[-2]}" in line and f"needs revision {chain[-1]} (head)" in line, line
            assert "pgcontext migrate" in line and "alembic upgrade head" in line, line
        assert not (tmp_path / "data" / "postgres").exists()

        # Not even migrated: said so, and nothing is created.
    with fresh_database(pg_server) as empty:
        env = clean_env(PGCONTEXT_DATABASE_URL=empty, PGCONTEXT_REDIS_URL=redis_url,
                        PGCONTEXT_DATA_DIR=str(tmp_path / "data"), PGCONTEXT_PORT=str(free_port()))
        line = refused(env, "--no-migrate")
        assert "has no pgcontext schema yet" in line and f"needs revision {chain[-1]}" in line, line
        assert fetchval(empty, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0


def test_every_upgrade_lets_the_app_role_read_the_revision(pg_server: str, app_dsn: str) -> None:
    """A database migrated before the grant existed: the next `alembic upgrade head`, even with nothing
    to migrate, grants it."""
    with fresh_database(pg_server) as owner:
        migrate.upgrade(owner)
        app = app_dsn_for(app_dsn, owner)
        guard.require_head(app)
        fetchval(owner, "REVOKE SELECT ON alembic_version FROM pgcontext_app")
        with pytest.raises(guard.SchemaNotCurrent, match="may not read alembic_version"):
            guard.require_head(app)
        alembic(owner, "upgrade", "head")
        guard.require_head(app)


async def _requirement_error(dsn: str, sql: str) -> asyncpg.PostgresError | None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    except asyncpg.PostgresError as exc:
        return exc
    finally:
        await conn.close()
    return None


def test_upgrades_check_the_server_requirements(pg_server: str) -> None:
    with fresh_database(pg_server) as dsn:
        assert asyncio.run(_requirement_error(dsn, guard.requirements_sql())) is None  # pgvector available
        server = int(str(fetchval(dsn, "SELECT current_setting('server_version_num')")))
        too_old = asyncio.run(_requirement_error(dsn, guard.requirements_sql(min_server=server + 10000)))
        assert isinstance(too_old, asyncpg.FeatureNotSupportedError)
        assert too_old.message.startswith(f"pgcontext needs PostgreSQL {server // 10000 + 1} or newer; "
                                          f"this server is PostgreSQL {server // 10000}")
        no_vector = asyncio.run(_requirement_error(dsn, guard.requirements_sql(min_pgvector=(99, 0))))
        assert isinstance(no_vector, asyncpg.FeatureNotSupportedError)
        assert "needs pgvector 99.0 or newer; this database has only 0." in no_vector.message
        assert "available" in no_vector.message and "ALTER EXTENSION vector UPDATE" in str(no_vector.hint)

        migrate.upgrade(dsn)
        assert asyncio.run(_requirement_error(dsn, guard.requirements_sql())) is None
        installed = asyncio.run(_requirement_error(dsn, guard.requirements_sql(min_pgvector=(0, 99))))
        assert isinstance(installed, asyncpg.FeatureNotSupportedError)
        assert "needs pgvector 0.99 or newer; this database has 0." in installed.message
        assert "installed" in installed.message


def test_check_revision_says_current_and_required() -> None:
    guard.check_revision("0004", ("0004",), {"0001", "0004"})
    with pytest.raises(guard.SchemaNotCurrent, match=r"is at revision 0001; this pgcontext needs revision 0004"):
        guard.check_revision("0001", ("0004",), {"0001", "0004"})
    with pytest.raises(guard.SchemaNotCurrent, match="does not know"):
        guard.check_revision("0099", ("0004",), {"0001", "0004"})


@pytest.mark.parametrize(("value", "expected"), [(None, True), ("false", False), ("0", False), ("true", True)])
def test_migrate_on_start_setting(value: str | None, expected: bool) -> None:
    env = {} if value is None else {"PGCONTEXT_MIGRATE_ON_START": value}
    assert load_settings(env).database.migrate_on_start is expected


def test_an_old_pgvector_stops_the_upgrade_before_any_change(pg_server: str, tmp_path: Path) -> None:
    """A database whose pgvector says 0.7.4 (the catalog row an old install leaves; this server only has
    0.8): the real `alembic upgrade head` and the offline script in psql both stop at the check."""
    from tests.integration.test_migrations_offline import offline_script, psql

    with fresh_database(pg_server) as dsn:
        fetchval(dsn, "CREATE EXTENSION vector")
        fetchval(dsn, "UPDATE pg_extension SET extversion = '0.7.4' WHERE extname = 'vector'")
        exe = shutil.which("alembic", path=str(Path(sys.executable).parent)) or "alembic"
        env = clean_env()
        result = subprocess.run([exe, "-x", f"dsn={dsn}", "upgrade", "head"], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode != 0
        assert ("error: pgcontext needs pgvector 0.8 or newer; this database has 0.7.4 installed. "
                "Install pgvector 0.8+ on the server, then ALTER EXTENSION vector UPDATE") in result.stderr
        assert "Traceback" not in result.stderr, result.stderr

        script = tmp_path / "upgrade.sql"
        script.write_text(offline_script("upgrade", "head"))
        applied = subprocess.run([psql(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(script)],
                                 capture_output=True, text=True, timeout=120)
        assert applied.returncode != 0 and "pgcontext needs pgvector 0.8 or newer" in applied.stderr
        assert fetchval(dsn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == 0

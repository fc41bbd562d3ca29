"""Operator commands run as a user runs them (a subprocess): ``orgs list``, ``keys list``, ``config``."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator

import asyncpg
import pytest

from service.auth import admin
from service.cli.config_reference import reference
from service.db import migrate
from tests.integration.test_cli import clean_env, run
from tests.servers import fresh_database


@pytest.fixture(scope="module")
def ops_db(pg_server: str) -> Iterator[str]:
    with fresh_database(pg_server) as dsn:
        yield dsn


def test_lists_need_the_schema(ops_db: str) -> None:
    result = run(clean_env(PGCONTEXT_DATABASE_URL=ops_db), "orgs", "list", ok=False)
    assert result.returncode == 2 and "pgcontext migrate" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


async def make_orgs_and_keys(dsn: str) -> list[str]:
    """Set up in-process (``orgs create`` and ``keys create`` have their own CLI tests in test_cli)."""
    conn = await asyncpg.connect(dsn)
    try:
        for name in ("alpha", "beta"):
            await admin.create_org(conn, name)
        keys = [(await admin.create_key(conn, "alpha", label)).key for label in ("ci", "laptop")]
        await admin.create_key(conn, "beta")
        await admin.revoke_key(conn, keys[1])
    finally:
        await conn.close()
    return keys


def test_orgs_and_keys_lists_never_show_a_secret(ops_db: str) -> None:
    env = clean_env(PGCONTEXT_DATABASE_URL=ops_db)
    migrate.upgrade(ops_db)
    keys = asyncio.run(make_orgs_and_keys(ops_db))

    table = run(env, "orgs", "list").stdout
    assert table.splitlines()[0].split() == ["NAME", "ID", "CREATED", "KEYS", "REVOKED", "MEMORIES", "DOC_CHUNKS"]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert rows["alpha"][3:] == ["1", "1", "0", "0"] and rows["beta"][3:] == ["1", "0", "0", "0"]
    orgs = {o["name"]: o for o in json.loads(run(env, "orgs", "list", "--json").stdout)}
    assert set(orgs) == {"alpha", "beta"} and orgs["alpha"]["id"] == rows["alpha"][1]

    listed = run(env, "keys", "list", "--org", "alpha")
    as_json = json.loads(run(env, "keys", "list", "--org", "alpha", "--json").stdout)
    assert [k["name"] for k in as_json] == ["ci", "laptop"]
    assert as_json[0]["revoked_at"] is None and as_json[1]["revoked_at"] is not None
    assert as_json[0]["last_used_at"] is None  # never used yet: shown as such, not invented
    assert set(as_json[0]) == {"id", "prefix", "name", "created_at", "last_used_at", "revoked_at"}
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["KEY_ID", "PREFIX", "LABEL", "CREATED", "LAST_USED", "REVOKED"]
    assert [line.split()[0] for line in lines[1:]] == [k["id"] for k in as_json]
    for key in keys:
        digest = hashlib.sha256(key.encode()).digest()
        for output in (listed.stdout, json.dumps(as_json)):
            assert key not in output and key[:20] not in output
            assert digest.hex() not in output and digest.hex()[:16] not in output

    missing = run(env, "keys", "list", "--org", "nope", ok=False)
    assert missing.returncode == 2 and "no org named" in missing.stderr


def test_config_shows_every_setting_with_secrets_masked() -> None:
    secrets = {"PGCONTEXT_DATABASE_URL": "postgresql://owner:Own3r-pw@db.internal:5432/pgc?sslmode=require",
               "PGCONTEXT_APP_DATABASE_URL": "host=db user=pgcontext_app password=App-pw-9 dbname=pgc",
               "PGCONTEXT_APP_ROLE_PASSWORD": "Role-pw-7",
               "PGCONTEXT_REDIS_URL": "redis://:Redis-pw-3@cache:6379/0",
               "PGCONTEXT_EMBEDDING_API_KEY": "sk-live-abcdef123456"}
    env = clean_env(**secrets, PGCONTEXT_DEADLINE_MS="55")
    out = run(env, "config").stdout
    for value in ("Own3r-pw", "App-pw-9", "Role-pw-7", "Redis-pw-3", "sk-live-abcdef123456"):
        assert value not in out
    assert "PGCONTEXT_DATABASE_URL=postgresql://owner:****@db.internal:5432/pgc?sslmode=require" in out
    assert "PGCONTEXT_APP_DATABASE_URL=host=db user=pgcontext_app password=**** dbname=pgc" in out
    assert "PGCONTEXT_REDIS_URL=redis://:****@cache:6379/0" in out
    assert "PGCONTEXT_EMBEDDING_API_KEY=****" in out
    lines = {line.split("=", 1)[0]: line for line in out.splitlines() if line.startswith("PGCONTEXT_")}
    assert lines["PGCONTEXT_DEADLINE_MS"].split()[0] == "PGCONTEXT_DEADLINE_MS=55"
    assert lines["PGCONTEXT_DEADLINE_MS"].endswith("# environment")
    assert lines["PGCONTEXT_PORT"].endswith("# default")
    every = {doc.env[0] for doc in reference() if doc.env}
    assert set(lines) == every
    assert "limits.max_request_bytes=8388608" in out  # fixed settings are shown too

    as_json = json.loads(run(env, "config", "--json").stdout)
    assert {row["env"] for row in as_json if row["env"]} == every
    assert not any(secret in json.dumps(as_json) for secret in secrets.values())

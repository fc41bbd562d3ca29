"""Operator commands run as a user runs them (a subprocess): ``orgs list``, ``keys list``, ``keys revoke``,
``config``."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from uuid import UUID, uuid4

import asyncpg
import pytest

from service.auth import admin
from service.auth.keys import display_prefix, hash_key, new_key
from service.cli.config_reference import reference
from service.db import migrate
from service.db.queries import query
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



async def add_key(conn: asyncpg.Connection, org: str, key: str) -> UUID:
    """Store ``key`` for ``org`` as ``keys create`` would (a chosen key: two can share a display prefix)."""
    return UUID(str(await conn.fetchval(query("admin.create_key"), await admin.org_id_by_name(conn, org),
                                        hash_key(key), display_prefix(key), None)))


async def revoked(conn: asyncpg.Connection, key_id: UUID) -> bool:
    return bool(await conn.fetchval("SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1", key_id))


async def test_revoke_by_key_id_key_or_the_display_prefix(owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        orgs = [f"revoke-{uuid4().hex[:8]}" for _ in range(2)]
        for org in orgs:
            await admin.create_org(conn, org)
        issued = [await admin.create_key(conn, orgs[0]) for _ in range(3)]
        assert await admin.revoke_key(conn, issued[0].key[:10] + "…") == issued[0].key_id
        assert await admin.revoke_key(conn, issued[1].key[:10]) == issued[1].key_id
        assert await admin.revoke_key(conn, issued[2].key) == issued[2].key_id
        with pytest.raises(admin.AdminError, match="no active key"):
            await admin.revoke_key(conn, issued[0].key[:10])

        # Two active keys, one per org, share a prefix: refused naming both, neither revoked.
        shared = new_key()
        ids = [await add_key(conn, orgs[1], shared), await add_key(conn, orgs[0], shared[:10] + new_key()[10:])]
        with pytest.raises(admin.AdminError) as refused:
            await admin.revoke_key(conn, shared[:10] + "…")
        assert "key id" in str(refused.value) and all(str(i) in str(refused.value) for i in ids)
        assert not await revoked(conn, ids[0]) and not await revoked(conn, ids[1])
        assert await admin.revoke_key(conn, str(ids[0])) == ids[0]
        assert await admin.revoke_key(conn, shared[:10]) == ids[1]  # the only active key left with it
    finally:
        await conn.close()


def test_keys_revoke_takes_the_prefix_keys_list_shows(pg_server: str) -> None:
    async def new_key(dsn: str) -> admin.IssuedKey:
        conn = await asyncpg.connect(dsn)
        try:
            await admin.create_org(conn, "epsilon")
            return await admin.create_key(conn, "epsilon", "to revoke")
        finally:
            await conn.close()

    with fresh_database(pg_server) as dsn:
        env = clean_env(PGCONTEXT_DATABASE_URL=dsn)
        migrate.upgrade(dsn)
        issued = asyncio.run(new_key(dsn))
        row = next(line.split() for line in run(env, "keys", "list", "--org", "epsilon").stdout.splitlines()
                   if line.startswith(str(issued.key_id)))
        out = run(env, "keys", "revoke", row[1])  # as copied from the table, ellipsis included
        assert row[1] == issued.key[:10] + "…" and out.stdout.strip() == f"revoked key {issued.key_id}", out
    usage = run(env, "keys", "revoke", "--help").stdout
    assert "key id" in usage and "prefix" in usage and "keys list" in usage


def test_org_names_differ_by_more_than_case(pg_server: str) -> None:
    """Once "acme" exists, "Acme" is refused (it was a second org an operator took for the first), and a
    lookup of the wrong case names the org there is."""
    with fresh_database(pg_server) as dsn:
        env = clean_env(PGCONTEXT_DATABASE_URL=dsn)
        migrate.upgrade(dsn)
        run(env, "orgs", "create", "acme")
        refused = run(env, "orgs", "create", "Acme", ok=False)
        assert refused.returncode != 0 and "an org named 'acme' already exists" in refused.stderr, refused.stderr
        missed = run(env, "keys", "create", "--org", "ACME", ok=False)
        assert missed.returncode != 0 and "no org named 'ACME' (there is 'acme')" in missed.stderr, missed.stderr
        assert [line.split()[0] for line in run(env, "orgs", "list").stdout.splitlines()[1:]] == ["acme"]

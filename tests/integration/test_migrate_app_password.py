"""``pgcontext migrate`` with ``PGCONTEXT_APP_ROLE_PASSWORD`` sets the service role's password, so a
service given only ``pgcontext_app``'s DSN (docker-compose.yml's ``serve --no-migrate``) can log in."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import Iterator

import asyncpg
import pytest

from service.db.migrate import APP_ROLE
from tests.integration.test_cli import clean_env, run
from tests.servers import fresh_database


def scram_matches(verifier: str, password: str) -> bool:
    """Whether a PostgreSQL ``SCRAM-SHA-256$iterations:salt$StoredKey:ServerKey`` verifier is ``password``'s."""
    method, iterations_salt, keys = verifier.split("$")
    assert method == "SCRAM-SHA-256", verifier
    iterations, salt = iterations_salt.split(":")
    stored_key = base64.b64decode(keys.split(":")[0])
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    return hmac.compare_digest(hashlib.sha256(client_key).digest(), stored_key)


async def _fetch_verifier(dsn: str) -> str | None:
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname = $1", APP_ROLE)
        return value if isinstance(value, str) else None
    finally:
        await conn.close()


async def _restore_verifier(dsn: str, verifier: str | None) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        # ALTER ROLE takes an already-hashed verifier as is; NULL clears the password.
        literal = "NULL" if verifier is None else await conn.fetchval("SELECT quote_literal($1::text)", verifier)
        await conn.execute(f"ALTER ROLE {APP_ROLE} PASSWORD {literal}")
    finally:
        await conn.close()


@pytest.fixture
def empty_db(pg_server: str) -> Iterator[str]:
    # The role is cluster-wide: put its password back for the other tests' connections.
    with fresh_database(pg_server) as dsn:
        before = asyncio.run(_fetch_verifier(dsn))
        try:
            yield dsn
        finally:
            asyncio.run(_restore_verifier(dsn, before))


def test_migrate_sets_the_app_role_password(empty_db: str) -> None:
    password = "compose-app-password-1"
    run(clean_env(PGCONTEXT_DATABASE_URL=empty_db, PGCONTEXT_APP_ROLE_PASSWORD=password), "migrate")
    verifier = asyncio.run(_fetch_verifier(empty_db))
    assert verifier is not None and scram_matches(verifier, password)
    assert not scram_matches(verifier, "another-password")

    # Without the setting, migrate leaves the password alone.
    run(clean_env(PGCONTEXT_DATABASE_URL=empty_db), "migrate")
    assert asyncio.run(_fetch_verifier(empty_db)) == verifier

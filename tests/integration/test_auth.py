"""Bearer-key authentication: every missing, malformed, unknown or revoked key is a 401."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.auth import admin
from tests.conftest import Tenant

PROTECTED = [
    ("GET", "/v1/memories"),
    ("POST", "/v1/memories"),
    ("GET", "/v1/memories/00000000-0000-7000-8000-000000000000"),
    ("PATCH", "/v1/memories/00000000-0000-7000-8000-000000000000"),
    ("DELETE", "/v1/memories/00000000-0000-7000-8000-000000000000"),
    ("GET", "/v1/agents/a1/directive"),
    ("PUT", "/v1/agents/a1/directive"),
    ("DELETE", "/v1/agents/a1/directive"),
]

BAD_HEADERS: list[tuple[str, dict[str, str]]] = [
    ("missing", {}),
    ("empty", {"Authorization": ""}),
    ("wrong scheme", {"Authorization": "Basic dXNlcjpwYXNz"}),
    ("scheme only", {"Authorization": "Bearer"}),
    ("blank token", {"Authorization": "Bearer    "}),
    ("invalid key", {"Authorization": "Bearer pgc_this-key-was-never-issued"}),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
@pytest.mark.parametrize("headers", [h for _, h in BAD_HEADERS], ids=[n for n, _ in BAD_HEADERS])
async def test_bad_credentials_are_401(client: AsyncTestClient[Any], method: str, path: str,
                                       headers: dict[str, str]) -> None:
    body = {"content": "x"} if "directive" in path else {"text": "x"}
    r = await client.request(method, path, headers=headers, json=body if method in ("POST", "PUT", "PATCH") else None)
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized"
    # RFC 6750: the challenge names the scheme; a key that was sent and refused is an invalid_token.
    sent_a_key = headers.get("Authorization", "").lower().startswith("bearer pgc_")
    assert r.headers["WWW-Authenticate"] == (
        'Bearer realm="pgcontext", error="invalid_token"' if sent_a_key else 'Bearer realm="pgcontext"')


async def test_scheme_is_case_insensitive(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.get("/v1/memories", headers={"Authorization": f"bearer {tenant.key}"})
    assert r.status_code == 200


async def test_revoked_key_is_401(client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    r = await client.post("/v1/memories", json={"text": "written before revocation"}, headers=tenant.headers)
    assert r.status_code == 201
    conn = await asyncpg.connect(owner_dsn)
    try:
        await admin.revoke_key(conn, tenant.key)
        with pytest.raises(admin.AdminError):
            await admin.revoke_key(conn, tenant.key)  # already revoked
        # The org's other keys keep working.
        second = await admin.create_key(conn, tenant.name, "second")
    finally:
        await conn.close()
    r = await client.get("/v1/memories", headers=tenant.headers)  # the settings fixture caches keys for 0 s
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="pgcontext", error="invalid_token"'
    r = await client.get("/v1/memories", headers={"Authorization": f"Bearer {second.key}"})
    assert r.status_code == 200 and len(r.json()["items"]) == 1


async def test_revoke_by_key_id(client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        issued = await admin.create_key(conn, tenant.name)
        assert (await client.get("/v1/memories", headers={"Authorization": f"Bearer {issued.key}"})).status_code == 200
        assert await admin.revoke_key(conn, str(issued.key_id)) == issued.key_id
        stored = await conn.fetchrow("SELECT key_hash, prefix FROM api_keys WHERE id = $1", issued.key_id)
    finally:
        await conn.close()
    assert (await client.get("/v1/memories", headers={"Authorization": f"Bearer {issued.key}"})).status_code == 401
    # Only a hash and a short display prefix are stored, never the key.
    assert stored is not None and issued.key.encode() not in bytes(stored["key_hash"])
    assert issued.key.startswith(stored["prefix"]) and len(stored["prefix"]) < len(issued.key) // 2

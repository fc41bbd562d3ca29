"""Org and key management, run by the CLI as the owner role (the service role cannot do this)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg

from service.auth.keys import display_prefix, hash_key, new_key
from service.db.queries import query


@dataclass(frozen=True)
class IssuedKey:
    org_id: UUID
    key_id: UUID
    key: str


class AdminError(Exception):
    pass


async def create_org(conn: asyncpg.Connection, name: str) -> UUID:
    try:
        return UUID(str(await conn.fetchval(query("admin.create_org"), name)))
    except asyncpg.UniqueViolationError as exc:
        raise AdminError(f"an org named {name!r} already exists") from exc


async def org_id_by_name(conn: asyncpg.Connection, name: str) -> UUID:
    value = await conn.fetchval(query("admin.org_by_name"), name)
    if value is None:
        raise AdminError(f"no org named {name!r}")
    return UUID(str(value))


async def create_key(conn: asyncpg.Connection, org_name: str, key_name: str | None = None) -> IssuedKey:
    org_id = await org_id_by_name(conn, org_name)
    key = new_key()
    key_id = await conn.fetchval(query("admin.create_key"), org_id, hash_key(key), display_prefix(key), key_name)
    return IssuedKey(org_id=org_id, key_id=UUID(str(key_id)), key=key)


async def revoke_key(conn: asyncpg.Connection, key_or_id: str) -> UUID:
    """Revoke by key id (uuid) or by the key itself."""
    try:
        key_id: UUID | None = UUID(key_or_id)
        key_hash = None
    except ValueError:
        key_id, key_hash = None, hash_key(key_or_id)
    revoked = await conn.fetchval(query("admin.revoke_key"), key_id, key_hash)
    if revoked is None:
        raise AdminError("no such active key")
    return UUID(str(revoked))


async def ensure_default_org(conn: asyncpg.Connection) -> IssuedKey | None:
    """On a first start (no orgs at all), create the ``default`` org and a key for it (once, also when
    several instances start together)."""
    async with conn.transaction():
        await conn.execute(query("admin.first_start_lock"))
        if await conn.fetchval(query("admin.any_org")):
            return None
        await create_org(conn, "default")
        return await create_key(conn, "default", "initial key")

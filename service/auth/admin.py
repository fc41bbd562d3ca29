"""Org and key management, run by the CLI as the owner role (the service role cannot do this)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import asyncpg

from service.auth.keys import as_display_prefix, display_prefix, hash_key, new_key
from service.db.queries import query


@dataclass(frozen=True)
class IssuedKey:
    org_id: UUID
    key_id: UUID
    key: str


class AdminError(Exception):
    pass


async def create_org(conn: asyncpg.Connection, name: str) -> UUID:
    """A new org; AdminError when one of that name exists, however its letters are cased ("Acme" beside
    "acme" would be two orgs an operator takes for one)."""
    try:
        value = await conn.fetchval(query("admin.create_org"), name)
    except asyncpg.UniqueViolationError as exc:  # created at the same moment by another command
        raise AdminError(f"an org named {name!r} already exists") from exc
    if value is None:
        held = await conn.fetchval(query("admin.org_by_name_any_case"), name)
        raise AdminError(f"an org named {held!r} already exists (org names are compared regardless of case)")
    return UUID(str(value))


async def org_id_by_name(conn: asyncpg.Connection, name: str) -> UUID:
    value = await conn.fetchval(query("admin.org_by_name"), name)
    if value is None:
        held = await conn.fetchval(query("admin.org_by_name_any_case"), name)
        raise AdminError(f"no org named {name!r}" + (f" (there is {held!r})" if held is not None else ""))
    return UUID(str(value))


@dataclass(frozen=True)
class OrgContents:
    """What deleting an org takes with it."""
    active_keys: int
    memories: int
    document_chunks: int
    conversations: int
    directives: int

    def summary(self) -> str:
        return (f"{self.active_keys} active key(s), {self.memories} memories, {self.document_chunks} document "
                f"chunk(s), {self.conversations} conversation(s), {self.directives} directive(s)")


async def org_contents(conn: asyncpg.Connection, org_id: UUID) -> OrgContents:
    row = await conn.fetchrow(query("admin.org_contents"), org_id)
    assert row is not None
    return OrgContents(**{name: int(value) for name, value in dict(row).items()})


async def revoke_org_keys(conn: asyncpg.Connection, org_id: UUID) -> int:
    return int(await conn.fetchval(query("admin.revoke_org_keys"), org_id))


async def delete_org(conn: asyncpg.Connection, org_id: UUID) -> bool:
    """Delete the org and everything it holds, in one transaction: its memories first (their delete
    trigger needs the org's term statistics), then its row, which every other table's ``org_id`` foreign
    key follows."""
    async with conn.transaction():
        await conn.execute(query("admin.delete_org_memories"), org_id)
        return await conn.fetchval(query("admin.delete_org"), org_id) is not None


async def create_key(conn: asyncpg.Connection, org_name: str, key_name: str | None = None) -> IssuedKey:
    org_id = await org_id_by_name(conn, org_name)
    key = new_key()
    key_id = await conn.fetchval(query("admin.create_key"), org_id, hash_key(key), display_prefix(key), key_name)
    return IssuedKey(org_id=org_id, key_id=UUID(str(key_id)), key=key)


async def revoke_key(conn: asyncpg.Connection, key_or_id: str) -> UUID:
    """Revoke by key id (uuid), by the key itself, or by the display prefix ``keys list`` shows (with or
    without its ellipsis) when exactly one active key, in any org, has it."""
    text = key_or_id.strip()
    key_id: UUID | None = None
    key_hash: bytes | None = None
    try:
        key_id = UUID(text)
    except ValueError:
        prefix = as_display_prefix(text)
        if prefix is None:
            key_hash = hash_key(text)
        else:
            key_id = await _only_active_key_with_prefix(conn, prefix)
    revoked = await conn.fetchval(query("admin.revoke_key"), key_id, key_hash)
    if revoked is None:
        raise AdminError("no active key with that key, key id or prefix")
    return UUID(str(revoked))


async def _only_active_key_with_prefix(conn: asyncpg.Connection, prefix: str) -> UUID:
    rows = await conn.fetch(query("admin.active_keys_by_prefix"), prefix)
    if not rows:
        raise AdminError(f"no active key has the prefix {prefix}")
    if len(rows) > 1:
        found = ", ".join(f"{r['id']} (org {r['org_name']!r})" for r in rows)
        raise AdminError(f"{len(rows)} active keys have the prefix {prefix}: {found}; revoke one by its key id")
    return UUID(str(rows[0]["id"]))


async def ensure_default_org(conn: asyncpg.Connection) -> IssuedKey | None:
    """On a first start (no orgs at all), create the ``default`` org and a key for it (once, also when
    several instances start together)."""
    async with conn.transaction():
        await conn.execute(query("admin.first_start_lock"))
        if await conn.fetchval(query("admin.any_org")):
            return None
        await create_org(conn, "default")
        return await create_key(conn, "default", "initial key")

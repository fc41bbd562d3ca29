"""UUIDv7 ids on PostgreSQL 16-18: the portable SQL implementation (what 16 and 17 use), checked
on the test server directly, and the switch in migration 0001 that picks it or the native one."""

from __future__ import annotations

import importlib.util
import time
import uuid
from pathlib import Path
from types import ModuleType

import asyncpg

ROOT = Path(__file__).resolve().parents[2]
N = 20_000


def foundation() -> ModuleType:
    spec = importlib.util.spec_from_file_location("foundation_0001", ROOT / "migrations/versions/0001_foundation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def unix_ms(value: uuid.UUID) -> int:
    return int.from_bytes(value.bytes[:6], "big")


def assert_v7_layout(ids: list[uuid.UUID]) -> None:
    assert all(u.version == 7 for u in ids)
    assert all(u.variant == uuid.RFC_4122 for u in ids)  # the two variant bits are 10


async def test_portable_uuidv7(owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        before_ms = int(time.time() * 1000)
        rows = await conn.fetch(
            "SELECT pgcontext_uuidv7_portable() AS id FROM generate_series(1, $1) WITH ORDINALITY AS g(n, ord) "
            "ORDER BY ord", N)
        after_ms = int(time.time() * 1000)
        ids: list[uuid.UUID] = [r["id"] for r in rows]
        assert_v7_layout(ids)
        assert len(set(ids)) == N
        # The first 48 bits are the generation time in ms; the next 16 (version + 12 bits of
        # sub-millisecond time) keep ids from one session in creation order, to the microsecond.
        assert all(before_ms - 5 <= unix_ms(u) <= after_ms + 5 for u in ids)
        prefixes = [u.bytes[:8] for u in ids]
        assert prefixes == sorted(prefixes)
        assert unix_ms(ids[-1]) > unix_ms(ids[0])  # 20,000 calls span more than one millisecond
        # The random part really varies (62 bits: no two equal among 20,000).
        assert len({u.bytes[8:] for u in ids}) == N

        first = await conn.fetchval("SELECT pgcontext_uuidv7_portable()")
        await conn.execute("SELECT pg_sleep(0.002)")
        second = await conn.fetchval("SELECT pgcontext_uuidv7_portable()")
        assert first < second and unix_ms(second) - unix_ms(first) >= 2
    finally:
        await conn.close()


async def test_the_wrapper_uses_native_uuidv7_on_18_and_the_portable_one_below(owner_dsn: str) -> None:
    module = foundation()
    conn = await asyncpg.connect(owner_dsn)
    try:
        assert await conn.fetchval("SELECT current_setting('server_version_num')::int") >= 180000
        assert "uuidv7()" in await conn.fetchval("SELECT prosrc FROM pg_proc WHERE proname = 'pgcontext_uuidv7'")
        # The same DO block with the version switch moved past this server: the PostgreSQL 16/17 branch,
        # in a scratch schema that is rolled back.
        scratch = conn.transaction()
        await scratch.start()
        try:
            await conn.execute("CREATE SCHEMA below_18; SET LOCAL search_path = below_18, public")
            await conn.execute(module.UUIDV7_PORTABLE)
            await conn.execute(module.UUIDV7.replace(">= 180000", ">= 990000"))
            body = await conn.fetchval(
                "SELECT prosrc FROM pg_proc WHERE oid = 'below_18.pgcontext_uuidv7()'::regprocedure")
            assert "pgcontext_uuidv7_portable()" in body and "SELECT uuidv7()" not in body
            ids = [r[0] for r in await conn.fetch("SELECT below_18.pgcontext_uuidv7() FROM generate_series(1, 100)")]
            assert_v7_layout(ids)
            assert len(set(ids)) == 100
        finally:
            await scratch.rollback()
    finally:
        await conn.close()


async def test_tables_default_to_uuidv7(owner_dsn: str) -> None:
    conn = await asyncpg.connect(owner_dsn)
    try:
        defaults = await conn.fetch(
            "SELECT table_name, column_default FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name = 'id' AND column_default IS NOT NULL")
        assert {r["table_name"] for r in defaults} >= {"orgs", "api_keys", "memories"}
        assert all(r["column_default"] == "pgcontext_uuidv7()" for r in defaults)
        scratch = conn.transaction()
        await scratch.start()
        try:
            org = await conn.fetchval("INSERT INTO orgs (name) VALUES ('uuidv7-default') RETURNING id")
            assert org.version == 7
        finally:
            await scratch.rollback()
    finally:
        await conn.close()

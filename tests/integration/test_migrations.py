"""The schema through the real ``alembic`` CLI, as a DBA would run it: up, down to base, up again."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg

from tests.servers import fresh_database

ROOT = Path(__file__).resolve().parents[2]
FOUNDATION_TABLES = {"orgs", "api_keys", "memories", "directives", "idempotency_keys"}


def alembic(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("alembic", path=str(Path(sys.executable).parent)) or "alembic"
    env = {k: v for k, v in os.environ.items() if k not in ("PGCONTEXT_DATABASE_URL", "DATABASE_URL")}
    result = subprocess.run([exe, "-x", f"dsn={dsn}", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return result


async def _schema(dsn: str) -> tuple[set[str], set[str], str | None]:
    conn = await asyncpg.connect(dsn)
    try:
        tables = {r[0] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'")}
        extensions = {r[0] for r in await conn.fetch("SELECT extname FROM pg_extension")}
        version = None
        if await conn.fetchval("SELECT to_regclass('public.alembic_version') IS NOT NULL"):
            version = await conn.fetchval("SELECT version_num FROM alembic_version")
        return tables, extensions, version
    finally:
        await conn.close()


async def _indexes(dsn: str) -> dict[str, str]:
    conn = await asyncpg.connect(dsn)
    try:
        return {r[0]: r[1] for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories'")}
    finally:
        await conn.close()


def test_upgrade_downgrade_upgrade(pg_server: str) -> None:
    with fresh_database(pg_server) as dsn:
        assert asyncio.run(_schema(dsn))[0] == set()

        alembic(dsn, "upgrade", "head")
        tables, extensions, version = asyncio.run(_schema(dsn))
        assert tables >= FOUNDATION_TABLES and "vector" in extensions and version is not None
        head = alembic(dsn, "heads").stdout.split()[0]
        assert version == head
        indexes = asyncio.run(_indexes(dsn))
        assert any("hnsw" in d and "vector_cosine_ops" in d for d in indexes.values())
        assert any("gin" in d and "tsv" in d for d in indexes.values())
        assert any("(org_id, agent_id, created_at" in d for d in indexes.values())

        alembic(dsn, "downgrade", "base")
        tables, extensions, version = asyncio.run(_schema(dsn))
        assert tables == set() and "vector" not in extensions and version is None

        alembic(dsn, "upgrade", "head")
        tables, _, version = asyncio.run(_schema(dsn))
        assert tables >= FOUNDATION_TABLES and version == head

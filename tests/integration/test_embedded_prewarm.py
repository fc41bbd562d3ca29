"""The embedded PostgreSQL is not cold after a restart, and its buffers are sized for the machine.

``pg_prewarm``'s autoprewarm is preloaded: the block list of ``shared_buffers`` is saved at shutdown
and read back in the background after the next start (at 100K memories, the first single assemblies
after a restart otherwise ran light or timed out while the cache filled). These tests start real
servers from the wheel and look into the buffer cache with ``pg_buffercache``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from service.cli.servers import owner_dsn
from service.embedded.postgres import EmbeddedPostgres, default_shared_buffers_mb
from service.settings import load_settings

TABLE_ROWS = 20_000


async def _fetchval(dsn: str, sql: str) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql)
    finally:
        await conn.close()


async def _cached_blocks(dsn: str) -> tuple[int, int]:
    """Blocks of table ``warm`` in shared buffers, and the table's size in blocks."""
    conn = await asyncpg.connect(dsn)
    try:
        cached = await conn.fetchval(
            "SELECT count(*) FROM pg_buffercache b JOIN pg_class c ON b.relfilenode = pg_relation_filenode(c.oid) "
            "WHERE c.relname = 'warm' AND b.reldatabase = (SELECT oid FROM pg_database "
            "WHERE datname = current_database())")
        pages = await conn.fetchval("SELECT pg_relation_size('warm') / current_setting('block_size')::int")
        return int(cached), int(pages)
    finally:
        await conn.close()


def test_buffers_read_before_a_restart_are_back_after_it(tmp_path: Path) -> None:
    pg = EmbeddedPostgres(tmp_path / "postgres", shared_buffers="32MB", max_connections=20)
    pg.start()
    try:
        async def fill() -> None:
            conn = await asyncpg.connect(pg.dsn())
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
                await conn.execute("CREATE TABLE warm AS SELECT g AS id, repeat('x', 100) AS pad "
                                   f"FROM generate_series(1, {TABLE_ROWS}) g")
                await conn.fetchval("SELECT count(*) FROM warm")  # smaller than a ring: read into shared buffers
            finally:
                await conn.close()

        asyncio.run(fill())
        before, pages = asyncio.run(_cached_blocks(pg.dsn()))
        assert pages > 100 and before >= pages * 0.9, (before, pages)
    finally:
        pg.stop()
    assert (pg.pgdata / "autoprewarm.blocks").stat().st_size > 0  # the block list, saved at shutdown

    pg.start()
    try:
        # Nothing reads the table after the start: only autoprewarm puts its blocks back.
        deadline = time.monotonic() + 30
        cached = 0
        while time.monotonic() < deadline:
            cached, pages = asyncio.run(_cached_blocks(pg.dsn()))
            if cached >= pages * 0.9:
                break
            time.sleep(0.2)
        assert cached >= pages * 0.9, f"{cached} of {pages} blocks back in shared buffers after the restart"
        preloaded = asyncio.run(_fetchval(pg.dsn(), "SHOW shared_preload_libraries"))
        assert "pg_prewarm" in str(preloaded)
    finally:
        pg.stop()


@pytest.mark.parametrize(("env", "expected"), [({"PGCONTEXT_EMBEDDED_PG_SHARED_BUFFERS_MB": "48"}, "48MB"),
                                               ({}, None)])
def test_serve_sizes_the_embedded_servers_buffers(tmp_path: Path, env: dict[str, str],
                                                  expected: str | None) -> None:
    """What ``pgcontext serve`` and the CLI commands start: the setting, or an eighth of the memory."""
    settings = replace(load_settings(env), data_dir=tmp_path)
    with owner_dsn(settings) as dsn:
        shown = str(asyncio.run(_fetchval(dsn, "SHOW shared_buffers")))
        in_mb = asyncio.run(_fetchval(dsn, "SELECT setting::bigint * 8 / 1024 FROM pg_settings "
                                           "WHERE name = 'shared_buffers'"))
    if expected is not None:
        assert shown == expected
    else:
        assert in_mb == default_shared_buffers_mb()

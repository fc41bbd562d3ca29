"""The service's database layer through a real pgbouncer, as docs/operations.md describes it.

Needs the ``pgbouncer`` binary: installed from Debian's packages when missing and this runs as root
(1.18 on Debian 12), else the test fails with the command to run — never a silent skip. Session
pooling must work once ``ignore_startup_parameters`` lists the parameters the pool sends. Transaction
pooling needs pgbouncer >= 1.21 with ``max_prepared_statements`` (asyncpg prepares every query);
Debian 12 ships 1.18, so that claim in docs/operations.md comes from pgbouncer's documentation and
is not tested.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg
import pytest

from service.auth import admin
from service.db import Database, create_pool
from service.db.migrate import APP_ROLE
from service.embedded.postgres import free_port
from tests.processes import stop_process

INSTALL = "apt-get update && apt-get install -y pgbouncer"


def find_pgbouncer() -> str | None:
    return shutil.which("pgbouncer") or next((p for p in ("/usr/sbin/pgbouncer",) if Path(p).exists()), None)


@pytest.fixture(scope="module")
def pgbouncer_binary() -> str:
    found = find_pgbouncer()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["bash", "-c", INSTALL], env=env, capture_output=True, timeout=600, check=False)
        found = find_pgbouncer()
    assert found is not None, f"pgbouncer is needed and could not be installed here; run: {INSTALL}"
    return found


def server_of(dsn: str) -> tuple[str, int, str, str]:
    """(host or socket dir, port, database, password) of a libpq URL."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "localhost"])[0]
    port = int(query.get("port", [parts.port or 5432])[0])
    return host, port, parts.path.lstrip("/"), parts.password or ""


StartBouncer = Callable[..., str]
"""``start(pool_mode, ignore_params=...)`` -> the service role's DSN through a new pgbouncer."""


@pytest.fixture
def bouncer(app_dsn: str, pgbouncer_binary: str) -> Iterator[StartBouncer]:
    procs: list[subprocess.Popen[bytes]] = []
    # Not under pytest's private (0700) temp dir: pgbouncer runs as "nobody" when we are root.
    workdir = Path(tempfile.mkdtemp(prefix="pgcontext-pgbouncer-"))
    workdir.chmod(0o755)

    def start(mode: str, *, ignore_params: bool) -> str:
        host, port, database, password = server_of(app_dsn)
        listen = free_port()
        conf = workdir / f"pgbouncer-{listen}"
        conf.mkdir()
        (conf / "users.txt").write_text(f'"{APP_ROLE}" "{password}"\n')
        lines = ["[databases]", f"* = host={host} port={port}", "[pgbouncer]", "listen_addr = 127.0.0.1",
                 f"listen_port = {listen}", "auth_type = plain", f"auth_file = {conf}/users.txt",
                 f"pool_mode = {mode}", "unix_socket_dir =", f"logfile = {conf}/pgbouncer.log"]
        if ignore_params:
            lines.append("ignore_startup_parameters = plan_cache_mode,jit")
        (conf / "pgbouncer.ini").write_text("\n".join(lines) + "\n")
        conf.chmod(0o777)
        for f in conf.iterdir():
            f.chmod(0o666)
        # pgbouncer refuses to run as root: it runs as the user owning the server's socket directory
        # (private to the embedded server's user), else as nobody (a TCP server).
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
        as_user = ["-u", owner] if os.geteuid() == 0 else []
        procs.append(subprocess.Popen([pgbouncer_binary, *as_user, str(conf / "pgbouncer.ini")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", listen), timeout=0.5).close()
                break
            except OSError:
                assert procs[-1].poll() is None, f"pgbouncer exited: {conf}"
                assert time.monotonic() < deadline, "pgbouncer did not listen"
                time.sleep(0.05)
        return f"postgresql://{APP_ROLE}:{password}@127.0.0.1:{listen}/{database}"

    try:
        yield start
    finally:
        for proc in procs:
            stop_process(proc, 10)
        shutil.rmtree(workdir, ignore_errors=True)


async def tenant_work(dsn: str, owner_dsn: str) -> tuple[int, str, int]:
    """Concurrent org-scoped writes and reads, a transaction-local setting and a cursor, as the service does."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        org = await admin.create_org(conn, f"bouncer-{uuid.uuid4().hex[:8]}")
    finally:
        await conn.close()
    db = Database(await create_pool(dsn, min_size=2, max_size=4), statement_timeout_ms=5000)
    try:
        async def write(i: int) -> None:
            async with db.tenant(org) as tx:
                await tx.conn.execute("INSERT INTO memories (org_id, agent_id, text) VALUES ($1, 'a', $2)",
                                      org, f"Through the pooler, row {i}.")
        for _ in range(3):  # more than asyncpg's statement cache warm-up, over few server connections
            await asyncio.gather(*(write(i) for i in range(10)))
        async with db.tenant(org, readonly=True, settings={"hnsw.ef_search": "77"}) as tx:
            rows = int(await tx.conn.fetchval("SELECT count(*) FROM memories"))  # RLS: this org only
            plan_mode = str(await tx.conn.fetchval("SHOW plan_cache_mode"))
            assert await tx.conn.fetchval("SHOW hnsw.ef_search") == "77"
            streamed = [r async for r in tx.conn.cursor("SELECT id FROM memories WHERE org_id = $1", org, prefetch=7)]
        return rows, plan_mode, len(streamed)
    finally:
        await db.close()


async def test_session_pooling_works_once_startup_parameters_are_ignored(
        bouncer: StartBouncer, owner_dsn: str) -> None:
    start = bouncer
    strict = start("session", ignore_params=False)
    with pytest.raises(asyncpg.PostgresError, match="unsupported startup parameter"):
        await tenant_work(strict, owner_dsn)
    # The role default from migration 0001 still applies on pgbouncer's server connections.
    assert await tenant_work(start("session", ignore_params=True), owner_dsn) == (30, "force_custom_plan", 30)

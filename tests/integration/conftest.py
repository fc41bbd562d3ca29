"""A live service: ``pgcontext serve`` as a real process on a real port, against the session's
Postgres and Redis (the docs' examples and the explain page's browser talk to it over HTTP); and a
connection as the service role, for the tests of what that role may do."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from service.db import Database, create_pool
from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration import live
from tests.integration.test_cli import PGCONTEXT, ROOT, Output, clean_env, copy_models
from tests.processes import stop_process

GENEROUS_DEADLINES = {"PGCONTEXT_DEADLINE_MS": "5000", "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS": "2000",
                      "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS": "2000", "PGCONTEXT_ASSEMBLY_COLD_TIMEOUT_MS": "3000"}
"""What these tests check must not depend on how loaded the machine is (40 ms is the default wall)."""


@dataclass
class LiveService:
    base: str
    proc: subprocess.Popen[str]
    output: Output
    data_dir: Path

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc.poll() is None, f"serve exited early:\n{self.output.text()}"
            assert time.monotonic() < deadline, f"serve was not ready in time:\n{self.output.text()}"
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)

    def stop(self) -> int:
        return stop_process(self.proc, 60)


@contextlib.contextmanager
def serving(data_dir: Path, settings: Settings, app_dsn: str, redis_url: str, *args: str,
            env: dict[str, str] | None = None) -> Iterator[LiveService]:
    """``pgcontext serve --no-migrate ARGS`` with the service role's DSN (the schema is already at head);
    ``env``: more settings."""
    copy_models(settings.data_dir / "models", data_dir / "models")
    port = free_port()
    environment = clean_env(PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(port),
                            PGCONTEXT_APP_DATABASE_URL=app_dsn, PGCONTEXT_REDIS_URL=redis_url,
                            PGCONTEXT_AUTH_CACHE_TTL_S="0", **GENEROUS_DEADLINES)
    proc = subprocess.Popen([*PGCONTEXT, "serve", "--no-migrate", *args], env={**environment, **(env or {})},
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    live = LiveService(f"http://127.0.0.1:{port}", proc, Output(proc), data_dir)
    try:
        live.wait_ready()
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="session")
def live_service(tmp_path_factory: pytest.TempPathFactory, settings: Settings, app_dsn: str,
                 redis_url: str) -> Iterator[LiveService]:
    with serving(tmp_path_factory.mktemp("live"), settings, app_dsn, redis_url) as live:
        yield live


@pytest.fixture(scope="session")
def live_tenant(make_tenant: Callable[[str], Awaitable[Tenant]]) -> Tenant:
    """An org of its own for the live service's tests (created as the owner, outside any event loop)."""
    return asyncio.run(make_tenant("live"))  # type: ignore[arg-type]


@pytest.fixture
async def app_conn(app_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(app_dsn)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture(scope="module")
async def db(endpoints: Endpoints) -> AsyncIterator[Database]:
    """A pool of the app role on the tests' event loop (an app's own pool belongs to its test client's loop)."""
    database = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=4), statement_timeout_ms=5000)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture(scope="module")
def live_url(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> Iterator[str]:
    """A live service (uvicorn in a thread, on the session's Postgres and Redis) for the module's tests."""
    with live.live_service(settings, endpoints, embedder) as url:
        yield url

"""Fault injection against real processes: the suite's own PostgreSQL and Redis (so stopping, locking
or killing them disturbs no other test), the service on a real HTTP port (in-process uvicorn, or
``pgcontext serve`` as a child process where the service itself is killed), and the tools to hurt
them: SIGSTOP/SIGCONT of every Postgres process, ``kill -9`` and crash restart, a Redis snapshot
brought back after an outage (Redis "coming back with its old data").

Run just this suite with ``make faults``; plain ``pytest`` (``make test``, ``.ci/run``) runs it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis

from service.app import create_app
from service.db import migrate
from service.embedded.postgres import EmbeddedPostgres, free_port
from service.embedded.redis_server import EmbeddedRedis
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant, create_tenant
from tests.integration.test_assembly_faults import served
from tests.integration.test_cli import (
    PGCONTEXT,
    ROOT,
    Output,
    children_of,
    clean_env,
    copy_models,
    wait_until_answering,
)


@dataclass
class Cluster:
    """The suite's own PostgreSQL server."""

    pg: EmbeddedPostgres
    owner_dsn: str
    app_dsn: str

    def pids(self) -> list[int]:
        postmaster = self.pg.postmaster()
        assert postmaster is not None, "postgres is not running"
        return [postmaster.pid, *sorted(children_of(postmaster.pid))]

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Every process of the cluster SIGSTOPped (a hung server: sockets open, nothing answers)."""
        pids = self.pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def crash(self) -> None:
        """``kill -9`` of the postmaster and every backend (a machine or OOM-killer crash)."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def restart(self) -> None:
        self.pg.restart()  # crash recovery replays the WAL: what was committed is there

    async def owner(self) -> asyncpg.Connection:
        return await asyncpg.connect(self.owner_dsn)


@dataclass
class Cache:
    """The suite's own Redis server."""

    server: EmbeddedRedis
    url: str = ""

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def pid(self) -> int:
        proc = self.server._proc
        assert proc is not None and proc.poll() is None, "redis is not running"
        return proc.pid

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        pid = self.pid()
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def snapshot(self) -> None:
        """Write the data set to disk (``SAVE``): a restart loads it, as a Redis with persistence does."""
        with contextlib.closing(self.client()) as r:
            r.save()

    def kill(self) -> None:
        proc = self.server._proc
        assert proc is not None
        proc.kill()
        proc.wait(10)

    def restart(self) -> None:
        self.server.restart()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pg = EmbeddedPostgres(tmp_path_factory.mktemp("faults") / "postgres")
    try:
        pg.start()
        owner_dsn = pg.dsn()
        migrate.upgrade(owner_dsn)
        password = migrate.derived_app_password(owner_dsn)
        asyncio.run(migrate.set_app_password(owner_dsn, password))
        yield Cluster(pg, owner_dsn, migrate.app_dsn(owner_dsn, password))
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cache]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("faults") / "redis")
    try:
        server.start()
        yield Cache(server, server.url())
    finally:
        server.stop()


@pytest.fixture
def fault_endpoints(cluster: Cluster, cache: Cache) -> Endpoints:
    return Endpoints(owner_dsn=cluster.owner_dsn, app_dsn=cluster.app_dsn, redis_url=cache.url)


_tenants = iter(range(1_000_000))


@pytest.fixture
async def fault_tenant(cluster: Cluster) -> Tenant:
    return await create_tenant(cluster.owner_dsn, f"faults-{next(_tenants)}-{os.getpid()}")


def tuned(settings: Settings, **groups: dict[str, Any]) -> Settings:
    """``settings`` with some fields of some groups replaced: ``tuned(s, database={...}, redis={...})``."""
    return dataclasses.replace(settings, **{name: dataclasses.replace(getattr(settings, name), **values)
                                            for name, values in groups.items()})


@contextlib.contextmanager
def service(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> Iterator[str]:
    """The app on a real HTTP port (uvicorn in a thread of this process); yields its base URL."""
    with served(create_app(settings, endpoints, embedder=embedder)) as url:
        yield url


@dataclass
class LoopErrors(logging.Handler):
    """Records what the event loop's exception handler logs (asyncpg's "Resetting connection with an
    active transaction" among them)."""

    messages: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        logging.Handler.__init__(self, logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __hash__(self) -> int:
        return id(self)


@pytest.fixture
def loop_errors() -> Iterator[LoopErrors]:
    handler = LoopErrors()
    logger = logging.getLogger("asyncio")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def resetting_with_active_transaction(errors: LoopErrors) -> list[str]:
    return [m for m in errors.messages if "Resetting connection with an active transaction" in m]


def wait_for(condition: Any, timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(interval_s)


class ServeProcess:
    """``pgcontext serve`` as a child process on the suite's Postgres and Redis (no embedded servers)."""

    def __init__(self, data_dir: Path, settings: Settings, endpoints: Endpoints, port: int | None = None,
                 **env: str) -> None:
        copy_models(settings.data_dir / "models", data_dir / "models")
        self.port = port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        assert endpoints.owner_dsn is not None
        environment = clean_env(
            PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(self.port), PGCONTEXT_LOG_LEVEL="info",
            PGCONTEXT_DATABASE_URL=endpoints.owner_dsn, PGCONTEXT_APP_DATABASE_URL=endpoints.app_dsn,
            PGCONTEXT_REDIS_URL=endpoints.redis_url,
            PGCONTEXT_TIKTOKEN_DIR=str(settings.assembly.tiktoken_dir or settings.data_dir / "tiktoken"), **env)
        self.proc = subprocess.Popen([*PGCONTEXT, "serve"], env=environment, cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.output = Output(self.proc)

    def wait_ready(self, timeout_s: float = 90) -> ServeProcess:
        wait_until_answering(self.proc, self.output, f"{self.base}/readyz", timeout_s)
        return self

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def terminate(self, timeout_s: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)


@pytest.fixture
def serve_processes(tmp_path: Path) -> Iterator[list[ServeProcess]]:
    """Every ``pgcontext serve`` a test starts (append them): killed at the end whatever happened."""
    started: list[ServeProcess] = []
    try:
        yield started
    finally:
        for process in started:
            process.kill()

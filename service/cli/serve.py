"""``pgcontext serve``: check the listen address, start (or attach to) the servers, migrate, and serve.

A first run prints the new org's key and, once the service answers, one line with its address; the
embedded servers' start-up and uvicorn's own start and stop lines show at debug only
(``PGCONTEXT_LOG_LEVEL=debug``), while warnings and errors stay visible at every level.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import socket
import sys
from typing import Any

import uvicorn

from service.auth import admin
from service.cli import servers
from service.cli.uvicorn_logs import uvicorn_log_config
from service.cli.workers import SERVE_PID_ENV, multiprocess_metrics
from service.embedded.lifecycle import STATUS_FILE, Supervisor, stop_on_signals
from service.runtime import Endpoints
from service.settings import Settings


class ListenError(Exception):
    """The listen address cannot be bound (in use, not local, not resolvable)."""


def check_listen_address(host: str, port: int) -> None:
    """Bind every address ``host`` resolves to, as uvicorn will (``SO_REUSEADDR``), and let go at once:
    a port in use is refused in milliseconds, before the embedded servers start and the model loads
    (seconds). A server that takes the port in between still fails in uvicorn, only later."""
    where = f"{host}:{port}"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {where}: {exc.strerror}") from exc
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ListenError(f"cannot listen on {where}: address already in use "
                                      "(another pgcontext serve?)") from exc
                raise ListenError(f"cannot listen on {where}: {exc.strerror or exc}") from exc


class _AnnouncingServer(uvicorn.Server):
    """Prints ``line`` once the app has started and the socket listens: the service answers from then on."""

    def __init__(self, config: uvicorn.Config, line: str) -> None:
        super().__init__(config)
        self._line = line

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(self._line, flush=True)


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from service.app import create_app

    host = args.host or settings.server.host
    port = args.port or settings.server.port
    workers = args.workers or settings.server.workers
    check_listen_address(host, port)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    migrate = settings.database.migrate_on_start and not args.no_migrate
    # Restarts an embedded server that dies while serving; /readyz reads why one is down from its file.
    supervisor = Supervisor(status_file=settings.data_dir / STATUS_FILE)
    # Not migrating and given the service role's DSN: no owner credentials, no embedded PostgreSQL.
    owner = (contextlib.nullcontext(None) if not migrate and settings.database.app_url
             else servers.owner_dsn(settings, supervisor))
    with stop_on_signals(), owner as owner_dsn, servers.redis_url(settings, supervisor) as redis_url, supervisor:
        app_dsn = servers.prepare_database(settings, owner_dsn, migrate=migrate)
        issued = asyncio.run(servers.with_owner(owner_dsn, admin.ensure_default_org)) if owner_dsn else None
        if isinstance(issued, admin.IssuedKey):
            print(f"Created org 'default' ({issued.org_id}). Its API key (shown once):", flush=True)
            print(issued.key, flush=True)
        serving = f"pgcontext serving on http://{host}:{port} with {workers} worker(s) (docs: /schema)"
        logs: dict[str, Any] = {"log_config": uvicorn_log_config(settings.server.log_level),
                                "log_level": settings.server.log_level, "access_log": False}
        if workers > 1:
            # Worker processes rebuild the app from the environment: hand them the servers resolved here.
            os.environ.update({"PGCONTEXT_APP_DATABASE_URL": app_dsn, "PGCONTEXT_REDIS_URL": redis_url,
                               SERVE_PID_ENV: str(os.getpid()),
                               **({"PGCONTEXT_DATABASE_URL": owner_dsn} if owner_dsn else {})})
            print(serving, flush=True)  # the workers start (and answer) on their own from here
            with multiprocess_metrics(settings.data_dir):  # /metrics sums every worker's counts
                uvicorn.run("service.cli.workers:worker_app", factory=True, workers=workers, host=host, port=port,
                            **logs)
        else:
            app = create_app(settings, Endpoints(owner_dsn=owner_dsn, app_dsn=app_dsn, redis_url=redis_url))
            server = _AnnouncingServer(uvicorn.Config(app, host=host, port=port, **logs), serving)
            server.run()
            if not server.started:  # as uvicorn.run: a start-up that did not complete is a failure
                sys.exit(3)
    return 0

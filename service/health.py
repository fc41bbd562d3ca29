"""Liveness, readiness and the Prometheus endpoint: what orchestrators and scrapers call."""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

import msgspec
from litestar import get
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.plugins.prometheus import PrometheusController
from litestar.response import Response

from service.deps import ServicesDep
from service.errors import Unauthorized


class Health(msgspec.Struct):
    status: str
    checks: dict[str, str] = msgspec.field(default_factory=dict)


@get("/healthz", summary="The process is up", tags=["health"])
async def healthz() -> Health:
    return Health(status="ok")


@get("/readyz", summary="Postgres and Redis answer", tags=["health"])
async def readyz(services: ServicesDep) -> Response[Health]:
    async def check(name: str, probe: object) -> tuple[str, str]:
        try:
            await asyncio.wait_for(probe, timeout=1.0)  # type: ignore[arg-type]
            return name, "ok"
        except Exception as exc:  # readiness reports every failure, whatever it is
            return name, f"error: {type(exc).__name__}"

    results = dict(await asyncio.gather(check("postgres", services.db.ping()), check("redis", services.redis.ping())))
    ready = all(v == "ok" for v in results.values())
    return Response(Health(status="ok" if ready else "unavailable", checks=results), status_code=200 if ready else 503)


def metrics_controller(token: str | None) -> type[PrometheusController]:
    """``/metrics``; with a token (``PGCONTEXT_METRICS_TOKEN``) only for ``Authorization: Bearer <token>``."""
    if token is None:
        return PrometheusController
    expected = f"bearer {token}".encode()

    def require_token(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        scheme, _sep, supplied = connection.headers.get("authorization", "").partition(" ")
        # Constant-time comparison: the token must not leak through response timing.
        if not hmac.compare_digest(f"{scheme.lower()} {supplied.strip()}".encode(), expected):
            raise Unauthorized("/metrics needs 'Authorization: Bearer <metrics token>'")

    class GuardedPrometheusController(PrometheusController):
        guards = [require_token]

    return GuardedPrometheusController

"""Liveness and readiness."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import get
from litestar.response import Response

from service.deps import ServicesDep


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

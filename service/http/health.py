"""Liveness, readiness and the Prometheus endpoint: what orchestrators and scrapers call."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable
from typing import Any

import msgspec
from litestar import get
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler
from litestar.plugins.prometheus import PrometheusController
from litestar.response import Response

from service.embedded.lifecycle import STATUS_FILE, read_status
from service.errors import Unauthorized, forget_outcome
from service.http.deps import ServicesDep


class Health(msgspec.Struct):
    status: str
    checks: dict[str, str] = msgspec.field(default_factory=dict)


@get("/healthz", summary="The process is up", tags=["health"])
async def healthz() -> Health:
    return Health(status="ok")


READY_TIMEOUT_S = 1.0


async def within(probe: Awaitable[object], timeout_s: float) -> None:
    """Await ``probe`` for at most ``timeout_s``, clean-up included: unlike ``asyncio.wait_for``, which
    waits for a cancelled probe to unwind (with a stopped Postgres, for the whole outage), an
    overdue probe is cancelled and left to finish on its own."""
    task = asyncio.ensure_future(probe)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        task.add_done_callback(forget_outcome)
        raise TimeoutError(f"no answer within {timeout_s:g} s")
    task.result()


@get("/readyz", summary="Postgres and Redis answer, and the assembly path is warm", tags=["health"])
async def readyz(services: ServicesDep) -> Response[Health]:
    """200 when Postgres and Redis both answer within 1 s and the start's warm-up has completed
    (``checks.warm``: the connections, prepared statements, model threads and code paths the first
    assembly needs); else 503 with the failing check named (and, for an embedded server that is down,
    ``postgres_server``/``redis_server`` saying why)."""
    async def check(name: str, probe: Awaitable[object]) -> tuple[str, str]:
        try:
            await within(probe, READY_TIMEOUT_S)
            return name, "ok"
        except Exception as exc:  # readiness reports every failure, whatever it is
            return name, f"error: {type(exc).__name__}"

    results = dict(await asyncio.gather(check("postgres", services.db.ping(READY_TIMEOUT_S)),
                                        check("redis", services.redis.ping())))
    warm = services.warmup
    if warm is not None:
        results["warm"] = "ok" if warm.done else "warming" if not warm.failures else \
            "incomplete: " + "; ".join(f"{step}: {why}" for step, why in warm.failures.items())[:300]
    # An embedded server that is down under `serve`: why, and that it is being restarted.
    down = read_status(services.settings.data_dir / STATUS_FILE)
    results.update({f"{name}_server": why for name, why in down.items()})
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

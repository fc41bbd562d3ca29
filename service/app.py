"""The app factory: routes, dependencies, error handlers, middleware and the lifespan in one place."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog
from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.exceptions import HTTPException, NotFoundException, SerializationException, ValidationException
from litestar.plugins.prometheus import PrometheusConfig
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from redis.exceptions import RedisError

from service.assembly import (
    AssemblyController,
    FeedbackController,
    HotMemoryController,
    Orchestrator,
    build_orchestrator,
)
from service.assembly.shedding import shedding_middleware
from service.assembly.warmup import Warmup
from service.auth import KeyCache
from service.auth.failures import FailedAuthLimiter
from service.conversations import ConversationController
from service.db import Database, create_pool, redisconn
from service.db.epochs import CacheEpochs
from service.db.errors import translate
from service.db.replicas import start_replicas
from service.directives import DirectiveController, DirectiveStore
from service.documents import DocumentController
from service.embeddings import Embedder, build_embedder
from service.embeddings.lanes import lanes_of
from service.errors import EMPTY_BODY, AppError, ServiceUnavailable, malformed_json
from service.explain import explain_routes
from service.export import ExportController, ImportController
from service.http.deps import (
    before_request,
    body_too_large,
    escaped_slash,
    path_id_error,
    provide_org_id,
    provide_services,
)
from service.http.health import healthz, metrics_controller, readyz
from service.http.openapi import StrictStructs, allow_header_middleware, finish_schema, openapi_config
from service.http.throttle import in_flight_middleware, rate_limit_edge
from service.memories import MemoryController
from service.memories.facts.consolidate import Consolidator, start_consolidation
from service.memories.facts.handlers import HistoryController, OrgSettingsController
from service.retrieval import RetrievalEngine, SearchController
from service.runtime import Endpoints, Services
from service.settings import Settings
from service.tenancy.ratelimit import RateLimiter

log = structlog.get_logger(__name__)

_STATUS_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 409: "conflict", 413: "payload_too_large",
                 415: "unsupported_media_type", 422: "unprocessable", 429: "too_many_requests",
                 503: "service_unavailable", 504: "deadline_exceeded"}


def error_body(status: int, code: str, message: str, details: Any, request_id: str | None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}, "request_id": request_id}}


def _request_id(request: Request[Any, Any, Any]) -> str | None:
    value = request.scope.get("state", {}).get("request_id")
    return value if isinstance(value, str) else None


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Every error leaves the service in one shape: {"error": {code, message, details, request_id}}."""
    response = _error_response(request, exc)
    if _request_id(request) is None:
        # Routing errors (404 no route, 405) are raised before the per-route middleware runs: give
        # them a request id here, in the body and the header, like every other response.
        response.headers["X-Request-ID"] = response.content["error"]["request_id"]
    return response


def _error_response(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    rid = _request_id(request) or request.headers.get("x-request-id", "")[:64] or uuid.uuid4().hex
    if _empty_body(exc):
        exc = malformed_json(EMPTY_BODY)
    elif isinstance(exc, HTTPException) and exc.status_code == 400 and isinstance(exc.__cause__,
                                                                                  SerializationException):
        exc = malformed_json(exc.__cause__)  # the framework's decoder: the same error as the handlers' own
    if isinstance(exc, NotFoundException) and escaped_slash(request.scope):
        exc = path_id_error()  # no route for the decoded path: the cause is the id, not the address
    if isinstance(exc, ValidationException):
        details: Any = {"errors": exc.extra} if exc.extra else {}
        body = error_body(400, "validation_error", exc.detail or "invalid request", details, rid)
        return Response(body, status_code=400)
    services = getattr(request.app.state, "services", None)
    if isinstance(exc, HTTPException) and exc.status_code == 413 and isinstance(services, Services):
        exc = body_too_large(services.settings.limits.max_request_bytes)  # read past the limit, no length sent
    if isinstance(exc, HTTPException):
        status = exc.status_code
        code = _STATUS_CODES.get(status, "http_error")
        return Response(error_body(status, code, exc.detail, None, rid), status_code=status,
                        headers=exc.headers or None)
    if isinstance(exc, RedisError):
        exc = ServiceUnavailable("the cache is unavailable", code="redis_unavailable")
    if not isinstance(exc, AppError):
        mapped = translate(exc)
        if mapped is None:
            log.exception("unhandled_error", error_type=type(exc).__name__)
            return Response(error_body(500, "internal_error", "internal server error", None, rid), status_code=500)
        exc = mapped
    if exc.status >= 500:
        log.warning("request_failed", code=exc.code, message=exc.message)
    return Response(error_body(exc.status, exc.code, exc.message, exc.details, rid), status_code=exc.status,
                    headers=exc.headers() or None)


def _empty_body(exc: Exception) -> bool:
    """The framework's report of a required body that was not sent (a missing ``data`` argument)."""
    return isinstance(exc, ValidationException) and exc.extra == [{"message": "'data'", "key": "data",
                                                                    "source": "body"}]


def request_id_middleware(app: ASGIApp) -> ASGIApp:
    """Tag every request with an id (the caller's X-Request-ID or a new one), in logs and the response."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")[:64]
        rid = incoming or uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        with structlog.contextvars.bound_contextvars(request_id=rid):
            await app(scope, receive, send_with_id)

    return middleware


async def build_services(settings: Settings, endpoints: Endpoints, embedder: Embedder | None) -> Services:
    pool = await create_pool(endpoints.app_dsn, min_size=settings.database.pool_min,
                             max_size=settings.database.pool_max)
    redis = redisconn.connect(endpoints.redis_url, cluster=settings.redis.cluster,
                              timeout_s=settings.redis.socket_timeout_s)
    if embedder is None:
        embedder = await asyncio.to_thread(build_embedder, settings.embedding, settings.data_dir)
    d = settings.database
    db = Database(pool, statement_timeout_ms=d.statement_timeout_ms, acquire_timeout_ms=d.acquire_timeout_ms,
                  client_grace_ms=d.client_grace_ms, cleanup_timeout_ms=d.cleanup_timeout_ms,
                  replicas=await start_replicas(d, pool, redis))
    services = Services(settings=settings, db=db, redis=redis, embedder=embedder,
                        rate_limiter=RateLimiter(redis, settings.rate_limit))
    services.extras["key_cache"] = KeyCache(settings.server.auth_cache_ttl_s)
    services.extras["auth_failures"] = FailedAuthLimiter(settings.server.auth_failure_burst,
                                                         settings.server.auth_failure_rate_per_s)
    epochs = CacheEpochs(db, check_s=settings.redis.epoch_check_s)
    services.extras["directives"] = DirectiveStore(db, redis, epochs, settings.redis.org_directive_bytes)
    services.extras["retrieval"] = RetrievalEngine(db, embedder, settings.retrieval, lanes=lanes_of(services),
                                                   max_limit=settings.limits.max_page_size)
    orchestrator = await build_orchestrator(services)
    services.extras["assembly"] = orchestrator
    services.memory_hooks.append(orchestrator.hot.invalidate)  # writes keep hot sets correct
    services.extras["consolidator"] = start_consolidation(services)
    return services


async def warm_up(services: Services, owner_dsn: str | None) -> Warmup | None:
    """The start's warm-up (``service.assembly.warmup``), before the app serves; None when it is off.
    One that could not complete goes on in the background, and ``/readyz`` says so."""
    timeout_s = services.settings.server.warmup_timeout_s
    orchestrator = services.extras["assembly"]
    if timeout_s <= 0 or not isinstance(orchestrator, Orchestrator):
        return None
    warmup = Warmup(services, orchestrator, owner_dsn)
    services.warmup = warmup.state
    if not await warmup.run(timeout_s):
        warmup.retry_in_background(timeout_s)
    return warmup


async def close_services(services: Services, *, close_embedder: bool) -> None:
    consolidator = services.extras.get("consolidator")
    if isinstance(consolidator, Consolidator):
        await consolidator.aclose()
    assembly = services.extras.get("assembly")
    if isinstance(assembly, Orchestrator):
        await assembly.aclose()  # flushes pending access statistics while the pool is still open
    retrieval = services.extras.get("retrieval")
    if isinstance(retrieval, RetrievalEngine):
        await retrieval.aclose()
    directives = services.extras.get("directives")
    if isinstance(directives, DirectiveStore):
        await directives.aclose()  # pending envelope writes, then the epoch reads
    await services.db.close()
    await services.redis.aclose()
    if close_embedder:
        await services.embedder.aclose()


GIL_SWITCH_INTERVAL_S = 0.0005
"""How long a running thread keeps the GIL from one that asks for it, while the app serves
(CPython's default: 5 ms). A query embedding gives up the GIL inside onnxruntime and needs it back
to hand in its tokens and to hand back the vector; behind an event loop busy with other requests,
each of those waits lasted up to the whole interval, so under load an embedding of ~2 ms of CPU
took long enough to miss its deadline (``embedder_timeout``). At 0.5 ms, three assemblies at a time
on two cores: 65-93 embedder timeouts in 1,500 instead of 129-146, and 93-96% of the assemblies ran
their planned search instead of 90-91% (docs/operations.md, "Decisions")."""


def create_app(settings: Settings, endpoints: Endpoints, *, embedder: Embedder | None = None) -> Litestar:
    """Build the ASGI app. ``embedder`` lets tests inject a provider; by default it is built from settings."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        services = await build_services(settings, endpoints, embedder)
        app.state.services = services
        warmup = await warm_up(services, endpoints.owner_dsn)
        # Everything built so far (modules, the model, tokenizers: ~160K objects) lives as long as the
        # process. Frozen, it is left out of the cyclic collector's full passes, which otherwise
        # stop the event loop for ~90 ms every few seconds under load (6-8 ms once frozen).
        gc.collect()
        gc.freeze()
        log.debug("gc_frozen", objects=gc.get_freeze_count())
        switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        try:
            yield
        finally:
            if warmup is not None:
                await warmup.aclose()
            await close_services(services, close_embedder=embedder is None)
            gc.unfreeze()  # collectable again (several apps can come and go in one process, e.g. tests)
            sys.setswitchinterval(switch_interval)

    prometheus = PrometheusConfig(app_name="pgcontext", group_path=True)
    app = Litestar(
        route_handlers=[healthz, readyz, MemoryController, SearchController, DirectiveController,
                        DocumentController, ConversationController, AssemblyController, HotMemoryController,
                        FeedbackController, ExportController, ImportController, HistoryController,
                        OrgSettingsController,
                        metrics_controller(settings.server.metrics_token), *explain_routes],
        dependencies={
            "services": Provide(provide_services, sync_to_thread=False),
            "org_id": Provide(provide_org_id),
        },
        before_request=before_request,
        exception_handlers={Exception: handle_exception},
        middleware=[shedding_middleware, rate_limit_edge, request_id_middleware, allow_header_middleware,
                    prometheus.middleware, in_flight_middleware],
        lifespan=[lifespan],
        openapi_config=openapi_config(),
        plugins=[StrictStructs()],
        request_max_body_size=settings.limits.max_request_bytes,
        debug=False,
    )
    finish_schema(app, settings)
    return app


def app_from_env() -> Litestar:
    """Factory for ``uvicorn --factory`` worker processes: every server is already configured in the
    environment (``pgcontext serve --workers N`` exports the embedded servers' addresses first)."""
    from service.logs import configure
    from service.settings import load_settings

    settings = load_settings()
    configure(settings.server.log_level)
    if not (settings.database.app_url and settings.redis.url):
        raise RuntimeError("app_from_env needs PGCONTEXT_APP_DATABASE_URL and PGCONTEXT_REDIS_URL")
    return create_app(settings, Endpoints(owner_dsn=settings.database.url, app_dsn=settings.database.app_url,
                                          redis_url=settings.redis.url))

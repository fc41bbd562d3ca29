"""HTTP handlers: POST /v1/context/assemble, GET /v1/memories/hot, POST /v1/memories/feedback.

``/v1/memories/hot`` and ``/v1/memories/feedback`` are static paths next to the memory controller's
``/v1/memories/{memory_id}``; Litestar's router matches static segments before parameters, so
they never reach the by-id handlers (tested).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Annotated, Any

import structlog
from litestar import Controller, Request, Response, get, post
from litestar.params import HeaderParameter, JSONBody
from litestar.status_codes import HTTP_200_OK

from service.assembly import metrics as assembly_metrics
from service.assembly.deadline import CallerDeadline
from service.assembly.feedback import apply_feedback
from service.assembly.orchestrator import Orchestrator
from service.assembly.types import AssembleRequest, AssembleResponse, FeedbackIn, FeedbackOut, HotSetOut
from service.errors import DeadlineExceeded, ServiceUnavailable
from service.http.deps import OrgId, ServicesDep
from service.http.responses import errors
from service.memories.handlers import AgentIdQuery
from service.runtime import Services

log = structlog.get_logger(__name__)


def orchestrator_of(services: Services) -> Orchestrator:
    orchestrator = services.extras["assembly"]
    assert isinstance(orchestrator, Orchestrator)
    return orchestrator


async def _client_gone(request: Request[Any, Any, Any]) -> None:
    """Returns when the client disconnects (the body is already read, so only a disconnect arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request[Any, Any, Any], work: Awaitable[AssembleResponse]
                               ) -> AssembleResponse:
    """Run ``work`` in this request's own task; a watcher cancels it if the client disconnects first.

    Not as a task of its own: starting one and collecting its result would cost the request two more
    event-loop turns, each behind every other ready callback — milliseconds under load."""
    this = asyncio.current_task()
    assert this is not None
    gone = settled = False

    def on_gone(watcher: asyncio.Future[None]) -> None:
        nonlocal gone
        # ``settled``: the callback may already be queued when the work ends; never cancel the answer.
        if not settled and not watcher.cancelled() and watcher.exception() is None:
            gone = True
            this.cancel()

    watcher = asyncio.ensure_future(_client_gone(request))
    watcher.add_done_callback(on_gone)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise  # cancelled for another reason (shutdown): not ours to turn into an answer
        this.uncancel()
        log.warning("context_assembly_abandoned", degradation_level="L3", reason="client_disconnected")
        raise DeadlineExceeded("the client went away before the context was ready", code="client_disconnected",
                               details={"level": "L3"}) from None
    finally:
        settled = True
        watcher.remove_done_callback(on_gone)
        watcher.cancel()


class AssemblyController(Controller):
    path = "/v1/context"
    tags = ["context"]

    @post("/assemble", status_code=HTTP_200_OK, summary="Assemble an agent's context for one model call",
          responses=errors(422, 504))
    async def assemble(
        self, request: Request[Any, Any, Any], services: ServicesDep, org_id: OrgId, data: JSONBody[AssembleRequest],
        x_deadline_ms: Annotated[str | None, HeaderParameter(name="X-Deadline-Ms")] = None,
        x_timeout_ms: Annotated[str | None, HeaderParameter(name="X-Timeout-Ms")] = None,
    ) -> AssembleResponse:
        """Directive, hot memories and cold search run concurrently under ``PGCONTEXT_DEADLINE_MS``
        (default 40 ms); the result is ranked, packed into the token budget and formatted.

        ``context`` layout: ``<directive>…</directive>``, ``<memories>`` with one ``n text`` line
        per memory (n = 1, 2, … in packing order; ``refs`` maps n to the memory id; questions that
        ask for a time get ``n (8 May 2023) text``), ``<history>`` with one ``role: content`` line
        per message (empty sections are left out; continuation lines are indented by two spaces).
        A document's summary, section and chunk covering the same lines are packed once, the most
        specific that fits and itself matches the query. Org-wide document chunks come only from
        the collections ``retrieval.filters.collections`` names (the agent's own documents always).
        Every ``budget`` field ending in ``_tokens`` is a token count; ``reserve_tokens`` defaults
        to 512.
        ``degradation_level``: L0 hot and
        cold usable, L1 one of them, L2 neither (directive + history only); ``degradation_reasons``
        lists what else the context lacks (``directive_missing``, ...). The caller's deadline
        (``X-Deadline-Ms``: absolute Unix ms; ``X-Timeout-Ms``: ms from now; or the body's
        ``timeout_ms``; the soonest wins) works both ways: longer than the service's deadline, it
        lengthens the wall and the branch timeouts up to ``PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS``
        (``metrics.deadline_ms``); if it passes or the client disconnects, the answer is a 504
        ``deadline_exceeded`` error, never partial context.
        At most ``PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT`` assemblies run at once; others wait in a short
        line first (``metrics.queued_ms``; the caller's deadline counts). When the line is full, the
        wait runs out, or the caller's deadline leaves less than an assembly takes, the answer is a
        503 ``overloaded`` with ``Retry-After`` (``details.reason``), sent about a second after the
        request arrived (never past the caller's deadline).
        """
        caller = CallerDeadline.from_headers(x_deadline_ms, x_timeout_ms).within(data.timeout_ms)
        try:
            return await _unless_disconnected(request, orchestrator_of(services).assemble(org_id, data, caller))
        except DeadlineExceeded as exc:
            log.warning("context_assembly_failed", degradation_level="L3", code=exc.code, org_id=str(org_id),
                        agent_id=data.agent_id)
            assembly_metrics.not_answered(exc.code)
            raise
        except ServiceUnavailable as exc:
            if exc.code == "overloaded":
                assembly_metrics.not_answered(exc.code)
            raise


class HotMemoryController(Controller):
    path = "/v1/memories/hot"
    tags = ["memories"]

    @get("/", summary="An agent's hot set (pinned, most important, most recently used)")
    async def hot_set(self, services: ServicesDep, org_id: OrgId, agent_id: AgentIdQuery) -> HotSetOut:
        """Served from Redis (``source: cache``) or read from Postgres on a miss, then cached (only for
        agents that have memories of their own)."""
        out = await orchestrator_of(services).hot.read_for_api(org_id, agent_id)
        if out.source == "postgres" and services.rate_limiter is not None:
            # Not cached: a Postgres read the route's price did not cover (service.tenancy.ratecost)
            await services.rate_limiter.charge(org_id, services.settings.rate_limit.hot_miss_cost)
        return out


class FeedbackController(Controller):
    path = "/v1/memories/feedback"
    tags = ["memories"]

    @post("/", status_code=HTTP_200_OK, summary="Report which memories helped", responses=errors(409))
    async def feedback(
        self, services: ServicesDep, org_id: OrgId, data: JSONBody[FeedbackIn],
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key")] = None,
    ) -> Response[FeedbackOut]:
        """``{"items": [{"id", "helpful"}]}`` or ``{"memory_ids": [...], "helpful": true}``.

        Each report moves ``usefulness`` (in [-1, 1]) toward +1 or -1 by a moving average, which
        later assemblies score. Ids that are not memories of your org are listed in ``not_found``.
        With an ``Idempotency-Key`` a retried report (same key, same body, within 24 h) returns the
        first answer and moves nothing again.
        """
        alpha = orchestrator_of(services).settings.feedback_alpha
        out, replayed = await apply_feedback(services, org_id, data, alpha, idempotency_key)
        return Response(out, status_code=HTTP_200_OK, headers={"Idempotent-Replayed": "true"} if replayed else {})

"""Refusing assemblies at the edge: when admission's line is full, ``POST /v1/context/assemble`` is
answered 503 ``overloaded`` before its body is read, parsed or authenticated.

Under overload most requests are refusals, and clients that ignore ``Retry-After`` send them as
fast as they are answered. Refused through the whole stack (routing, API-key lookup, JSON decoding,
validation, the request-id and metrics middleware) each cost a millisecond or so of the event loop
that the admitted assemblies' branches need; here a refusal costs a header scan and a timer. It is
held like every admission refusal (``refusal_hold_ms`` from arrival, not past the caller's
``X-Timeout-Ms`` / ``X-Deadline-Ms``),
so a client that retries at once still retries at most about once per hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from litestar.types import ASGIApp, Receive, Scope, Send

from service.assembly import metrics as assembly_metrics
from service.assembly.admission import Admission
from service.http.edge import send_error

ASSEMBLE_PATH = "/v1/context/assemble"


def _admission(scope: Scope) -> Admission | None:
    services = getattr(getattr(scope.get("app"), "state", None), "services", None)
    orchestrator = getattr(services, "extras", {}).get("assembly")
    admission = getattr(orchestrator, "admission", None)
    return admission if isinstance(admission, Admission) else None


def caller_left_ms(headers: Iterable[tuple[bytes, bytes]]) -> float | None:
    """The caller's remaining time from ``X-Timeout-Ms`` / ``X-Deadline-Ms`` (sooner wins); None
    when neither is there or parses (the handler answers a bad one with its 400 when admitted)."""
    left: float | None = None
    for name, value in headers:
        try:
            if name == b"x-timeout-ms":
                candidate = float(value)
            elif name == b"x-deadline-ms":
                candidate = float(value) - time.time() * 1000
            else:
                continue
        except ValueError:
            continue
        left = candidate if left is None else min(left, candidate)
    return left


def shedding_middleware(app: ASGIApp) -> ASGIApp:
    """Outermost: a refusal here skips the request-id binding and the per-route HTTP metrics too (it
    is counted in ``pgcontext_assembly_shed_total{reason="line_full"}`` and
    ``pgcontext_assemblies_not_answered_total{reason="overloaded"}``)."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] != ASSEMBLE_PATH  # type: ignore[comparison-overlap]
                or scope.get("method") != "POST"):
            await app(scope, receive, send)
            return
        admission = _admission(scope)
        if admission is None:
            await app(scope, receive, send)
            return
        if not admission.full():
            with admission.arrive():
                await app(scope, receive, send)
            return
        arrived = time.monotonic()
        refusal = admission.refusal("line_full", f"{admission.in_flight} assemblies are running and "
                                                 f"{admission.waiting} waiting: try again shortly")
        assembly_metrics.not_answered(refusal.code)
        headers = scope["headers"]
        await admission.hold(arrived, caller_left_ms(headers))
        await send_error(send, headers, refusal)

    return middleware

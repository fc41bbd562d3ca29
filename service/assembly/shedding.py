"""Refusing assemblies at the edge: when admission's line is full, ``POST /v1/context/assemble`` is
answered 503 ``overloaded`` before its body is read, parsed or authenticated.

Under overload most requests are refusals, and clients that ignore ``Retry-After`` send them as
fast as they are answered. Refused through the whole stack (routing, API-key lookup, JSON decoding,
validation) each cost a millisecond or so of the event loop that the admitted assemblies' branches
need; here a refusal costs a header scan and a timer. It is held like every admission refusal
(``refusal_hold_ms`` from arrival, not past the caller's ``X-Timeout-Ms`` / ``X-Deadline-Ms``),
so a client that retries at once still retries at most about once per hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import msgspec
from litestar.types import ASGIApp, HTTPResponseBodyEvent, HTTPResponseStartEvent, Receive, Scope, Send

from service.assembly.admission import Admission

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
    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["path"] != ASSEMBLE_PATH  # type: ignore[comparison-overlap]
                or scope.get("method") != "POST"):
            await app(scope, receive, send)
            return
        admission = _admission(scope)
        if admission is None or not admission.full():
            await app(scope, receive, send)
            return
        arrived = time.monotonic()
        refusal = admission.refusal("line_full", f"{admission.in_flight} assemblies are running and "
                                                 f"{admission.waiting} waiting: try again shortly")
        await admission.hold(arrived, caller_left_ms(scope["headers"]))
        rid: Any = scope.get("state", {}).get("request_id")
        body = msgspec.json.encode({"error": {"code": refusal.code, "message": refusal.message,
                                              "details": refusal.details, "request_id": rid}})
        start: HTTPResponseStartEvent = {
            "type": "http.response.start", "status": refusal.status, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(refusal.retry_after_s).encode())]}
        await send(start)
        end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
        await send(end)

    return middleware

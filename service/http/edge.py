"""Answering at the edge: an error written straight to the ASGI ``send`` by a middleware, before the
handler's dependencies, body and error handling run (refusals that must cost next to nothing:
:mod:`service.assembly.shedding`, :func:`service.http.throttle.rate_limit_edge`). Same body,
``Retry-After`` and ``X-Request-ID`` as the app's error handler gives every other error."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import msgspec
from litestar.types import HTTPResponseBodyEvent, HTTPResponseStartEvent, Send

from service.errors import AppError


def request_id(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The caller's ``X-Request-ID`` (first 64 characters) or a new one, as the request-id middleware
    gives every other response (these answer before it runs)."""
    for name, value in headers:
        if name == b"x-request-id" and value:
            return value.decode("latin-1")[:64]
    return uuid.uuid4().hex


async def send_error(send: Send, headers: Iterable[tuple[bytes, bytes]], error: AppError) -> None:
    rid = request_id(headers)
    body = msgspec.json.encode({"error": {"code": error.code, "message": error.message, "details": error.details,
                                          "request_id": rid}})
    start: HTTPResponseStartEvent = {
        "type": "http.response.start", "status": error.status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            *((name.lower().encode(), value.encode()) for name, value in error.headers().items()),
            (b"x-request-id", rid.encode())]}
    await send(start)
    end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": body, "more_body": False}
    await send(end)

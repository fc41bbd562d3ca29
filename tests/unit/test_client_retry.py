"""The client's retries against a small real HTTP server that answers 429/503 as scripted (the live
service's own 503 ``overloaded`` is retried in tests/integration/test_client.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgspec
import pytest
from pgcontext_client import AsyncClient, Client, Overloaded, RateLimited, RetryPolicy, ServerError

FAST = RetryPolicy(attempts=4, backoff_s=0.01, max_backoff_s=0.05)


class Script:
    """Answers (status, headers, body) in order, the last one repeated; records each request."""

    def __init__(self, *answers: tuple[int, dict[str, str], dict[str, Any]]) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str, dict[str, str], float]] = []

    def next(self) -> tuple[int, dict[str, str], dict[str, Any]]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def stub() -> Iterator[tuple[str, list[Script]]]:
    holder: list[Script] = []

    class Handler(BaseHTTPRequestHandler):
        def answer(self) -> None:
            script = holder[0]
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            script.seen.append((self.command, self.path, dict(self.headers), time.monotonic()))
            status, headers, body = script.next()
            payload = msgspec.json.encode(body)
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = answer

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", holder
    finally:
        server.shutdown()
        server.server_close()


def error(code: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": f"{code} now", "details": {}, "request_id": "rid-1"}}


CREATED: tuple[int, dict[str, str], dict[str, Any]] = (201, {}, {"ids": ["01a22ddc-3507-74bb-9886-f62081aacd52"]})


def test_429_then_201_waits_retry_after_and_resends_the_same_idempotency_key(
        stub: tuple[str, list[Script]]) -> None:
    url, holder = stub
    holder.append(Script((429, {"Retry-After": "1"}, error("rate_limited")), CREATED))
    with Client(url, "k", retry=FAST) as pg:
        created = pg.create_memory("x")
    assert str(created.ids[0]) == "01a22ddc-3507-74bb-9886-f62081aacd52"
    (_, _, first, t0), (_, _, second, t1) = holder[0].seen
    assert first["Idempotency-Key"] == second["Idempotency-Key"] and len(first["Idempotency-Key"]) == 36
    assert first["Authorization"] == "Bearer k"
    assert 0.95 <= t1 - t0 < 3  # Retry-After honoured (not the 10 ms backoff)


def test_503_without_retry_after_backs_off_and_gives_up_after_the_attempts(stub: tuple[str, list[Script]]) -> None:
    url, holder = stub
    holder.append(Script((503, {}, error("overloaded"))))
    with Client(url, "k", retry=FAST) as pg, pytest.raises(Overloaded) as refused:
        pg.search("q")
    assert len(holder[0].seen) == 4 and refused.value.code == "overloaded" and refused.value.request_id == "rid-1"
    gaps = [b[3] - a[3] for a, b in zip(holder[0].seen, holder[0].seen[1:], strict=False)]
    assert all(0.004 <= g < 1 for g in gaps), gaps


def test_a_retry_after_beyond_the_limit_is_raised_at_once(stub: tuple[str, list[Script]]) -> None:
    url, holder = stub
    holder.append(Script((429, {"Retry-After": "120"}, error("export_in_progress")), CREATED))
    with Client(url, "k", retry=RetryPolicy(max_retry_after_s=30)) as pg, pytest.raises(RateLimited) as limited:
        pg.create_memory("x")
    assert limited.value.retry_after_s == 120 and len(holder[0].seen) == 1


def test_other_errors_are_not_retried_and_a_non_json_error_is_still_typed(stub: tuple[str, list[Script]]) -> None:
    url, holder = stub
    holder.append(Script((500, {}, {"unexpected": True}), CREATED))
    with Client(url, "k", retry=FAST) as pg, pytest.raises(ServerError) as failed:
        pg.health()
    assert failed.value.status == 500 and failed.value.code == "http_500" and len(holder[0].seen) == 1


async def test_the_async_client_retries_the_same_way(stub: tuple[str, list[Script]]) -> None:
    url, holder = stub
    holder.append(Script((503, {"Retry-After": "0"}, error("overloaded")), (429, {}, error("slow_down")),
                         (200, {}, {"status": "ok", "checks": {}})))
    async with AsyncClient(url, "k", retry=FAST) as pg:
        health = await pg.health()
    assert health.status == "ok" and len(holder[0].seen) == 3


def test_attempts_must_be_positive() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)

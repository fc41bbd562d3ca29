"""The Python client's connections and retries, against the live service through a small TCP relay that
counts connections and can drop an answer (the request reaches the service, its answer never reaches the
client), and against a small scripted HTTP server where the live service cannot be made to answer as
needed (a ``Retry-After`` date, a 503 after a write)."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from pgcontext_client import (
    AsyncClient,
    Client,
    Conflict,
    DeadlineExceeded,
    MessageIn,
    Overloaded,
    PgcontextError,
    RateLimited,
    RetryPolicy,
    ServiceUnavailable,
    TransportError,
    ValidationError,
)

from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.live import live_service

pytestmark = pytest.mark.integration

FAST = RetryPolicy(attempts=4, backoff_s=0.01, max_backoff_s=0.05)
ANSWER = tuple[int, dict[str, str], bytes]


class Relay:
    """A TCP relay to ``upstream``: counts the connections it accepts; the first ``drop`` of them carry
    their request to the service and close as its answer starts to come back (the write was made, the
    client never hears of it)."""

    def __init__(self, upstream: tuple[str, int], *, drop: int = 0) -> None:
        self.upstream = upstream
        self.drop = drop
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                downstream, _ = self.listener.accept()
                self.connections += 1
                dropping = self.connections <= self.drop
                upstream = socket.create_connection(self.upstream)
                threading.Thread(target=self._pipe, args=(downstream, upstream, False), daemon=True).start()
                threading.Thread(target=self._pipe, args=(upstream, downstream, dropping), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket, dropping: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if dropping:
                    break
                sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.listener.close()


def relay_to(url: str, *, drop: int = 0) -> Relay:
    host, port = url.removeprefix("http://").split(":")
    return Relay((host, int(port)), drop=drop)


class Script:
    """A small HTTP server answering (status, headers, body) in order, the last one repeated, and
    recording when each request came; ``start()`` may be called late (nothing listens before). An
    answer whose headers give a ``Content-Length`` longer than its body breaks off there."""

    def __init__(self, *answers: ANSWER, port: int = 0) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str, float]] = []
        self.headers: list[dict[str, str]] = []
        self.delay_s = 0.0
        """How long each answer waits before it starts."""
        self.port = port
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> Script:
        script = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                script.seen.append((self.command, self.path, time.monotonic()))
                script.headers.append(dict(self.headers))
                time.sleep(script.delay_s)
                status, headers, body = script.answers.pop(0) if len(script.answers) > 1 else script.answers[0]
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                if "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                else:  # a body shorter than it says: the connection closes part-way
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def keys(self) -> list[str | None]:
        """Each request's ``Idempotency-Key``."""
        return [headers.get("Idempotency-Key") for headers in self.headers]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@contextlib.contextmanager
def scripted(*answers: ANSWER) -> Iterator[Script]:
    script = Script(*answers).start()
    try:
        yield script
    finally:
        script.stop()


def error(status: int, code: str, headers: dict[str, str] | None = None) -> ANSWER:
    body = {"error": {"code": code, "message": f"{code} now", "details": {}, "request_id": "rid-1"}}
    return status, headers or {}, msgspec.json.encode(body)


def ok(body: dict[str, Any]) -> ANSWER:
    return 200, {}, msgspec.json.encode(body)


UNDO_OK = ok({"undone": "01a22ddc-3507-74bb-9886-f62081aacd52", "event": "01a22ddc-3507-74bb-9886-f62081aacd53",
              "restored": None, "reinstated": []})


async def test_an_append_whose_answer_was_lost_is_sent_again_and_written_once(live_url: str,
                                                                              tenant: Tenant) -> None:
    """Messages without ``message_id``: the append reaches the service, the connection breaks before its
    answer; the client sends it again with the same ``Idempotency-Key`` and gets the first answer."""
    chat = f"lost-{uuid4().hex[:8]}"
    turns = [MessageIn(content="Where did I park?", role="user"), MessageIn(content="Level 3.", role="assistant")]
    relay = relay_to(live_url, drop=1)
    try:
        with Client(relay.url, tenant.key, retry=FAST) as pg:
            appended = pg.append_messages(chat, turns)
        assert relay.connections == 2 and appended.message_count == 2 and appended.created
    finally:
        relay.close()
    relay = relay_to(live_url, drop=1)
    try:
        async with AsyncClient(relay.url, tenant.key, retry=FAST) as apg:
            again = await apg.append_messages(chat, turns[:1])
        assert relay.connections == 2 and again.message_count == 3
    finally:
        relay.close()
    with Client(live_url, tenant.key) as pg:
        contents = [m.content for m in pg.list_messages(chat).items]
    assert contents == ["Where did I park?", "Level 3.", "Where did I park?"]


def test_feedback_whose_answer_was_lost_is_sent_again_and_applied_once(live_url: str, tenant: Tenant) -> None:
    """Feedback moves usefulness each time it is applied; its retry carries the call's Idempotency-Key, which
    the service answers with the first answer."""
    with Client(live_url, tenant.key) as pg:
        memory = pg.create_memory("The car is on level 3.", agent_id=f"fb-{uuid4().hex[:8]}")
    relay = relay_to(live_url, drop=1)
    try:
        with Client(relay.url, tenant.key, retry=FAST) as pg:
            assert pg.feedback({memory.id: True}).updated[0].feedback_count == 1
        assert relay.connections == 2
    finally:
        relay.close()
    with Client(live_url, tenant.key) as pg:
        assert pg.feedback({memory.id: True}).updated[0].feedback_count == 2  # the lost call's, then this one


def test_a_call_that_is_not_repeatable_is_sent_once_nothing_listened() -> None:
    """No connection was made, so nothing was sent: even an undo is tried again (the service restarting)."""
    script = Script(UNDO_OK, port=free_port())
    timer = threading.Timer(0.2, script.start)
    timer.start()
    try:
        policy = RetryPolicy(attempts=4, backoff_s=0.4, max_backoff_s=0.8)
        with Client(script.url, "k", retry=policy) as pg:
            answer = pg.undo_event(uuid4(), uuid4())
        assert answer.reinstated == [] and len(script.seen) == 1
    finally:
        timer.join()
        script.stop()


def test_a_503_that_may_follow_a_write_is_not_retried_for_a_call_that_is_not_repeatable() -> None:
    """A 503 ``database_unavailable`` can come after the commit: an undo is not sent again (the second
    would answer ``already_undone``), a search is; a 503 ``overloaded`` or a 429 is a refusal, retried for both."""
    with scripted(error(503, "database_unavailable", {"Retry-After": "0"}), UNDO_OK) as script:
        with Client(script.url, "k", retry=FAST) as pg, pytest.raises(ServiceUnavailable) as failed:
            pg.undo_event(uuid4(), uuid4())
        assert failed.value.code == "database_unavailable" and len(script.seen) == 1
    search = ok({"query": "q", "requested_strategy": "auto", "strategy": "lexical", "reason": "r",
                 "fallback_reason": None, "results": [],
                 "metrics": {"total_ms": 1.0, "embedding_ms": None, "lexical_ms": 1.0, "semantic_ms": None,
                             "fusion_ms": 0.0, "lexical_candidates": 0, "semantic_candidates": None,
                             "final_count": 0},
                 "retrieval": {"planned": "lexical", "ran": "lexical", "reduced": False, "reason": "planned"}})
    with scripted(error(503, "database_unavailable"), search) as script, Client(script.url, "k", retry=FAST) as pg:
        assert pg.search("q").results == [] and len(script.seen) == 2
    with scripted(error(503, "overloaded"), error(429, "rate_limited"), UNDO_OK) as script:
        with Client(script.url, "k", retry=FAST) as pg:
            assert pg.undo_event(uuid4(), uuid4()).reinstated == []
        assert len(script.seen) == 3


async def test_a_write_whose_key_is_still_in_progress_is_sent_again_for_its_answer() -> None:
    """409 ``idempotency_in_progress``: the first request with the key is still running; the retry (same
    key) gets its answer. Another 409 (the key used with another body) is raised at once."""
    created: ANSWER = (201, {}, msgspec.json.encode({"ids": ["01a22ddc-3507-74bb-9886-f62081aacd52"]}))
    with scripted(error(409, "idempotency_in_progress"), created) as script:
        async with AsyncClient(script.url, "k", retry=FAST) as apg:
            written = await apg.create_memory("The car is on level 3.")
        assert str(written.id) == "01a22ddc-3507-74bb-9886-f62081aacd52"
        assert len(script.keys) == 2 and script.keys[0] == script.keys[1] and script.keys[0]
    with scripted(error(409, "idempotency_key_reused"), created) as script:
        with Client(script.url, "k", retry=FAST) as pg, pytest.raises(Conflict) as reused:
            pg.create_memory("The car is on level 3.", idempotency_key="mine")
        assert reused.value.code == "idempotency_key_reused" and script.keys == ["mine"]


async def test_retry_after_as_an_http_date_is_waited_for() -> None:
    """A proxy or load balancer may send ``Retry-After`` as an HTTP date: the client waits until then."""
    def at(seconds: float) -> dict[str, str]:
        return {"Retry-After": email.utils.formatdate(time.time() + seconds, usegmt=True)}

    with scripted(error(503, "overloaded", at(2)), ok({"status": "ok", "checks": {}})) as script:
        with Client(script.url, "k", retry=FAST) as pg:
            assert pg.health().status == "ok"
        (_, _, first), (_, _, second) = script.seen
        assert 0.9 <= second - first < 3.5, second - first  # not the 10 ms backoff
    with scripted(error(429, "rate_limited", at(30))) as script:
        async with AsyncClient(script.url, "k", retry=RetryPolicy(attempts=1)) as apg:
            with pytest.raises(RateLimited) as limited:
                await apg.health()
        assert isinstance(limited.value.retry_after_s, float) and 28 <= limited.value.retry_after_s <= 30
    past = {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}
    with (scripted(error(503, "overloaded", past), ok({"status": "ok", "checks": {}})) as script,
          Client(script.url, "k", retry=RetryPolicy(attempts=2, backoff_s=5)) as pg):
        started = time.monotonic()
        assert pg.health().status == "ok" and time.monotonic() - started < 1  # a date past: at once


async def test_one_async_client_serves_loops_in_threads_at_once_with_a_pool_each(live_url: str,
                                                                                 tenant: Tenant) -> None:
    """Worker threads each running an event loop share one ``AsyncClient``: each loop keeps its own
    connections (three at most here), instead of one loop's call replacing another's pool."""
    agent = f"loops-{uuid4().hex[:8]}"
    relay = relay_to(live_url)
    pg = AsyncClient(relay.url, tenant.key)
    answers: list[str] = []

    def worker() -> None:
        async def calls() -> None:
            for _ in range(15):
                found = await asyncio.gather(*(pg.get_directive(agent) for _ in range(3)))
                answers.extend(d.content for d in found)

        asyncio.run(calls())

    try:
        with Client(live_url, tenant.key) as sync:
            sync.put_directive(agent, "Be brief.")
        threads = [threading.Thread(target=worker) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert answers.count("Be brief.") == 135
        assert relay.connections <= 9, relay.connections  # 3 loops x 3 at once
        await pg.aclose()
    finally:
        relay.close()


async def test_a_path_prefix_is_kept_and_an_answer_not_from_the_service_is_a_typed_error() -> None:
    """Behind a proxy at ``/pgc/`` every call goes under it; a success answer that is a web page (a URL
    missing its prefix lands on the proxy's own site) is a ``PgcontextError`` naming what answered."""
    page = (200, {"Content-Type": "text/html"}, b"<html><body>Welcome to nginx!</body></html>")
    with scripted(page) as script:
        for base in (f"{script.url}/pgc", f"{script.url}/pgc/"):
            with Client(base, "k", retry=FAST) as pg, pytest.raises(PgcontextError) as wrong:
                pg.get_memory("a.b")
            assert script.seen[-1][:2] == ("GET", "/pgc/v1/memories/a.b")
            error = wrong.value
            assert error.code == "invalid_response" and error.status == 200 and "text/html" in error.message
            assert f"{script.url}/pgc/v1/memories/a.b" in error.message and "Memory" in error.message
        async with AsyncClient(script.url, "k", retry=FAST) as apg:
            with pytest.raises(PgcontextError) as awrong:
                await apg.search("q")
        assert awrong.value.code == "invalid_response" and script.seen[-1][:2] == ("POST", "/v1/memories/search")


async def test_an_empty_id_is_refused_before_anything_is_sent(live_url: str, tenant: Tenant) -> None:
    """``/v1/memories/`` + "" is another endpoint (``DELETE /v1/memories`` erases an agent, ``GET`` lists):
    an empty id in a path is a ``ValidationError`` and no request; on ``AsyncClient`` where it is awaited."""
    relay = relay_to(live_url)
    try:
        with Client(relay.url, tenant.key) as pg:
            for call in (lambda: pg.delete_memory(""), lambda: pg.get_memory(""), lambda: pg.list_messages(""),
                         lambda: pg.delete_directive(""), lambda: pg.undo_event(uuid4(), "")):
                with pytest.raises(ValidationError, match="empty"):
                    call()
        async with AsyncClient(relay.url, tenant.key) as apg:
            pending = apg.delete_conversation("")  # nothing raised yet
            refused, health = await asyncio.gather(pending, apg.health(), return_exceptions=True)
        assert isinstance(refused, ValidationError) and not isinstance(health, BaseException)
        assert relay.connections == 1  # the health check's
    finally:
        relay.close()


async def test_a_deadline_holds_across_retries(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                               tenant: Tenant) -> None:
    """``assemble(timeout_ms=...)`` is the caller's deadline for the whole call: refused with 503
    ``overloaded`` and ``Retry-After: 1`` (held until its deadline), a call of 400 ms does not wait the
    second out (its retry would start past the deadline) but raises the refusal."""
    agent = f"deadline-{uuid4().hex[:8]}"
    with live_service(settings, endpoints, embedder, retrieval={"branch_delay_ms": 800},
                      assembly={"max_in_flight": 1, "max_queued": 0}) as url:
        async with AsyncClient(url, tenant.key) as pg:
            await pg.create_memory("The espresso machine is on the third floor.", agent_id=agent)
            first = asyncio.create_task(pg.assemble(agent, "where is the espresso machine?",
                                                    max_context_tokens=2000))
            await asyncio.sleep(0.2)  # the first holds the only place
            started = time.monotonic()
            with pytest.raises(Overloaded) as refused:
                await pg.assemble(agent, "where is the espresso machine?", max_context_tokens=2000,
                                  timeout_ms=400)
            elapsed = time.monotonic() - started
            assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1
            assert elapsed < 0.9, elapsed  # the refusal comes at the deadline; no second waited after it
            assert "espresso" in (await first).context


def test_a_retry_sends_what_is_left_of_the_deadline_and_a_silent_try_ends_past_it() -> None:
    with scripted(error(503, "overloaded", {"Retry-After": "0.3"}), error(504, "deadline_exceeded")) as script:
        with Client(script.url, "k", retry=FAST) as pg, pytest.raises(DeadlineExceeded):
            pg.assemble("a", "q", max_context_tokens=1000, timeout_ms=3000)
        first, second = (int(headers["X-Timeout-Ms"]) for headers in script.headers)
        assert first == 3000 and 2000 < second <= 2700, (first, second)
    with scripted(error(504, "deadline_exceeded")) as script:
        script.delay_s = 5  # nothing answers in time
        started = time.monotonic()
        with Client(script.url, "k", retry=FAST) as pg, pytest.raises(TransportError) as silent:
            pg.assemble("a", "q", max_context_tokens=1000, timeout_ms=300)
        assert 1.2 <= time.monotonic() - started < 2.5 and "timeout_ms=300" in silent.value.message
        assert len(script.headers) == 1  # no retry past the deadline


def test_iterate_stops_on_a_listing_that_answers_its_own_cursor_again() -> None:
    """A listing that answers the cursor it was given (a broken proxy cache) would be read forever."""
    page = ok({"items": [], "next_cursor": "c1"})
    with scripted(page) as script, Client(script.url, "k") as pg, pytest.raises(PgcontextError) as loop:
        list(pg.iterate(pg.list_conversations))
    assert loop.value.code == "cursor_loop" and len(script.seen) == 2
    assert script.seen[1][1] == "/v1/conversations?cursor=c1"

"""``pgcontext mcp`` over stdio as a raw JSON-RPC peer sees it: every line is answered (a malformed one
with a JSON-RPC error, so a client never waits forever), the session goes on after one, and the server
exits cleanly when its input closes or on SIGTERM."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from typing import IO, Any
from uuid import uuid4

import pytest

from tests.conftest import Tenant
from tests.integration.test_cli import PGCONTEXT, clean_env
from tests.processes import stop_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}


LINES: dict[int, queue.Queue[str]] = {}
"""Each server's output lines (by pid), read by a thread: a line that never comes fails the test."""


def started(live_url: str, tenant: Tenant) -> subprocess.Popen[str]:
    env = clean_env(PGCONTEXT_URL=live_url, PGCONTEXT_API_KEY=tenant.key, PGCONTEXT_AGENT_ID=f"mcp-{uuid4().hex[:8]}")
    proc = subprocess.Popen([*PGCONTEXT, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    LINES[proc.pid] = lines

    def read(out: IO[str]) -> None:
        for line in out:
            lines.put(line)

    threading.Thread(target=read, args=(proc.stdout,), daemon=True).start()
    return proc


def send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        line = LINES[proc.pid].get(timeout=20)
    except queue.Empty:
        raise AssertionError("no answer within 20 s") from None
    message: dict[str, Any] = json.loads(line)
    return message


def test_every_line_is_answered_and_the_session_goes_on(live_url: str, tenant: Tenant) -> None:
    proc = started(live_url, tenant)
    try:
        send(proc, json.dumps(INITIALIZE))
        assert answer(proc)["id"] == 1
        send(proc, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        send(proc, "this is not json")
        assert answer(proc) == {"jsonrpc": "2.0", "id": None,
                                "error": {"code": -32700, "message": "Parse error: not JSON"}}
        send(proc, json.dumps({"jsonrpc": "2.0", "id": 7, "method": 5}))  # JSON, but not a request
        rejected = answer(proc)
        assert rejected["id"] == 7 and rejected["error"]["code"] == -32600, rejected
        send(proc, json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                               "params": {"name": "get_directive", "arguments": {}}}))
        assert answer(proc) == {"jsonrpc": "2.0", "id": 8, "result": {
            "content": [{"type": "text", "text": json.dumps({"version": 0, "content": None}, indent=2)}],
            "isError": False, "structuredContent": {"version": 0, "content": None}}}

        assert proc.stdin is not None
        proc.stdin.close()  # the client is gone: a clean exit, soon
        assert proc.wait(20) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        stop_process(proc, 10)


def test_sigterm_stops_it(live_url: str, tenant: Tenant) -> None:
    proc = started(live_url, tenant)
    try:
        send(proc, json.dumps(INITIALIZE))
        assert answer(proc)["id"] == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) in (0, -signal.SIGTERM)
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        stop_process(proc, 10)


def test_a_lone_surrogate_is_answered_under_its_request_id(live_url: str, tenant: Tenant) -> None:
    """A string cut inside an emoji (``"\\ud83d"``, as JavaScript's JSON.stringify writes it) is JSON that
    Python's json reads and the SDK's decoder refuses: it was answered as a parse error under id null, and
    the client waited for its request's answer until its own timeout."""
    proc = started(live_url, tenant)
    try:
        send(proc, json.dumps(INITIALIZE))
        assert answer(proc)["id"] == 1
        send(proc, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        line = ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"remember",'
                '"arguments":{"text":"I love \\ud83c"}}}')
        assert json.loads(line)["id"] == 2
        send(proc, line)
        assert answer(proc) == {"jsonrpc": "2.0", "id": 2, "error": {"code": -32600, "message": (
            "Invalid Request: a string holds a lone surrogate escape (such as \\ud83d without its pair), which is "
            "not a Unicode character")}}
        send(proc, json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                               "params": {"name": "get_directive", "arguments": {}}}))
        assert answer(proc)["id"] == 3  # the session goes on
    finally:
        stop_process(proc, 10)

"""serve's signal handling and supervisor, in process: a real uvicorn server and real child processes
(the full `pgcontext serve` runs are in tests/integration/test_lifecycle.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from structlog.testing import capture_logs

from service.embedded.lifecycle import Supervisor, read_status, stop_on_signals
from service.embedded.postgres import free_port


async def _app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def restores_handlers() -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        after = {sig: signal.getsignal(sig) for sig in before}
        for sig, handler in before.items():
            signal.signal(sig, handler)
        assert after == before, "stop_on_signals did not restore the handlers it replaced"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_reraised_by_uvicorn_unwinds_through_the_clean_up(sig: signal.Signals, restores_handlers: None) -> None:
    server = uvicorn.Server(uvicorn.Config(_app, host="127.0.0.1", port=free_port(), lifespan="off",
                                           log_level="warning"))

    def signal_once_serving() -> None:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(os.getpid(), sig)

    threading.Thread(target=signal_once_serving, daemon=True).start()
    steps: list[str] = []
    with capture_logs() as logs, stop_on_signals():
        try:
            server.run()
            steps.append("returned")  # not reached: the re-raised signal unwinds from here
        finally:
            steps.append("clean-up")  # where serve stops its embedded servers
    assert steps == ["clean-up"]
    assert server.started and {"event": "serve_stopped", "signal": sig.name, "log_level": "info"} in logs


def test_a_second_signal_does_not_cut_the_clean_up_short(restores_handlers: None) -> None:
    steps: list[str] = []
    with stop_on_signals():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted by the handler
        finally:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            steps.append("clean-up finished")
    assert steps == ["clean-up finished"]


_SERVER = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); print(flush=True); "
           "time.sleep(60)")


class SleepingServer:
    """A real child process standing for an embedded server: exits 0 on SIGTERM as Redis does; its
    restart can be made to fail."""

    def __init__(self) -> None:
        self.proc = self._spawn()
        self.starts = 1
        self.failures_to_come = 0

    @staticmethod
    def _spawn() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        proc.stdout.readline()  # its SIGTERM handler is in place
        proc.stdout.close()
        return proc

    @property
    def owned(self) -> bool:
        return True

    def crashed(self) -> bool:
        return self.proc.poll() not in (None, 0)

    def running(self) -> bool:
        return self.proc.poll() is None

    def down_reason(self) -> str:
        return f"exited with status {self.proc.poll()}"

    def restart(self) -> None:
        if self.failures_to_come:
            self.failures_to_come -= 1
            raise RuntimeError("could not start")
        self.proc = self._spawn()
        self.starts += 1

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def wait_for(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_supervisor_restarts_a_dead_server_and_backs_off_on_failures() -> None:
    server = SleepingServer()
    try:
        with capture_logs() as logs, Supervisor(interval_s=0.05) as supervisor:
            supervisor.watch("sleeper", server)
            server.proc.kill()
            wait_for(lambda: server.starts == 2)

            server.failures_to_come = 2
            server.proc.kill()
            wait_for(lambda: server.starts == 3)
        events = [e["event"] for e in logs]
        assert events == ["embedded_sleeper_died", "embedded_sleeper_restarted",  # one "died" per outage
                          "embedded_sleeper_died", "embedded_sleeper_restart_failed",
                          "embedded_sleeper_restart_failed", "embedded_sleeper_restarted"], events
        assert [e["retry_in_s"] for e in logs if "retry_in_s" in e] == [0.1, 0.2]
        # Left: no restart once the supervisor has stopped (serve then stops the servers itself).
        server.proc.kill()
        time.sleep(0.2)
        assert server.starts == 3
    finally:
        server.stop()


def test_supervisor_leaves_a_cleanly_stopped_server_stopped() -> None:
    """systemd's stop sends SIGTERM to every process of the unit: the servers exit cleanly while
    `serve` shuts down, and must not be started again behind its back."""
    server = SleepingServer()
    try:
        with capture_logs() as logs, Supervisor(interval_s=0.05) as supervisor:
            supervisor.watch("sleeper", server)
            server.proc.terminate()
            assert server.proc.wait(10) == 0
            time.sleep(0.3)
        assert server.starts == 1 and logs == []
    finally:
        server.stop()


def test_supervisor_restarts_a_server_that_exited_on_its_own_and_says_why_meanwhile(tmp_path: Path) -> None:
    """A Postgres whose crash recovery fails (e.g. on a full disk) exits and removes its pid file, as a
    clean stop does: a server gone while serve runs is started again whatever the reason, once a grace
    has passed in which serve's own stop (systemd signalling every process) would have ended the
    supervisor. Until it is back, the status file (/readyz reads it) names why."""
    server = SleepingServer()
    status = tmp_path / "supervisor.json"
    try:
        with capture_logs() as logs, Supervisor(interval_s=0.05, clean_exit_grace_s=0.3,
                                                status_file=status) as supervisor:
            supervisor.watch("sleeper", server)
            server.failures_to_come = 2
            server.proc.terminate()
            assert server.proc.wait(10) == 0
            wait_for(lambda: "sleeper" in read_status(status))
            assert read_status(status)["sleeper"].startswith("down: exited with status 0")
            wait_for(lambda: server.starts == 2)
            wait_for(lambda: read_status(status) == {})
        events = [(e["event"], e.get("reason")) for e in logs]
        assert events == [("embedded_sleeper_died", "exited with status 0"),
                          ("embedded_sleeper_restart_failed", "exited with status 0"),
                          ("embedded_sleeper_restart_failed", "exited with status 0"),
                          ("embedded_sleeper_restarted", None)], events
        assert not status.exists()
    finally:
        server.stop()


def test_the_status_of_a_supervisor_that_is_gone_is_not_read(tmp_path: Path) -> None:
    """``kill -9`` of serve while a server was down leaves the file: it names a dead process."""
    status = tmp_path / "supervisor.json"
    status.write_text('{"pid": 999999999, "started": 1, "servers": {"postgres": "down: disk full"}}')
    assert read_status(status) == {}

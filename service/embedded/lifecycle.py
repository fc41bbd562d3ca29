"""How ``pgcontext serve`` stops and stays up: signals that always reach its clean-up, and a
supervisor that restarts an embedded server dying under it."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Protocol

import structlog

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

    def crashed(self) -> bool:
        """Gone without a clean shutdown (killed, crashed): a server stopped on purpose stays stopped."""

    def restart(self) -> None: ...


class Supervisor:
    """Polls the embedded servers this process owns and starts again any that died (were killed or
    crashed; one stopped cleanly, e.g. by the SIGTERM systemd sends every process of a unit while
    ``serve`` shuts down too, is left stopped).

    A thread rather than a task: ``serve`` hands the main thread to uvicorn (or to its worker
    supervisor), and the check is a few ``/proc`` reads every ``interval_s``."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self._servers: dict[str, Supervised] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, name: str, server: Supervised) -> None:
        self._servers[name] = server

    def __enter__(self) -> Supervisor:
        self._thread = threading.Thread(target=self._run, name="embedded-supervisor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """Joined before the servers are stopped, so no restart races their shutdown."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        failures: dict[str, int] = {}
        retry_at: dict[str, float] = {}
        while not self._stop.wait(self.interval_s):
            for name, server in self._servers.items():
                if self._stop.is_set() or not server.owned or time.monotonic() < retry_at.get(name, 0):
                    continue
                if not server.crashed():
                    continue
                log.warning(f"embedded_{name}_died")
                started = time.perf_counter()
                try:
                    server.restart()
                except Exception as exc:  # keep watching: try again later, less often each time
                    failures[name] = failures.get(name, 0) + 1
                    backoff_s = min(self.interval_s * 2 ** failures[name], 30.0)
                    retry_at[name] = time.monotonic() + backoff_s
                    log.error(f"embedded_{name}_restart_failed", error=repr(exc)[:500], retry_in_s=backoff_s)
                    continue
                failures.pop(name, None)
                log.warning(f"embedded_{name}_restarted", ms=round((time.perf_counter() - started) * 1000))

"""Prometheus metrics that add up across ``pgcontext serve --workers N``.

Each worker is its own process with its own counters, so a scrape of ``/metrics`` would otherwise
show whichever worker answered. prometheus-client's multiprocess mode has every worker write its
values to memory-mapped files in ``PROMETHEUS_MULTIPROC_DIR`` and ``/metrics`` (Litestar's
``PrometheusController``, which switches to a ``MultiProcessCollector`` when the variable is set)
merges them: counters and histograms are summed over every worker that ever ran, the in-progress
gauge (``multiprocess_mode="livesum"``) over the live ones.

The variable must be set before a worker imports prometheus_client (it picks its value class at
import), so ``serve`` sets it before starting the workers, which inherit it. The directory is
``<data dir>/metrics/<serve's pid>``: fresh at every start (files left by a previous run would add
its counts to ours), removed at exit, and directories of runs that are gone are removed at the next
start. A worker that exits marks itself dead, so its live gauges stop counting.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from service.embedded.ownership import ProcessId

if TYPE_CHECKING:
    from litestar import Litestar

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@contextlib.contextmanager
def multiprocess_metrics(data_dir: Path) -> Iterator[Path]:
    """Set ``PROMETHEUS_MULTIPROC_DIR`` to a fresh directory for the workers started inside."""
    root = data_dir / "metrics"
    root.mkdir(parents=True, exist_ok=True)
    for entry in root.iterdir():
        # Another serve sharing this data dir keeps its own directory; a gone one's is removed.
        if not (entry.name.isdigit() and ProcessId.of(int(entry.name)) is not None):
            shutil.rmtree(entry, ignore_errors=True)
    own = root / str(os.getpid())
    shutil.rmtree(own, ignore_errors=True)
    own.mkdir()
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = str(own)
    try:
        yield own
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(own, ignore_errors=True)


def mark_dead_on_shutdown(app: Litestar) -> Litestar:
    """In a worker: once its app has shut down, drop its live gauges from the merged view.

    An app shutdown hook, not ``atexit``: uvicorn ends a worker by raising the stop signal again
    with the default action, so the interpreter's exit handlers never run. A worker killed outright
    cannot mark itself; its files go with the directory when ``serve`` stops."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        pid = os.getpid()
        app.on_shutdown.append(lambda: multiprocess.mark_process_dead(pid))  # type: ignore[no-untyped-call]
    return app


SERVE_PID_ENV = "pgcontext_serve_pid"  # lower case: internal, not a setting
_PR_SET_PDEATHSIG = 1


def worker_app() -> Litestar:
    """Factory for the worker processes of ``pgcontext serve --workers N``.

    A worker ends with the process that started it: were ``serve`` killed with ``kill -9``, its
    workers would otherwise serve on as orphans, holding the port the next start needs and
    connections to the embedded servers that start adopts."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if str(os.getppid()) != os.environ.get(SERVE_PID_ENV, str(os.getppid())):
            os.kill(os.getpid(), signal.SIGTERM)  # the parent died before the line above took effect
    from service.app import app_from_env

    return mark_dead_on_shutdown(app_from_env())

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

import atexit
import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from service.ownership import ProcessId

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


def mark_dead_at_exit() -> None:
    """In a worker: when it exits, drop its live gauges from the merged view (a worker killed outright
    cannot, and is cleared with the directory when ``serve`` stops)."""
    if not os.environ.get(MULTIPROC_ENV):
        return
    from prometheus_client import multiprocess

    atexit.register(multiprocess.mark_process_dead, os.getpid())

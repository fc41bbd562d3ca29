"""benchmarks/assemble_load.py's own parts: its CPU accounting (the service's main threads, i.e. event loops,
apart from its other threads) and its settings for the services it starts."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks._common import SERVICE_MAIN_THREADS, cpu_seconds_by_group
from benchmarks.assemble_load import Level, service_env

# A stand-in "service" (its command line carries the needle): one thread spins, the main thread sleeps.
SPIN_IN_A_THREAD = """
import threading, time
def spin():
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass
t = threading.Thread(target=spin)
t.start()
t.join()
print("done", flush=True)
time.sleep(30)
# service.cli serve
"""


def test_cpu_line_splits_the_service_into_event_loop_and_threads() -> None:
    level = Level("assemble", 8)
    level.cpu_ms = {"service": 7.6, SERVICE_MAIN_THREADS: 5.0, "postgres": 5.1, "loadgen": 0.4}
    assert level.cpu_line() == ("service 7.6 (event loop 5.0, threads 2.6), postgres 5.1, loadgen 0.4 "
                                "(total 13.1)")


def test_cpu_line_without_a_main_thread_reading_or_any_reading() -> None:
    level = Level("assemble", 8)
    assert level.cpu_line() == "-"
    level.cpu_ms = {"service": 7.6, "postgres": 5.1}
    assert level.cpu_line() == "service 7.6, postgres 5.1 (total 12.7)"


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
def test_a_service_threads_cpu_is_not_counted_as_its_event_loop() -> None:
    before = cpu_seconds_by_group()
    proc = subprocess.Popen([sys.executable, "-c", SPIN_IN_A_THREAD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        time.sleep(0.05)
        after = cpu_seconds_by_group()
    finally:
        proc.kill()
        proc.wait()
    service = after["service"] - before.get("service", 0.0)
    main = after[SERVICE_MAIN_THREADS] - before.get(SERVICE_MAIN_THREADS, 0.0)
    # The spinning thread's ~0.6 s counts for the service, not for its main threads (which slept);
    # other services on the machine may add to both, never to one alone beyond the other.
    assert service >= 0.5
    assert service - main >= 0.5
    assert main <= service


def test_service_env_takes_pgcontext_settings_only() -> None:
    assert service_env("PGCONTEXT_EMBEDDING_QUERY_CONCURRENCY=1") == ("PGCONTEXT_EMBEDDING_QUERY_CONCURRENCY", "1")
    assert service_env("PGCONTEXT_X=a=b") == ("PGCONTEXT_X", "a=b")
    for bad in ("PGCONTEXT_X", "PATH=/bin", "=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            service_env(bad)

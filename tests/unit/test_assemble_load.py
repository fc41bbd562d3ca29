"""benchmarks/assemble_load.py's own parts: its CPU accounting (the service's main threads, i.e. event loops,
apart from its other threads), its settings for the services it starts, its directive accounting and
its busy neighbours."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from benchmarks._common import SERVICE_MAIN_THREADS, cpu_seconds_by_group, noise
from benchmarks.assemble_load import service_env
from benchmarks.assembly_driver import Level, _Assembled, directive_in_context

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


def assembled(directive: object, reasons: list[str] | None = None) -> _Assembled:
    body: dict[str, object] = {"degradation_level": "L0", "metrics": {"total_ms": 12.0}, "directive": directive,
                               "branches": {"directive": {"outcome": "ok"}, "cold": {"outcome": "ok"}}}
    if reasons is not None:
        body["degradation_reasons"] = reasons
    return msgspec.json.decode(msgspec.json.encode(body), type=_Assembled)


def test_each_assembly_holds_its_directive_or_reports_it_missing() -> None:
    level = Level("assemble", 4)
    held = {"content": "You are ...", "version": 1, "updated_at": "2026-12-01T00:00:00Z"}
    outcomes = [assembled(held, []), assembled(held, ["directive_unconfirmed"]),
                assembled(None, ["directive_missing", "hot_unavailable"]),
                assembled(None, []),
                assembled(None)]  # a service that does not report reasons: unreported
    for out in outcomes:
        level.directive_in_context[directive_in_context(out)] += 1
    assert level.directive_in_context == {"present": 1, "unconfirmed": 1, "reported": 1, "missing": 2}
    assert level.directive_line() == ("present 2 (40.00%; last copy 1), reported missing 1 (20.00%), "
                                      "missing unreported 2")


def session_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc (Linux)")
def test_noise_runs_busy_processes_each_in_a_session_of_its_own_and_stops_them() -> None:
    with noise(2) as pids:
        assert len(pids) == 2
        sessions = {session_of(pid) for pid in pids}
        assert sessions == set(pids) and os.getsid(0) not in sessions  # each leads its own session
        time.sleep(0.3)
        busy = [float(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11]) for pid in pids]
        assert all(ticks > 0 for ticks in busy)  # they spin (user CPU time)
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]

"""Stopping a child process the tests started: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(proc: subprocess.Popen[Any], timeout_s: float = 30, kill_wait_s: float = 10) -> int:
    """Terminate ``proc`` and return its exit code; kill it when it has not exited within ``timeout_s``
    (a test must not hang on a child that ignores SIGTERM). An exited process is left as it is."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(kill_wait_s)
    return proc.returncode

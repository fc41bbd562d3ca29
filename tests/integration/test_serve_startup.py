"""What ``pgcontext serve`` prints and refuses at start, run as a new user runs it (``make run``): a
first run on a fresh data dir prints the new key and the address and nothing else at the default log
level, operator commands run beside it print only their own output, and a port in use is refused at
once, before anything starts."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import structlog

from service.cli.main import main
from service.embedded.postgres import free_port
from tests.integration.test_cli import PGCONTEXT, ROOT, Output, clean_env, run, wait_until_answering
from tests.integration.test_lifecycle import assert_nothing_left, kill_all

KEY_INTRO = re.compile(r"Created org 'default' \([0-9a-f-]{36}\)\. Its API key \(shown once\):")
KEY = re.compile(r"pgc_[A-Za-z0-9_-]{43}")


def default_env(data_dir: Path, port: int) -> dict[str, str]:
    """The environment of ``make run``: no PGCONTEXT_* variable but the data dir and the port, so the log
    level is the default (info)."""
    env = clean_env(PGCONTEXT_DATA_DIR=str(data_dir), PGCONTEXT_PORT=str(port))
    del env["PGCONTEXT_LOG_LEVEL"]
    return env


@pytest.mark.slow
def test_a_first_run_prints_the_key_and_the_address_and_nothing_else(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"  # fresh: no cluster, no model yet (both are made by this start)
    port = free_port()
    env = default_env(data_dir, port)
    proc = subprocess.Popen([*PGCONTEXT, "serve"], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        wait_until_answering(proc, out, f"http://127.0.0.1:{port}/readyz", timeout_s=300)
        lines = out.text().splitlines()
        assert len(lines) == 3, out.text()
        assert KEY_INTRO.fullmatch(lines[0]) and KEY.fullmatch(lines[1]), out.text()
        assert lines[2] == f"pgcontext serving on http://127.0.0.1:{port} with 1 worker(s) (docs: /schema)"

        # Operator commands beside it attach to its embedded Postgres and print only their output.
        listed = run(env, "keys", "list", "--org", "default")
        assert listed.stderr == "" and f"{lines[1][:10]}…" in listed.stdout, listed
        migrated = run(env, "migrate")
        assert migrated.stderr == "" and migrated.stdout.startswith("schema already at head ("), migrated
        orgs = run(env, "orgs", "list")
        assert orgs.stderr == "" and orgs.stdout.splitlines()[1].split()[0] == "default", orgs

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, out.text()
        stopped = out.text().splitlines()[3:]
        assert len(stopped) == 1 and '"event":"serve_stopped"' in stopped[0], out.text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
            kill_all(data_dir)
    assert_nothing_left(data_dir)


def test_a_port_in_use_is_refused_at_once_before_anything_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data_dir = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        expected = f"error: cannot listen on 127.0.0.1:{port}: address already in use (another pgcontext serve?)\n"

        # In process (the command's imports are loaded): refused within a second, nothing made.
        for name, value in default_env(data_dir, port).items():
            if name.startswith("PGCONTEXT_"):
                monkeypatch.setenv(name, value)
        started = time.perf_counter()
        try:
            code = main(["serve"])
        finally:
            structlog.reset_defaults()
        took = time.perf_counter() - started
        assert (code, capsys.readouterr().err) == (2, expected)
        assert took < 1.0, took
        assert not data_dir.exists()

        # As a user runs it: one line on stderr, exit 2, nothing started.
        with contextlib.ExitStack() as cleanup:
            cleanup.callback(kill_all, data_dir)
            result = run(default_env(data_dir, port), "serve", ok=False)
        assert (result.returncode, result.stdout, result.stderr) == (2, "", expected)
        assert not data_dir.exists()

"""The CLI reports a bad environment value in one line (exit 2), not a traceback, and names a variable nothing reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from service.cli.main import main


def test_a_bad_setting_is_one_error_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PGCONTEXT_PORT", "eighty")
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: PGCONTEXT_PORT must be an integer") and "Traceback" not in err


def test_a_misspelt_variable_is_named_not_ignored() -> None:
    """As a user runs it (a process of its own: the command configures logging for the process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
    env["PGCONTEXT_RATE_LIMT_RPS"] = "3"
    done = subprocess.run([sys.executable, "-m", "service.cli", "config"], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr  # a warning: the command still runs
    assert done.stderr == ("warning: PGCONTEXT_RATE_LIMT_RPS is not a pgcontext variable and is ignored "
                           "(did you mean PGCONTEXT_RATE_LIMIT_RPS?)\n")
    assert re.search(r"^PGCONTEXT_RATE_LIMIT_RPS=150.0 +# default$", done.stdout, re.M)


@pytest.mark.parametrize("args", [["orgs", "create", "ev\nil"], ["orgs", "create", "nul\x01ctl"],
                                  ["orgs", "create", " padded"], ["orgs", "create", "x" * 201],
                                  ["keys", "create", "--org", "default", "--name", "two\nlines"],
                                  ["keys", "create", "--org", "default", "--name", "k" * 201]])
def test_names_that_would_break_a_listing_are_refused(args: list[str]) -> None:
    """An org's name and a key's label are listed one per table row: refused before anything is touched."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
    done = subprocess.run([sys.executable, "-m", "service.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: ") and "on one line" in done.stderr and "Traceback" not in done.stderr

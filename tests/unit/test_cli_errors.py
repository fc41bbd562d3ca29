"""The CLI reports a bad environment value in one line (exit 2), not a traceback, and names a variable nothing reads."""

from __future__ import annotations

import re

import pytest

from service.cli.main import main


def test_a_bad_setting_is_one_error_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PGCONTEXT_PORT", "eighty")
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: PGCONTEXT_PORT must be an integer") and "Traceback" not in err


def test_a_misspelt_variable_is_named_not_ignored(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PGCONTEXT_RATE_LIMT_RPS", "3")
    assert main(["config"]) == 0  # a warning: the command still runs
    captured = capsys.readouterr()
    assert captured.err == ("warning: PGCONTEXT_RATE_LIMT_RPS is not a pgcontext variable and is ignored "
                            "(did you mean PGCONTEXT_RATE_LIMIT_RPS?)\n")
    assert re.search(r"^PGCONTEXT_RATE_LIMIT_RPS=150.0 +# default$", captured.out, re.M)

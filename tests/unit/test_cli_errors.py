"""The CLI reports a bad environment value in one line (exit 2), not a traceback."""

from __future__ import annotations

import pytest

from service.cli.main import main


def test_a_bad_setting_is_one_error_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PGCONTEXT_PORT", "eighty")
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: PGCONTEXT_PORT must be an integer") and "Traceback" not in err

"""JSON log lines: one object per line; values msgspec cannot encode are logged as their repr."""

from __future__ import annotations

import ast
import io
import json
import sys
import uuid
from pathlib import Path

import pytest
import structlog

import service
from service.logs import configure


def test_json_lines_encode_uuids_lists_and_unknown_objects(capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", json=True)
    try:
        ident = uuid.uuid4()
        structlog.get_logger("t").info("context_assembled", org_id=ident, memory_ids=[ident], error=ValueError("x"),
                                        total_ms=1.5)
        structlog.get_logger("t").debug("filtered_out")
    finally:
        structlog.reset_defaults()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["event"] == "context_assembled" and line["level"] == "info" and line["total_ms"] == 1.5
    assert line["org_id"] == str(ident) and line["memory_ids"] == [str(ident)]
    assert line["error"] == "ValueError('x')" and line["timestamp"].endswith("Z")


def test_the_level_key_belongs_to_the_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    """``add_log_level`` overwrites an event's ``level`` key, so a field logged as ``level=`` is lost
    in production (``capture_logs`` in tests skips the processors and would not notice): the
    assembly's ladder level is logged as ``degradation_level``, and no log call in the service
    passes ``level=``."""
    configure("info", json=True)
    try:
        structlog.get_logger("t").info("context_assembled", level="L0", degradation_level="L0")
    finally:
        structlog.reset_defaults()
    line = json.loads(capsys.readouterr().err.strip())
    assert line["level"] == "info" and line["degradation_level"] == "L0"
    methods = {"debug", "info", "warning", "error", "exception", "critical"}
    offenders = [
        f"{path}:{node.lineno}"
        for path in Path(service.__file__).parent.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods
        and isinstance(node.func.value, ast.Name) and node.func.value.id in {"log", "logger"}
        and any(k.arg == "level" for k in node.keywords)
    ]
    assert offenders == []


class _Writes(io.RawIOBase):
    def __init__(self) -> None:
        self.calls: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.calls.append(bytes(data))
        return len(data)


def test_each_json_line_reaches_the_file_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Worker processes share stderr, which Python leaves unbuffered when it is not a terminal (each
    write is a syscall): a line written in two pieces (text, then newline, as ``print`` does) could
    be split by another process's line."""
    raw = _Writes()
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(raw, write_through=True))  # type: ignore[type-var]
    configure("info", json=True)
    try:
        for i in range(3):
            structlog.get_logger("t").info("context_assembled", memory_ids=[str(uuid.uuid4()) for _ in range(40)], n=i)
    finally:
        structlog.reset_defaults()
    assert len(raw.calls) == 3
    assert all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in raw.calls)
    assert [json.loads(c)["n"] for c in raw.calls] == [0, 1, 2]


def test_an_exception_logged_as_json_carries_its_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """An operator reading a 500's ``unhandled_error`` line needs where it failed, not only that it did."""
    configure("info", json=True)
    try:
        empty: dict[str, int] = {}
        try:
            empty["missing"]
        except KeyError:
            structlog.get_logger("t").exception("unhandled_error", error_type="KeyError")
    finally:
        structlog.reset_defaults()
    (line,) = capsys.readouterr().err.strip().splitlines()
    logged = json.loads(line)
    assert logged["event"] == "unhandled_error" and logged["level"] == "error"
    assert logged["exception"].startswith("Traceback (most recent call last):")
    assert "KeyError: 'missing'" in logged["exception"] and "test_logs.py" in logged["exception"]

"""JSON log lines: one object per line; values msgspec cannot encode are logged as their repr."""

from __future__ import annotations

import json
import uuid

import pytest
import structlog

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

"""Page cursors are checked before the database sees them: a cursor the service could not have issued
is 400 ``bad_cursor``, never the database's error about a time out of its range or text it cannot
store (sqlstate 22000, 22021)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from service.conversations.store import decode_created, decode_position
from service.documents.index import decode_cursor as decode_documents
from service.documents.index import encode_cursor as documents_cursor
from service.errors import BadRequest
from service.memories.repo import decode_cursor as decode_memories
from service.memories.repo import encode_cursor as memories_cursor


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode().rstrip("=")


def _bad_cursor(decode: Callable[[str], Any], raw: str) -> None:
    with pytest.raises(BadRequest) as caught:
        decode(_b64(raw))
    assert caught.value.code == "bad_cursor"


@pytest.mark.parametrize("raw", ["2026-12-05T20:29:09+14:00|\x00", "0001-01-01T00:00:00+14:00|x",
                                 "9999-12-31T23:59:59-14:00|x", "2026-12-05T20:29:09|x", "2026-12-05T20:29:09Z|a b",
                                 "2026-12-05T20:29:09Z|" + "x" * 201, "2026-12-05T20:29:09Z|", "|x", "x", "2026|x"])
def test_a_conversations_cursor_is_a_time_postgres_takes_and_an_id(raw: str) -> None:
    _bad_cursor(decode_created, raw)


def test_a_conversations_cursor_the_service_issued_decodes() -> None:
    at = datetime(2026, 12, 5, 20, 29, 9, 123456, tzinfo=UTC)
    for ident in ("support-42", "..", "x" * 200):  # ".." may have been stored before such ids were refused
        assert decode_created(_b64(f"{at.isoformat()}|{ident}")) == (at, ident)
    assert decode_created(_b64("0001-01-01T14:00:00+14:00|x"))[0] == datetime(1, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("raw", ["-1", "1e3", "", "\u0661", "9" * 19, "1\x00", " 1"])
def test_a_messages_cursor_is_a_position(raw: str) -> None:
    _bad_cursor(decode_position, raw)


@pytest.mark.parametrize("raw", ["0001-01-01T00:00:00+14:00|01a22d20-f31c-75aa-8000-000000000000",
                                 "9999-12-31T23:59:59-14:00|01a22d20-f31c-75aa-8000-000000000000",
                                 "2026-12-05T20:29:09|01a22d20-f31c-75aa-8000-000000000000",
                                 "2026-12-05T20:29:09Z|not-a-uuid"])
def test_a_memories_cursor_is_a_time_postgres_takes_and_a_uuid(raw: str) -> None:
    _bad_cursor(decode_memories, raw)


@pytest.mark.parametrize("value", [["docs", "a\x00b"], ["do\ud800cs", "a.md"], ["docs", "\udfff"], ["docs"],
                                   ["docs", 1], {"docs": "a.md"}])
def test_a_documents_cursor_holds_text_postgres_can_store(value: object) -> None:
    _bad_cursor(decode_documents, json.dumps(value))


def test_cursors_the_service_issued_decode() -> None:
    at, ident = datetime(2026, 12, 5, 20, 29, 9, tzinfo=UTC), UUID("01a22d20-f31c-75aa-8000-000000000000")
    assert decode_memories(memories_cursor(at, ident)) == (at, ident)
    path = "src/caf\u00e9 \U0001f600.md"
    assert decode_documents(documents_cursor("docs", path)) == ("docs", path)
    assert decode_position(_b64("0")) == 0 and decode_position(_b64("9" * 18)) == 10**18 - 1

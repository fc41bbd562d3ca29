"""The pool's json/jsonb codec against a real Postgres: values come back as the standard library's
``json.loads`` would return them, the fast path and the fallback alike."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from service.db import create_pool
from service.db.pool import decode_json
from service.runtime import Endpoints

VALUES: list[Any] = [
    {}, [], {"speaker": "Melanie", "session": 3, "tags": ["a", "b"], "nested": {"x": None, "y": True}},
    {"big": 123456789012345678901234567890, "neg": -0.5, "tiny": 1e-300, "float": 1.0},
    {"unicode": "Grüße 👋 \u2028", "quote": "a\"b\\c"}, "text", 42, None,
]


@pytest.mark.parametrize("value", VALUES)
async def test_jsonb_values_round_trip_through_the_pool(endpoints: Endpoints, value: Any) -> None:
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            text = json.dumps(value)
            assert await conn.fetchval("SELECT $1::text::jsonb", text) == json.loads(text)
            assert await conn.fetchval("SELECT $1::text::json", text) == json.loads(text)
            assert await conn.fetchval("SELECT $1::jsonb", value) == json.loads(text)  # the encoder too
    finally:
        await pool.close()


@pytest.mark.parametrize("number", ["1e400", "-1.5e400", "1.5e-400", "12345678901234567890.123456789"])
async def test_numbers_beyond_float_range_decode_as_json_loads_would(endpoints: Endpoints, number: str) -> None:
    """jsonb keeps numerics of any size and prints them in full: the codec returns what json.loads
    returns for Postgres's own text of the value."""
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            text = await conn.fetchval(f"""SELECT ('{{"x": {number}, "y": [2]}}'::jsonb)::text""")
            got = await conn.fetchval(f"""SELECT '{{"x": {number}, "y": [2]}}'::jsonb""")
    finally:
        await pool.close()
    assert got == json.loads(text)


def test_text_msgspec_refuses_falls_back_to_the_standard_library() -> None:
    assert math.isinf(decode_json('{"x": 1e400}')["x"])  # msgspec: "Number out of range"
    assert decode_json('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}

"""The pool's ``real`` (float4) codec against a real Postgres: a value comes back as the float its shortest
text names (0.9, not 0.8999999761581421), in rows, arrays and parameters, and through the API."""

from __future__ import annotations

import math
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.db import create_pool
from service.runtime import Endpoints
from tests.conftest import Tenant

pytestmark = pytest.mark.integration


async def test_real_values_read_back_as_written(endpoints: Endpoints) -> None:
    pool = await create_pool(endpoints.app_dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn:
            assert await conn.fetchval("SELECT 0.9::real") == 0.9
            assert await conn.fetchval("SELECT $1::real", 0.3) == 0.3  # the encoder too
            assert await conn.fetchval("SELECT ARRAY[0.1, 0.7, -1]::real[]") == [0.1, 0.7, -1.0]
            assert await conn.fetchval("SELECT $1::real[]", [0.2, 0.55]) == [0.2, 0.55]
            assert await conn.fetchval("SELECT NULL::real") is None
            assert math.isnan(await conn.fetchval("SELECT 'NaN'::real"))
            assert await conn.fetchval("SELECT '-Infinity'::real") == -math.inf
            # float4 precision itself is unchanged: what a float4 cannot hold is rounded as before
            assert await conn.fetchval("SELECT 0.123456789::real") == 0.12345679
            assert await conn.fetchval("SELECT $1::real", 0.123456789) == 0.12345679
            assert await conn.fetchval("SELECT $1::real", 2.4659306404089e-123) == 0.0  # below float4: 0, no error
            assert await conn.fetchval("SELECT $1::real[]", [math.inf, 1e-300]) == [math.inf, 0.0]
    finally:
        await pool.close()


async def test_memory_importance_and_usefulness_in_responses_have_no_float4_noise(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    created = await client.post("/v1/memories", headers=tenant.headers,
                                json={"text": "Float noise check: the kettle is blue.", "importance": 0.9})
    memory_id = created.json()["ids"][0]
    got = await client.get(f"/v1/memories/{memory_id}", headers=tenant.headers)
    assert '"importance":0.9,' in got.text.replace(" ", "")
    fed = await client.post("/v1/memories/feedback", headers=tenant.headers,
                            json={"items": [{"id": memory_id, "helpful": True}]})
    usefulness = fed.json()["updated"][0]["usefulness"]
    # A float4's shortest text has at most 9 significant digits; its float8 widening has about 17.
    assert len(repr(usefulness).lstrip("-0.").replace(".", "")) <= 9, usefulness

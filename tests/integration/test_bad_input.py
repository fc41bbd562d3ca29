"""Hostile input answers 400/401 in the one error shape, never a 500/503, and writes nothing."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.http.jsondepth import MAX_JSON_DEPTH, json_depth
from tests.conftest import Tenant

DEEP = 1000


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"k": value}
    return value


def deep_body(depth: int, **fields: Any) -> bytes:
    """A JSON body with ``metadata`` (or another field) nested ``depth`` levels, built as text: Python's
    own encoder would hit the recursion limit first."""
    opener, closer = '{"k":' * (depth - 1), "}" * (depth - 1)
    inner = f'{opener}{{"leaf":1}}{closer}'
    head = json.dumps(fields)[:-1]
    return f'{head}, "__DEEP__": {inner}}}'.encode()


def assert_error(r: Any, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body


def test_json_depth_counts_brackets_outside_strings() -> None:
    assert json_depth(b'{"a": [1, {"b": "[[[{{{\\"["}]}') == 3
    assert json_depth("[" * DEEP + "]" * DEEP) == DEEP
    assert json_depth(b'"just a string"') == 0


def test_json_depth_reads_hostile_strings_in_linear_time() -> None:
    """Malformed bodies reach the depth check before any decoder: an unterminated string, runs of
    escaped quotes and a trailing backslash must not make the string pattern backtrack (the first
    pattern took 8.6 s on a 36-byte unterminated string and doubled per byte). Run in a child process
    so a regression fails here instead of hanging the suite."""
    probe = (
        "from service.http.jsondepth import json_depth\n"
        "assert json_depth(b'{\"a\": \"' + b'x' * 200_000) == 1\n"
        "assert json_depth(b'{\"a\": \"' + b'\\\\\"' * 200_000 + b'[[') == 1\n"
        "assert json_depth(b'[\"' + b'a\\\\\"' * 200_000 + b'\\\\') == 1\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)


DEEP_CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("memory create", "POST", "/v1/memories", {"text": "x", "agent_id": "a1"}),
    ("memory batch", "POST", "/v1/memories", {"memories": []}),
    ("search filters", "POST", "/v1/memories/search", {"query": "x"}),
    ("assemble filters", "POST", "/v1/context/assemble",
     {"agent_id": "a1", "query": "x", "model": "gpt-4o", "max_context_tokens": 1000}),
    ("document files", "POST", "/v1/documents", {"files": []}),
]


@pytest.mark.parametrize(("method", "path", "fields"), [c[1:] for c in DEEP_CASES], ids=[c[0] for c in DEEP_CASES])
async def test_deeply_nested_body_is_400(client: AsyncTestClient[Any], tenant: Tenant, method: str, path: str,
                                         fields: dict[str, Any]) -> None:
    for where in ("metadata", "filters"):
        body = deep_body(DEEP, **fields).replace(b'"__DEEP__"', f'"{where}"'.encode())
        r = await client.request(method, path, content=body,
                                 headers={**tenant.headers, "Content-Type": "application/json"})
        assert_error(r, 400, "validation_error")
    listed = await client.get("/v1/memories", headers=tenant.headers)
    assert listed.json()["items"] == []


async def test_deep_metadata_patch_is_400_and_changes_nothing(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    created = await client.post("/v1/memories", json={"text": "kept", "metadata": {"a": 1}}, headers=tenant.headers)
    assert created.status_code == 201, created.text
    (mid,) = created.json()["ids"]
    r = await client.patch(f"/v1/memories/{mid}", content=deep_body(DEEP).replace(b'"__DEEP__"', b'"metadata"'),
                           headers={**tenant.headers, "Content-Type": "application/json"})
    assert_error(r, 400, "validation_error")
    assert (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()["metadata"] == {"a": 1}


async def test_metadata_within_the_limit_is_stored(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "ok", "metadata": nested(MAX_JSON_DEPTH - 2)},
                          headers=tenant.headers)
    assert r.status_code == 201, r.text


async def test_deep_metadata_list_filter_is_400(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    deep = '{"k":' * (DEEP - 1) + "{}" + "}" * (DEEP - 1)
    r = await client.get("/v1/memories", params={"metadata": deep}, headers=tenant.headers)
    assert_error(r, 400, "validation_error")


@pytest.mark.parametrize("payload", [
    b"[" * DEEP + b"]" * DEEP,
    b'["default", ' + b"[" * DEEP + b"]" * DEEP + b"]",
    b'["default", "a\\u0000b"]',
    b"\xff\xfe not json",
    b"{nope",
], ids=["deep", "deep inside", "nul", "not utf-8", "malformed"])
async def test_crafted_document_cursor_is_400(client: AsyncTestClient[Any], tenant: Tenant, payload: bytes) -> None:
    cursor = base64.urlsafe_b64encode(payload).decode().rstrip("=")
    r = await client.get("/v1/documents", params={"cursor": cursor}, headers=tenant.headers)
    assert_error(r, 400, "bad_cursor")


async def ingest_one(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    files = [{"path": "pkg/a.py", "content": "def a():\n    return 1\n"}]
    r = await client.post("/v1/documents", json={"files": files}, headers=tenant.headers)
    assert r.status_code == 200, r.text


async def test_reversed_glob_range_is_400_naming_the_glob(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    await ingest_one(client, tenant)
    r = await client.post("/v1/memories/search", json={"query": "[z-a].py", "modes": ["path"]},
                          headers=tenant.headers)
    assert_error(r, 400, "validation_error")
    assert "[z-a].py" in r.json()["error"]["message"]
    # "all" modes skips a path mode that cannot apply instead of failing the whole search
    r = await client.post("/v1/memories/search", json={"query": "[z-a].py", "modes": "all"}, headers=tenant.headers)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/memories/search", {"query": "a", "filters": {"source_prefix": "pkg\u0000"}}),
    ("/v1/memories/search", {"query": "a", "modes": ["path", "exact"], "filters": {"source_prefix": "pkg\u0000"}}),
    ("/v1/memories/search", {"query": "a", "filters": {"metadata": {"k": "v\u0000"}}}),
    ("/v1/context/assemble", {"agent_id": "a1", "query": "a", "model": "gpt-4o", "max_context_tokens": 1000,
                              "retrieval": {"filters": {"source_prefix": "pkg\u0000"}}}),
], ids=["search", "search modes", "search metadata", "assemble"])
async def test_nul_in_text_filters_is_400(client: AsyncTestClient[Any], tenant: Tenant, path: str,
                                          body: dict[str, Any]) -> None:
    await ingest_one(client, tenant)
    r = await client.post(path, json=body, headers=tenant.headers)
    assert_error(r, 400, "validation_error")


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/memories/search", {"query": "a", "filters": {"as_of": "0001-01-01T00:00:00+05:00"}}),
    ("/v1/memories/search", {"query": "a", "filters": {"created_after": "9999-12-31T23:00:00-05:00"}}),
    ("/v1/context/assemble", {"agent_id": "a1", "query": "a", "model": "gpt-4o", "max_context_tokens": 1000,
                              "retrieval": {"filters": {"occurred_before": "0001-01-01T00:30:00+01:00"}}}),
], ids=["search as_of", "search created_after", "assemble occurred_before"])
async def test_filter_times_outside_utc_years_1_to_9999_are_400(client: AsyncTestClient[Any], tenant: Tenant,
                                                                 path: str, body: dict[str, Any]) -> None:
    r = await client.post(path, json=body, headers=tenant.headers)
    assert_error(r, 400, "validation_error")
    assert "out of range" in r.json()["error"]["message"]


@pytest.mark.parametrize(("path", "params"), [
    ("/v1/memories", {"metadata": '{"k": "v\\u0000"}'}),
    ("/v1/documents", {"path_prefix": "pkg\u0000"}),
], ids=["memories metadata", "documents path_prefix"])
async def test_nul_in_list_filters_is_400(client: AsyncTestClient[Any], tenant: Tenant, path: str,
                                          params: dict[str, str]) -> None:
    r = await client.get(path, params=params, headers=tenant.headers)
    assert_error(r, 400, "validation_error")


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/memories/feedback"),
    ("POST", "/v1/memories/search"),
    ("POST", "/v1/context/assemble"),
    ("PUT", "/v1/agents/a1/directive"),
    ("PATCH", "/v1/memories/00000000-0000-7000-8000-000000000000"),
    ("POST", "/v1/memories"),
    ("POST", "/v1/documents"),
])
async def test_unauthenticated_malformed_body_is_401(client: AsyncTestClient[Any], method: str, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer pgc_nope"}):
        r = await client.request(method, path, content=b"{nope" + b"[" * DEEP,
                                 headers={**headers, "Content-Type": "application/json"})
        assert_error(r, 401, "unauthorized")


@pytest.mark.parametrize("vector", [
    [1e20] * 384,
    [0.0] * 384,
    [1e-40] * 384,
    [1.0] * 383,
    [1.0] * 385,
], ids=["huge", "zero", "denormal", "short", "long"])
async def test_unusable_caller_embedding_is_400_and_stores_nothing(client: AsyncTestClient[Any], tenant: Tenant,
                                                                   vector: list[float]) -> None:
    good = {"text": "good", "embedding": [1.0] + [0.0] * 383}
    r = await client.post("/v1/memories", json={"memories": [good, {"text": "bad", "embedding": vector}]},
                          headers=tenant.headers)
    assert_error(r, 400, "validation_error")
    assert r.json()["error"]["details"] == {"field": "embedding"} or "dimensions" in r.json()["error"]["message"]
    assert (await client.get("/v1/memories", headers=tenant.headers)).json()["items"] == []


async def test_search_scores_are_numbers_even_over_a_zero_vector(client: AsyncTestClient[Any], tenant: Tenant,
                                                                 owner_dsn: str) -> None:
    """A zero vector already stored (before embeddings were checked) gives pgvector a NaN cosine; the
    response still carries numbers, never ``null``, where the schema says number."""
    r = await client.post("/v1/memories", json={"memories": [{"text": "alpha beta gamma"}, {"text": "alpha delta"}]},
                          headers=tenant.headers)
    assert r.status_code == 201, r.text
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("UPDATE memories SET embedding = array_fill(0, ARRAY[384])::real[]::vector"
                           " WHERE org_id = $1", tenant.org_id)
    finally:
        await conn.close()
    for body in ({"query": "alpha", "strategy": "semantic"}, {"query": "alpha"}, {"query": "alpha", "modes": "all"}):
        r = await client.post("/v1/memories/search", json=body, headers=tenant.headers)
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        assert results, body
        for res in results:
            assert isinstance(res["final_score"], float | int), res
            assert res["semantic_score"] is None or isinstance(res["semantic_score"], float | int), res

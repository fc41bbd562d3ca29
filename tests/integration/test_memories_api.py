"""Memory CRUD over HTTP against real Postgres + Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant

ERROR_KEYS = {"code", "message", "details", "request_id"}


async def count_rows(owner_dsn: str, org_id: UUID) -> int:
    """Every memory row of the org, expired or not, counted as the owner (not through the API)."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM memories WHERE org_id = $1", org_id))
    finally:
        await conn.close()


async def embedding_of(owner_dsn: str, memory_id: str) -> list[float]:
    conn = await asyncpg.connect(owner_dsn)
    try:
        raw = await conn.fetchval("SELECT embedding::text FROM memories WHERE id = $1", UUID(memory_id))
    finally:
        await conn.close()
    assert raw is not None
    return [float(x) for x in json.loads(raw)]


async def list_all(client: AsyncTestClient[Any], tenant: Tenant, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/memories", params=query, headers=tenant.headers)
        assert r.status_code == 200, r.text
        page = r.json()
        items.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return items


def assert_error(r: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    if code is not None:
        assert body["error"]["code"] == code, body
    return dict(body["error"])


async def create(client: AsyncTestClient[Any], tenant: Tenant, body: dict[str, Any],
                 headers: dict[str, str] | None = None) -> list[str]:
    r = await client.post("/v1/memories", json=body, headers={**tenant.headers, **(headers or {})})
    assert r.status_code == 201, r.text
    ids = r.json()["ids"]
    assert isinstance(ids, list)
    return [str(i) for i in ids]


async def test_create_get_roundtrip(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "The user prefers dark roast coffee.", "agent_id": "a1",
                                                "metadata": {"topic": "coffee"}}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    (mid,) = r.json()["ids"]
    got = await client.get(f"/v1/memories/{mid}", headers=tenant.headers)
    assert got.status_code == 200
    body = got.json()
    assert body["text"] == "The user prefers dark roast coffee."
    assert body["agent_id"] == "a1" and body["metadata"] == {"topic": "coffee"} and body["kind"] == "fact"
    assert body["id"] == mid and body["importance"] == 0.5 and body["pinned"] is False
    assert body["expires_at"] is None and body["access_count"] == 0


async def test_batch_create_returns_ids_in_input_order(client: AsyncTestClient[Any], tenant: Tenant,
                                                       owner_dsn: str) -> None:
    texts = [f"Batch item number {i}: the meeting moved to room {100 + i}." for i in range(10)]
    ids = await create(client, tenant, {"memories": [{"text": t, "kind": "episode"} for t in texts]})
    assert len(ids) == 10 and len(set(ids)) == 10
    for mid, text in zip(ids, texts, strict=True):
        r = await client.get(f"/v1/memories/{mid}", headers=tenant.headers)
        assert r.status_code == 200 and r.json()["text"] == text and r.json()["kind"] == "episode"
    assert await count_rows(owner_dsn, tenant.org_id) == 10


async def test_batch_at_limit_and_over_it(client: AsyncTestClient[Any], tenant: Tenant, settings: Settings,
                                          owner_dsn: str) -> None:
    limit = settings.limits.max_batch
    over = {"memories": [{"text": f"over the limit {i}"} for i in range(limit + 1)]}
    r = await client.post("/v1/memories", json=over, headers=tenant.headers)
    err = assert_error(r, 413, "batch_too_large")
    assert err["details"]["limit"] == limit
    assert await list_all(client, tenant) == []

    at = {"memories": [{"text": f"at the limit {i}"} for i in range(limit)]}
    ids = await create(client, tenant, at)
    assert len(ids) == limit
    listed = await list_all(client, tenant, limit=settings.limits.max_page_size)
    assert len(listed) == limit and {m["id"] for m in listed} == set(ids)


async def test_idempotency_key_replays_and_creates_once(client: AsyncTestClient[Any], tenant: Tenant,
                                                         owner_dsn: str) -> None:
    body = {"memories": [{"text": "Idempotent write one."}, {"text": "Idempotent write two."}]}
    headers = {**tenant.headers, "Idempotency-Key": "req-123"}
    first = await client.post("/v1/memories", json=body, headers=headers)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    second = await client.post("/v1/memories", json=body, headers=headers)
    assert second.status_code == 201, second.text
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json()["ids"] == first.json()["ids"]
    assert await count_rows(owner_dsn, tenant.org_id) == 2
    # The same JSON serialised again (other spacing, other key order) is the same request: replayed.
    respaced = json.dumps(body, indent=2, sort_keys=True).encode()
    third = await client.post("/v1/memories", content=respaced,
                              headers={**headers, "Content-Type": "application/json"})
    assert third.status_code == 201 and third.headers["idempotent-replayed"] == "true", third.text
    assert await count_rows(owner_dsn, tenant.org_id) == 2

    other = await client.post("/v1/memories", json={"memories": [{"text": "A different body."}]}, headers=headers)
    assert_error(other, 409, "idempotency_key_reused")
    assert await count_rows(owner_dsn, tenant.org_id) == 2


async def test_idempotency_key_is_per_org(client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant,
                                          owner_dsn: str) -> None:
    body = {"text": "Same key in two orgs."}
    a = await create(client, tenant, body, {"Idempotency-Key": "shared"})
    b = await create(client, other_tenant, body, {"Idempotency-Key": "shared"})
    assert a != b
    assert await count_rows(owner_dsn, tenant.org_id) == 1
    assert await count_rows(owner_dsn, other_tenant.org_id) == 1


async def test_concurrent_requests_with_same_key_create_once(client: AsyncTestClient[Any], tenant: Tenant,
                                                              owner_dsn: str) -> None:
    body = {"memories": [{"text": f"Concurrent idempotent write {i}."} for i in range(3)]}
    headers = {**tenant.headers, "Idempotency-Key": "concurrent-1"}
    responses = await asyncio.gather(*(client.post("/v1/memories", json=body, headers=headers) for _ in range(4)))
    assert all(r.status_code == 201 for r in responses), [r.text for r in responses]
    assert len({tuple(r.json()["ids"]) for r in responses}) == 1
    assert sum(1 for r in responses if "idempotent-replayed" not in r.headers) == 1
    assert await count_rows(owner_dsn, tenant.org_id) == 3


async def test_list_paginates_newest_first_without_gaps(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    created: list[str] = []
    for chunk in range(3):  # three requests so created_at differs between some rows and ties within others
        created += await create(client, tenant, {"memories": [{"text": f"page test {chunk}-{i}"} for i in range(9)]})
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 4, **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/memories", params=params, headers=tenant.headers)
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["items"]) <= 4
        seen += page["items"]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages >= 7
    ids = [m["id"] for m in seen]
    assert len(ids) == len(set(ids)) == 27 and set(ids) == set(created)
    keys = [(m["created_at"], m["id"]) for m in seen]
    assert keys == sorted(keys, reverse=True)
    # Newest first: the last request's rows come before the first request's.
    assert ids.index(created[-1]) < ids.index(created[0])


async def test_list_filters(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (early,) = await create(client, tenant, {"text": "Early note about tea.", "agent_id": "x", "kind": "fact",
                                             "metadata": {"topic": "tea", "n": 1}})
    mid_point = datetime.now(UTC)
    await asyncio.sleep(0.02)
    (late_x,) = await create(client, tenant, {"text": "Later episode with x.", "agent_id": "x", "kind": "episode",
                                              "metadata": {"topic": "tea", "n": 2, "tags": ["a", "b"]}})
    (late_y,) = await create(client, tenant, {"text": "Later fact for y.", "agent_id": "y", "kind": "fact",
                                              "metadata": {"topic": "coffee"}})

    async def ids(**params: Any) -> set[str]:
        return {m["id"] for m in await list_all(client, tenant, **params)}

    assert await ids() == {early, late_x, late_y}
    assert await ids(agent_id="x") == {early, late_x}
    assert await ids(agent_id="nobody") == set()
    assert await ids(kind="fact") == {early, late_y}
    assert await ids(metadata=json.dumps({"topic": "tea"})) == {early, late_x}
    assert await ids(metadata=json.dumps({"tags": ["b"]})) == {late_x}
    assert await ids(metadata=json.dumps({"topic": "tea", "n": 2})) == {late_x}
    assert await ids(created_after=mid_point.isoformat()) == {late_x, late_y}
    assert await ids(created_before=mid_point.isoformat()) == {early}
    assert await ids(agent_id="x", kind="episode", created_after=mid_point.isoformat()) == {late_x}


async def test_patch_text_reembeds(client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    (mid,) = await create(client, tenant, {"text": "The cat sleeps on the warm windowsill.", "agent_id": "p1"})
    before = await embedding_of(owner_dsn, mid)
    r = await client.patch(f"/v1/memories/{mid}", json={"text": "Quarterly revenue grew by twelve percent."},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["text"] == "Quarterly revenue grew by twelve percent." and r.json()["agent_id"] == "p1"
    after = await embedding_of(owner_dsn, mid)
    assert len(after) == len(before) == 384
    cosine = sum(a * b for a, b in zip(before, after, strict=True))
    assert cosine < 0.9  # a different text, so a clearly different vector

    # A change that leaves the text alone keeps the embedding.
    r = await client.patch(f"/v1/memories/{mid}", json={"importance": 0.9, "metadata": {"k": "v"}},
                           headers=tenant.headers)
    assert r.status_code == 200 and r.json()["importance"] == pytest.approx(0.9)
    assert r.json()["metadata"] == {"k": "v"}
    assert await embedding_of(owner_dsn, mid) == after


async def test_patch_agent_to_null_and_unknown_field(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (mid,) = await create(client, tenant, {"text": "Belongs to an agent for now.", "agent_id": "owner-agent"})
    r = await client.patch(f"/v1/memories/{mid}", json={"agent_id": None}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["agent_id"] is None
    assert (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()["agent_id"] is None

    r = await client.patch(f"/v1/memories/{mid}", json={"text": "changed", "colour": "red"}, headers=tenant.headers)
    assert_error(r, 400)
    got = (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()
    assert got["text"] == "Belongs to an agent for now."

    r = await client.patch(f"/v1/memories/{mid}", json={"text": "   "}, headers=tenant.headers)
    assert_error(r, 400)
    r = await client.patch("/v1/memories/00000000-0000-0000-0000-000000000000", json={"importance": 0.1},
                           headers=tenant.headers)
    assert_error(r, 404, "not_found")


async def test_delete_then_404(client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str) -> None:
    (mid,) = await create(client, tenant, {"text": "Short-lived memory."})
    r = await client.delete(f"/v1/memories/{mid}", headers=tenant.headers)
    assert r.status_code == 204
    assert_error(await client.get(f"/v1/memories/{mid}", headers=tenant.headers), 404, "not_found")
    assert_error(await client.delete(f"/v1/memories/{mid}", headers=tenant.headers), 404, "not_found")
    assert await count_rows(owner_dsn, tenant.org_id) == 0


async def test_expired_memories_are_invisible(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    (gone,) = await create(client, tenant, {"text": "Expired already.", "expires_at": past})
    (live,) = await create(client, tenant, {"text": "Still valid.", "expires_at": future})
    assert_error(await client.get(f"/v1/memories/{gone}", headers=tenant.headers), 404)
    assert (await client.get(f"/v1/memories/{live}", headers=tenant.headers)).status_code == 200
    assert {m["id"] for m in await list_all(client, tenant)} == {live}
    assert_error(await client.patch(f"/v1/memories/{gone}", json={"expires_at": None}, headers=tenant.headers), 404)

    # Expiring a live memory through PATCH hides it too.
    r = await client.patch(f"/v1/memories/{live}", json={"expires_at": past}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert_error(await client.get(f"/v1/memories/{live}", headers=tenant.headers), 404)


async def test_caller_supplied_embedding_is_stored_normalised(client: AsyncTestClient[Any], tenant: Tenant,
                                                              owner_dsn: str) -> None:
    vector = [0.0] * 384
    vector[0], vector[1] = 3.0, 4.0
    (mid,) = await create(client, tenant, {"text": "Bring your own vector.", "embedding": vector})
    stored = await embedding_of(owner_dsn, mid)
    assert stored[0] == pytest.approx(0.6) and stored[1] == pytest.approx(0.8) and sum(stored[2:]) == 0



BAD_CREATES: list[tuple[str, Any, int]] = [
    ("malformed json", b'{"text": "unterminated', 400),
    ("not an object", b'["a list"]', 400),
    ("text wrong type", {"text": 5}, 400),
    ("importance wrong type", {"text": "ok", "importance": "high"}, 400),
    ("importance out of range", {"text": "ok", "importance": 1.5}, 400),
    ("pinned wrong type", {"text": "ok", "pinned": "yes"}, 400),
    ("expires_at not a date", {"text": "ok", "expires_at": "tomorrow"}, 400),
    ("missing text", {"agent_id": "a"}, 400),
    ("empty text", {"text": ""}, 400),
    ("whitespace text", {"text": " \n\t "}, 400),
    ("over-long text", "LONG", 413),
    ("unknown field", {"text": "ok", "colour": "red"}, 400),
    ("nul in text", {"text": "bad\u0000text"}, 400),
    ("nul in metadata", {"text": "ok", "metadata": {"k": "a\u0000b"}}, 400),
    ("metadata not an object", {"text": "ok", "metadata": [1, 2]}, 400),
    ("metadata a string", {"text": "ok", "metadata": "{}"}, 400),
    ("bad agent id", {"text": "ok", "agent_id": "has space"}, 400),
    ("agent id with trailing newline", {"text": "ok", "agent_id": "agent\n"}, 400),
    ("bad kind", {"text": "ok", "kind": "Not-A-Kind"}, 400),
    ("embedding of wrong dimension", {"text": "ok", "embedding": [0.1, 0.2, 0.3]}, 400),
    ("embedding wrong type", {"text": "ok", "embedding": "0.1,0.2"}, 400),
    ("empty batch", {"memories": []}, 400),
    ("batch item bad", {"memories": [{"text": "fine"}, {"text": ""}]}, 400),
    ("batch with unknown top-level field", {"memories": [{"text": "fine"}], "extra": 1}, 400),
    ("batch not a list", {"memories": {"text": "fine"}}, 400),
]


@pytest.mark.parametrize(("body", "status"), [(b, s) for _, b, s in BAD_CREATES], ids=[n for n, _, _ in BAD_CREATES])
async def test_bad_create_is_rejected_and_changes_nothing(client: AsyncTestClient[Any], tenant: Tenant,
                                                          settings: Settings, owner_dsn: str, body: Any,
                                                          status: int) -> None:
    if body == "LONG":
        body = {"text": "x" * (settings.limits.max_text_chars + 1)}
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = await client.post("/v1/memories", content=raw,
                          headers={**tenant.headers, "Content-Type": "application/json"})
    err = assert_error(r, status)
    assert err["message"]
    assert await count_rows(owner_dsn, tenant.org_id) == 0


async def test_text_at_the_limit_is_accepted(client: AsyncTestClient[Any], tenant: Tenant,
                                             settings: Settings) -> None:
    words = ("lorem ipsum dolor sit amet " * (settings.limits.max_text_chars // 27 + 1))
    text = words[: settings.limits.max_text_chars]
    (mid,) = await create(client, tenant, {"text": text})
    assert len((await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()["text"]) == len(text)


BAD_READS: list[tuple[str, str, dict[str, Any], str]] = [
    ("bad uuid in get", "/v1/memories/not-a-uuid", {}, "bad_id"),
    ("bad cursor", "/v1/memories", {"cursor": "!!!not-a-cursor"}, "bad_cursor"),
    ("cursor of garbage base64", "/v1/memories", {"cursor": "aGVsbG8"}, "bad_cursor"),
    ("metadata not an object", "/v1/memories", {"metadata": "[1, 2]"}, "validation_error"),
    ("metadata not json", "/v1/memories", {"metadata": "{topic"}, "validation_error"),
    ("limit zero", "/v1/memories", {"limit": 0}, "validation_error"),
    ("limit over the page size", "/v1/memories", {"limit": 201}, "validation_error"),
    ("limit huge", "/v1/memories", {"limit": 10**9}, "validation_error"),
    ("limit not a number", "/v1/memories", {"limit": "ten"}, "validation_error"),
    ("created_after not a date", "/v1/memories", {"created_after": "yesterday"}, "validation_error"),
    ("created_after without a timezone", "/v1/memories", {"created_after": "2026-01-01T00:00:00"},
     "validation_error"),
    ("created_before without a timezone", "/v1/memories", {"created_before": "2026-01-01T00:00:00"},
     "validation_error"),
    ("as_of before year 1 in UTC", "/v1/memories", {"as_of": "0001-01-01T00:00:00+05:00"}, "validation_error"),
    ("occurred_after before year 1 in UTC", "/v1/memories", {"occurred_after": "0001-01-01T00:00:00+05:00"},
     "validation_error"),
]


@pytest.mark.parametrize("name", ["created", "occurred"])
async def test_empty_time_range_in_a_list_is_a_422(client: AsyncTestClient[Any], tenant: Tenant, name: str) -> None:
    """As in search: well-formed bounds that no memory can meet."""
    for after, before in (("2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"), ("2026-01-01T00:00:00Z",) * 2):
        r = await client.get("/v1/memories", params={f"{name}_after": after, f"{name}_before": before},
                             headers=tenant.headers)
        err = assert_error(r, 422, "validation_error")
        assert err["message"] == f"{name}_after must be before {name}_before"


async def test_created_filters_in_search_need_a_timezone(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """A naive time would be read in the server's zone; one naive bound and one aware could not be compared."""
    for filters in ({"created_after": "2026-01-01T00:00:00"},
                    {"created_after": "2026-01-01T00:00:00", "created_before": "2027-01-01T00:00:00Z"}):
        r = await client.post("/v1/memories/search", json={"query": "coffee", "filters": filters},
                              headers=tenant.headers)
        assert_error(r, 400, "validation_error")


@pytest.mark.parametrize(("path", "params", "code"), [(p, q, c) for _, p, q, c in BAD_READS],
                         ids=[n for n, _, _, _ in BAD_READS])
async def test_bad_read_is_a_clear_400(client: AsyncTestClient[Any], tenant: Tenant, path: str,
                                       params: dict[str, Any], code: str) -> None:
    r = await client.get(path, params=params, headers=tenant.headers)
    err = assert_error(r, 400, code)
    assert err["message"]


async def test_every_list_says_its_page_limit_alike(client: AsyncTestClient[Any], tenant: Tenant,
                                                    settings: Settings) -> None:
    """One message and the same details wherever a page is larger than this deployment serves."""
    most, documents = settings.limits.max_page_size, settings.documents.max_list_page
    for path, limit in (("/v1/memories", most), ("/v1/conversations", most), ("/v1/conversations/c/messages", most),
                        ("/v1/memories/00000000-0000-7000-8000-000000000000/history", most),
                        ("/v1/documents", documents)):
        r = await client.get(path, params={"limit": limit + 1}, headers=tenant.headers)
        err = assert_error(r, 400, "validation_error")
        assert err["message"] == f"limit must be at most {limit}", path
        assert err["details"] == {"field": "limit", "limit": limit}, path


async def test_bad_ids_in_patch_and_delete(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    assert_error(await client.patch("/v1/memories/123", json={"importance": 0.2}, headers=tenant.headers),
                 400, "bad_id")
    assert_error(await client.delete("/v1/memories/123", headers=tenant.headers), 400, "bad_id")


async def test_bad_patch_changes_nothing(client: AsyncTestClient[Any], tenant: Tenant, settings: Settings) -> None:
    (mid,) = await create(client, tenant, {"text": "Original text.", "importance": 0.3, "agent_id": "keep"})
    bad: list[tuple[bytes, int]] = [
        (b"{not json", 400),
        (json.dumps({"importance": "high"}).encode(), 400),
        (json.dumps({"text": ""}).encode(), 400),
        (json.dumps({"text": "a\u0000b"}).encode(), 400),
        (json.dumps({"text": "x" * (settings.limits.max_text_chars + 1)}).encode(), 413),
        (json.dumps({"metadata": [1]}).encode(), 400),
        (json.dumps({"kind": "BAD KIND"}).encode(), 400),
        (json.dumps([1, 2]).encode(), 400),
    ]
    for raw, status in bad:
        r = await client.patch(f"/v1/memories/{mid}", content=raw,
                               headers={**tenant.headers, "Content-Type": "application/json"})
        assert_error(r, status)
    got = (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()
    assert got["text"] == "Original text." and got["importance"] == pytest.approx(0.3) and got["agent_id"] == "keep"


async def test_document_chunk_kind_is_reserved_for_the_documents_api(client: AsyncTestClient[Any],
                                                                     tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "pretend chunk", "kind": "document_chunk"},
                          headers=tenant.headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "reserved_kind"
    listed = await client.get("/v1/memories", headers=tenant.headers)
    assert listed.json()["items"] == []
    created = await client.post("/v1/memories", json={"text": "a fact"}, headers=tenant.headers)
    (mid,) = created.json()["ids"]
    patched = await client.patch(f"/v1/memories/{mid}", json={"kind": "document_chunk"}, headers=tenant.headers)
    assert patched.status_code == 400 and patched.json()["error"]["code"] == "reserved_kind"
    assert (await client.get(f"/v1/memories/{mid}", headers=tenant.headers)).json()["kind"] == "fact"


async def test_document_chunks_change_only_through_the_documents_api(client: AsyncTestClient[Any],
                                                                     tenant: Tenant) -> None:
    ingested = await client.post("/v1/documents", json={"files": [{"path": "notes/a.md", "content": "# A\n\nalpha\n"}]},
                                 headers=tenant.headers)
    assert ingested.status_code == 200, ingested.text
    search = await client.post("/v1/memories/search", json={"query": "alpha", "strategy": "lexical"},
                               headers=tenant.headers)
    chunk_id = search.json()["results"][0]["id"]
    patched = await client.patch(f"/v1/memories/{chunk_id}", json={"text": "rewritten"}, headers=tenant.headers)
    deleted = await client.delete(f"/v1/memories/{chunk_id}", headers=tenant.headers)
    for response in (patched, deleted):
        assert response.status_code == 409 and response.json()["error"]["code"] == "managed_by_documents"
    still = await client.get(f"/v1/memories/{chunk_id}", headers=tenant.headers)
    assert still.status_code == 200 and "alpha" in still.json()["text"]



async def test_a_batch_write_does_not_wait_for_concurrent_writers_counter_rows(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, owner_dsn: str,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    # In a soak, a 64-memory batch answered 503 query_timeout after the 5 s tenant timeout while
    # a document ingest on the same BM25 counter shard (then backend pid mod 8) held the shard's rows
    # until it committed. Now each write transaction takes a shard no other open transaction of the
    # org holds (memory_lex_shard(), migration 0008). Here seven other transactions of the org hold
    # seven shards' counter rows for ~1.5 s and the statement timeout is 300 ms: the write takes the
    # eighth and answers at once (on the pid's shard alone it would have met a holder 7 times in 8).
    tenant = await make_tenant("locked")
    custom = dataclasses.replace(settings, database=dataclasses.replace(settings.database, statement_timeout_ms=300))
    holders = 7
    held = threading.Event()

    async def hold_shards() -> list[int]:
        conns = [await asyncpg.connect(owner_dsn) for _ in range(holders)]
        try:
            shards = []
            for conn in conns:
                await conn.execute("SELECT set_config('pgcontext.org_id', $1, false)", str(tenant.org_id))
                await conn.execute("BEGIN")
                await conn.execute("SELECT memory_lex_add(ARRAY[$1::uuid], ARRAY[gen_random_uuid()], "
                                   "ARRAY[to_tsvector('english', 'burrs of a held grinder')])", tenant.org_id)
                shards.append(int(await conn.fetchval("SELECT current_setting('pgcontext.lex_shard')")))
            held.set()
            await asyncio.sleep(1.5)
            for conn in conns:
                await conn.execute("ROLLBACK")
            return shards
        finally:
            for conn in conns:
                await conn.close()

    shards: list[int] = []
    # Other processes' transactions, in effect: their own thread and event loop.
    holder = threading.Thread(target=lambda: shards.extend(asyncio.run(hold_shards())))
    async with AsyncTestClient(app=create_app(custom, endpoints, embedder=embedder), timeout=30) as client:
        holder.start()  # the app is up: the write below starts while the seven shards are held
        try:
            assert await asyncio.to_thread(held.wait, 10)
            started = time.monotonic()
            r = await client.post("/v1/memories", headers=tenant.headers,
                                  json={"memories": [{"text": "the grinder needs new burrs", "agent_id": "a"}]})
            took = time.monotonic() - started
        finally:
            await asyncio.to_thread(holder.join, 10)
    assert sorted(shards) == sorted(set(shards)) and len(shards) == holders  # seven distinct shards held
    assert r.status_code == 201, (took, r.text)
    assert took < 1.5  # it did not wait for any holder's commit

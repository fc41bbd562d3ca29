"""Every error the API returns has one shape, whatever produced it (handler, validation, router, DB)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.settings import Settings
from tests.conftest import Tenant

Case = tuple[str, str, str, dict[str, Any], int]
"""(name, method, path, request kwargs, expected status); 'KEY' in headers becomes the tenant's key."""

CASES: list[Case] = [
    ("malformed json", "POST", "/v1/memories", {"content": b"{nope"}, 400),
    ("validation error", "POST", "/v1/memories", {"json": {"text": 12}}, 400),
    ("bad id", "GET", "/v1/memories/not-a-uuid", {}, 400),
    ("bad query parameter", "GET", "/v1/memories", {"params": {"limit": "many"}}, 400),
    ("bad directive body", "PUT", "/v1/agents/a1/directive", {"json": {"text": "wrong field"}}, 400),
    ("no key", "GET", "/v1/memories", {"headers": {"Authorization": ""}}, 401),
    ("bad key", "GET", "/v1/memories", {"headers": {"Authorization": "Bearer pgc_nope"}}, 401),
    ("unknown memory", "GET", "/v1/memories/00000000-0000-7000-8000-000000000000", {}, 404),
    ("no directive", "GET", "/v1/agents/nobody/directive", {}, 404),
    ("no such route", "GET", "/v1/nothing-here", {}, 404),
    ("method not allowed", "PUT", "/v1/memories", {}, 405),
    ("method not allowed on item", "POST", "/v1/memories/00000000-0000-7000-8000-000000000000", {}, 405),
    ("idempotency key reused", "POST", "/v1/memories", {"json": {"text": "second body"}, "idem": "shape-1"}, 409),
    ("batch over the limit", "POST", "/v1/memories", {"batch_over": True}, 413),
    ("text over the limit", "POST", "/v1/memories", {"text_over": True}, 413),
    ("body over the limit", "POST", "/v1/memories", {"body_over": True}, 413),
    ("database check constraint", "POST", "/v1/memories", {"json": {"text": "ok", "kind": "fact\n"}}, 422),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_error_shape(client: AsyncTestClient[Any], tenant: Tenant, settings: Settings, method: str, path: str,
                           kwargs: dict[str, Any], status: int) -> None:
    kwargs = dict(kwargs)
    headers = {**tenant.headers, **kwargs.pop("headers", {})}
    if "idem" in kwargs:  # first use the key with one body, then (below) with another
        headers["Idempotency-Key"] = kwargs.pop("idem")
        first = await client.post("/v1/memories", json={"text": "first body"}, headers=headers)
        assert first.status_code == 201
    if kwargs.pop("batch_over", False):
        kwargs["json"] = {"memories": [{"text": "t"}] * (settings.limits.max_batch + 1)}
    if kwargs.pop("text_over", False):
        kwargs["json"] = {"text": "t" * (settings.limits.max_text_chars + 1)}
    if kwargs.pop("body_over", False):
        kwargs["content"] = b" " * (settings.limits.max_request_bytes + 1)
    if "content" in kwargs:
        headers["Content-Type"] = "application/json"
    r = await client.request(method, path, headers=headers, **kwargs)
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details", "request_id"}
    assert isinstance(error["code"], str) and error["code"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], dict)
    assert isinstance(error["request_id"], str) and error["request_id"]
    assert r.headers["x-request-id"] == error["request_id"]
    assert r.headers["content-type"].startswith("application/json")


@pytest.mark.parametrize("path", ["/v1/memories/not-a-uuid", "/v1/no-route"])
async def test_caller_request_id_is_echoed(client: AsyncTestClient[Any], tenant: Tenant, path: str) -> None:
    r = await client.get(path, headers={**tenant.headers, "X-Request-ID": "trace-abc-123"})
    assert r.status_code in (400, 404)
    assert r.json()["error"]["request_id"] == "trace-abc-123"
    assert r.headers["x-request-id"] == "trace-abc-123"


async def test_success_responses_carry_a_request_id(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.get("/v1/memories", headers=tenant.headers)
    assert r.status_code == 200 and len(r.headers["x-request-id"]) >= 16


BODIES: list[tuple[str, str]] = [
    ("POST", "/v1/memories"),
    ("POST", "/v1/memories/search"),
    ("POST", "/v1/memories/feedback"),
    ("POST", "/v1/context/assemble"),
    ("POST", "/v1/conversations/c1/messages"),
    ("POST", "/v1/documents"),
    ("POST", "/v1/import"),
    ("PUT", "/v1/agents/a1/directive"),
    ("PATCH", "/v1/memories/00000000-0000-7000-8000-000000000000"),
    ("PATCH", "/v1/org/settings"),
    ("POST", "/v1/memories/00000000-0000-7000-8000-000000000000/history/00000000-0000-7000-8000-000000000000/undo"),
]


@pytest.mark.parametrize(("method", "path"), BODIES, ids=[f"{m} {p}" for m, p in BODIES])
async def test_a_body_that_is_not_json_is_one_error_everywhere(client: AsyncTestClient[Any], tenant: Tenant,
                                                               method: str, path: str) -> None:
    """Whether the framework or the handler decodes the body: 400 ``malformed_json``, and an empty body
    says so (not the name of a handler's argument)."""
    headers = {**tenant.headers, "Content-Type": "application/json"}
    empty = "the body is empty or ends early, or a string holds an unpaired \\uD800-\\uDFFF escape"
    for content, said in ((b"", empty), (b"   ", empty), (b'{', empty), (b'{"\\ud800": 1}', empty),
                          (b"{nope", "object keys must be strings (byte 1)")):
        r = await client.request(method, path, content=content, headers=headers)
        assert r.status_code == 400, (content, r.text)
        error = r.json()["error"]
        assert (error["code"], error["message"]) == ("malformed_json", f"malformed JSON: {said}"), (content, r.text)


NOT_JSON: list[str | None] = [
    "text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/xml", "application/octet-stream", "application/merge-patch+json", "application/jsonx",
    "application/json; charset=iso-8859-1", "", None,
]
"""Content types a body is refused under (None: no Content-Type header)."""


@pytest.mark.parametrize(("method", "path"), BODIES, ids=[f"{m} {p}" for m, p in BODIES])
async def test_a_body_not_sent_as_json_is_415_naming_the_accepted_type(client: AsyncTestClient[Any], tenant: Tenant,
                                                                       method: str, path: str) -> None:
    """Only ``application/json`` (a ``charset``, if any, ``utf-8``) is taken as JSON; anything else is refused
    before the body is read, whatever the body holds."""
    for content_type in NOT_JSON:
        headers = {**tenant.headers, **({} if content_type is None else {"Content-Type": content_type})}
        r = await client.request(method, path, content=b'{"text": "x"}', headers=headers)
        assert r.status_code == 415, (content_type, r.text)
        error = r.json()["error"]
        assert set(error) == {"code", "message", "details", "request_id"}
        assert error["code"] == "unsupported_media_type" and "application/json" in error["message"], error
        assert error["details"] == {"accepted": ["application/json"], "content_type": content_type}, error
        assert r.headers["x-request-id"] == error["request_id"]


async def test_a_write_not_sent_as_json_changes_nothing(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """Well-formed writes under another Content-Type (as ``curl -d`` sends a form) are refused whole."""
    writes = [("POST", "/v1/memories", {"text": "The user prefers tea."}),
              ("POST", "/v1/memories", {"memories": [{"text": "One."}, {"text": "Two."}]}),
              ("PUT", "/v1/agents/plain/directive", {"content": "Be brief."}),
              ("POST", "/v1/conversations/plain/messages", {"messages": [{"role": "user", "content": "Hi."}]}),
              ("POST", "/v1/documents", {"files": [{"path": "a.md", "content": "# A"}]}),
              ("PATCH", "/v1/org/settings", {"on_duplicate": "keep"})]
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        for method, path, body in writes:
            r = await client.request(method, path, content=json.dumps(body).encode(),
                                     headers={**tenant.headers, "Content-Type": content_type})
            assert r.status_code == 415, (content_type, path, r.text)
    assert (await client.get("/v1/memories", headers=tenant.headers)).json()["items"] == []
    assert (await client.get("/v1/agents/plain/directive", headers=tenant.headers)).status_code == 404
    assert (await client.get("/v1/conversations/plain", headers=tenant.headers)).status_code == 404
    assert (await client.get("/v1/documents", headers=tenant.headers)).json()["items"] == []
    assert (await client.get("/v1/org/settings", headers=tenant.headers)).json()["updated_at"] is None


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON;charset=\"UTF-8\"", "application/json ; Charset=utf8"])
async def test_json_with_a_utf8_charset_is_taken(client: AsyncTestClient[Any], tenant: Tenant,
                                                 content_type: str) -> None:
    r = await client.post("/v1/memories", content=b'{"text": "Taken as JSON."}',
                          headers={**tenant.headers, "Content-Type": content_type})
    assert r.status_code == 201, (content_type, r.text)


async def test_requests_without_a_body_ignore_the_content_type(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    headers = {**tenant.headers, "Content-Type": "text/plain"}
    assert (await client.get("/v1/memories", headers=headers)).status_code == 200
    assert (await client.delete("/v1/agents/nobody/directive", headers=headers)).status_code == 404


async def test_an_anonymous_body_of_another_type_is_401(client: AsyncTestClient[Any]) -> None:
    r = await client.post("/v1/memories", content=b"text=hi", headers={"Content-Type": "text/plain"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"

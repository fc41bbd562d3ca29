"""The OpenAPI contract at /schema/openapi.json: security, request bodies, the error shape, statuses,
limits equal to what validation enforces, and a docs page that needs nothing but the service."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.embeddings import Embedder
from service.memories.idempotency import KEY_MAX
from service.memories.validation import OCCURRED_PATTERN
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant

Schema = dict[str, Any]
METHODS = ("get", "put", "post", "patch", "delete")


@pytest.fixture(scope="module")
async def schema(client: AsyncTestClient[Any]) -> Schema:
    r = await client.get("/schema/openapi.json")
    assert r.status_code == 200
    body: Schema = r.json()
    return body


def operations(schema: Schema) -> Iterator[tuple[str, str, Schema]]:
    for path, item in schema["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


def component(schema: Schema, name: str) -> Schema:
    found: Schema = schema["components"]["schemas"][name]
    return found


def resolve(schema: Schema, node: Schema) -> Schema:
    while "$ref" in node:
        node = component(schema, node["$ref"].rsplit("/", 1)[-1])
    return node


def max_length(node: Schema) -> int:
    """A string's maxLength, beside its pattern or in an ``allOf`` of its own."""
    found = [node.get("maxLength"), *(part.get("maxLength") for part in node.get("allOf", []))]
    lengths = [n for n in found if n is not None]
    assert len(lengths) == 1, node
    return int(lengths[0])


def non_null(node: Schema) -> Schema:
    """A nullable property's non-null alternative (the property itself otherwise)."""
    for alternative in node.get("oneOf", []):
        if alternative.get("type") != "null":
            return {**{k: v for k, v in node.items() if k != "oneOf"}, **alternative}
    return node


def test_the_bearer_scheme_guards_every_v1_operation(schema: Schema) -> None:
    assert schema["components"]["securitySchemes"] == {"bearerAuth": {
        "type": "http", "scheme": "bearer", "description": "An API key of your org: `Authorization: Bearer <key>`."}}
    v1 = [(p, m, op) for p, m, op in operations(schema) if p.startswith("/v1/")]
    assert len(v1) >= 18
    for path, method, op in v1:
        assert op.get("security") == [{"bearerAuth": []}], (method, path)
    for path in ("/healthz", "/readyz"):
        assert "security" not in schema["paths"][path]["get"]


def test_every_operation_that_takes_a_body_documents_it(schema: Schema) -> None:
    for path, method, op in operations(schema):
        if method in ("post", "put", "patch"):
            body = op.get("requestBody")
            assert body and body["required"] is True and "application/json" in body["content"], (method, path)
    create = schema["paths"]["/v1/memories"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create == {"oneOf": [{"$ref": "#/components/schemas/MemoryIn"},
                                {"$ref": "#/components/schemas/MemoryBatchIn"}]}
    assert component(schema, "MemoryBatchIn")["properties"]["memories"]["items"] == {
        "$ref": "#/components/schemas/MemoryIn"}
    ingest = schema["paths"]["/v1/documents"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert ingest == {"$ref": "#/components/schemas/IngestRequest"}
    assert component(schema, "IngestRequest")["required"] == ["files"]
    # Request types reject unknown fields, and the schema says so.
    for name in ("MemoryIn", "MemoryBatchIn", "MemoryPatch", "IngestRequest", "FileIn", "SearchRequest",
                 "AssembleRequest", "DirectiveIn", "FeedbackIn"):
        assert component(schema, name)["additionalProperties"] is False, name


def test_errors_are_documented_in_the_service_shape(schema: Schema) -> None:
    error = component(schema, "ErrorBody")
    assert error["required"] == ["error"]
    info = component(schema, "ErrorInfo")
    assert sorted(info["required"]) == ["code", "details", "message", "request_id"]
    assert set(info["properties"]) == {"code", "message", "details", "request_id"}
    for path, method, op in operations(schema):
        for status, response in op["responses"].items():
            if int(status) >= 400:
                assert response["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"}, (method, path, status)
    # Nothing anywhere in Litestar's own error shape.
    assert '"status_code"' not in str(schema).replace("'", '"')


EXPECTED_STATUSES = {
    ("/v1/memories", "post"): {201, 400, 401, 409, 413, 415, 422, 429, 503},
    ("/v1/memories", "get"): {200, 400, 401, 422, 429, 503},
    ("/v1/memories", "delete"): {200, 400, 401, 429, 503},
    ("/v1/memories/{memory_id}", "get"): {200, 400, 401, 404, 429, 503},
    ("/v1/memories/{memory_id}", "patch"): {200, 400, 401, 404, 409, 413, 415, 422, 429, 503},
    ("/v1/memories/{memory_id}", "delete"): {204, 400, 401, 404, 409, 429, 503},
    ("/v1/memories/search", "post"): {200, 400, 401, 413, 415, 422, 429, 503},
    ("/v1/agents/{agent_id}/directive", "put"): {200, 400, 401, 413, 415, 429, 503},
    ("/v1/agents/{agent_id}/directive", "get"): {200, 400, 401, 404, 429, 503},
    ("/v1/agents/{agent_id}/directive", "delete"): {204, 400, 401, 404, 429, 503},
    ("/v1/documents", "post"): {200, 400, 401, 413, 415, 422, 429, 503},
    ("/v1/documents", "get"): {200, 400, 401, 429, 503},
    ("/v1/documents", "delete"): {200, 400, 401, 404, 429, 503},
    ("/v1/documents/index", "get"): {200, 401, 429, 503},
    ("/v1/context/assemble", "post"): {200, 400, 401, 413, 415, 422, 429, 503, 504},
    ("/v1/memories/hot", "get"): {200, 400, 401, 429, 503},
    ("/v1/memories/feedback", "post"): {200, 400, 401, 409, 413, 415, 429, 503},
    ("/v1/export", "get"): {200, 400, 401, 429, 503},
    ("/v1/memories/{memory_id}/history", "get"): {200, 400, 401, 404, 429, 503},
    ("/v1/memories/{memory_id}/history/{event_id}/undo", "post"): {200, 400, 401, 404, 409, 413, 415, 422, 429, 503},
    ("/v1/org/settings", "get"): {200, 401, 429, 503},
    ("/v1/org/settings", "patch"): {200, 400, 401, 413, 415, 429, 503},
    ("/v1/import", "post"): {200, 400, 401, 409, 413, 415, 422, 429, 503},
    ("/v1/conversations/{conversation_id}/messages", "post"): {201, 400, 401, 409, 413, 415, 422, 429, 503},
    ("/v1/conversations/{conversation_id}/messages", "get"): {200, 400, 401, 404, 429, 503},
    ("/v1/conversations/{conversation_id}/messages", "delete"): {200, 400, 401, 404, 409, 429, 503},
    ("/v1/conversations/{conversation_id}", "get"): {200, 400, 401, 404, 429, 503},
    ("/v1/conversations/{conversation_id}", "delete"): {200, 400, 401, 404, 409, 429, 503},
    ("/v1/conversations", "get"): {200, 400, 401, 429, 503},
}


def test_every_status_an_operation_answers_is_documented(schema: Schema) -> None:
    found = {(p, m): {int(s) for s in op["responses"]} for p, m, op in operations(schema) if p.startswith("/v1/")}
    assert found == EXPECTED_STATUSES
    for path, method, op in operations(schema):
        responses = op["responses"]
        if "401" in responses:
            assert "WWW-Authenticate" in responses["401"]["headers"], (method, path)
        if "429" in responses:
            assert "Retry-After" in responses["429"]["headers"], (method, path)
    assert schema["paths"]["/metrics"]["get"]["responses"]["200"]["content"] == {"text/plain": {
        "schema": {"type": "string"}}}


async def test_the_statuses_the_code_answers_are_the_documented_ones(client: AsyncTestClient[Any], schema: Schema,
                                                                     tenant: Tenant) -> None:
    """A request per error the code raises, checked against the operation's documented statuses."""
    missing = "00000000-0000-7000-8000-000000000000"
    cases: list[tuple[str, str, str, dict[str, Any], int]] = [
        ("get", f"/v1/memories/{missing}", "/v1/memories/{memory_id}", {}, 404),
        ("patch", f"/v1/memories/{missing}", "/v1/memories/{memory_id}", {"json": {"pinned": True}}, 404),
        ("delete", f"/v1/memories/{missing}", "/v1/memories/{memory_id}", {}, 404),
        ("get", "/v1/agents/nobody/directive", "/v1/agents/{agent_id}/directive", {}, 404),
        ("delete", "/v1/agents/nobody/directive", "/v1/agents/{agent_id}/directive", {}, 404),
        ("delete", "/v1/documents?path=nowhere.txt", "/v1/documents", {}, 404),
        ("post", "/v1/memories/search", "/v1/memories/search", {"json": {"query": "x", "filters": {
            "created_after": "2026-01-02T00:00:00Z", "created_before": "2026-01-01T00:00:00Z"}}}, 422),
        ("post", "/v1/documents", "/v1/documents", {"json": {"files": [{"path": "a", "content": "1"},
                                                                     {"path": "a", "content": "2"}]}}, 422),
        ("post", "/v1/context/assemble", "/v1/context/assemble", {"json": {
            "agent_id": "a", "query": "q", "model": "gpt-4o", "max_context_tokens": 1}}, 422),
        ("post", "/v1/context/assemble", "/v1/context/assemble", {"json": {
            "agent_id": "a", "query": "q", "model": "gpt-4o", "max_context_tokens": 1000},
            "headers": {"X-Timeout-Ms": "-1"}}, 504),
        ("get", "/v1/memories?occurred_before=0.5", "/v1/memories", {}, 400),
        ("put", "/v1/agents/a/directive", "/v1/agents/{agent_id}/directive", {
            "content": b'{"content": "x"}', "headers": {"Content-Type": "text/plain"}}, 415),
    ]
    for method, url, path, kwargs, status in cases:
        headers = {**tenant.headers, **kwargs.pop("headers", {})}
        r = await client.request(method.upper(), url, headers=headers, **kwargs)
        assert r.status_code == status, (method, url, r.text)
        assert str(status) in schema["paths"][path][method]["responses"], (method, path, status)


def test_every_idempotency_key_states_its_length(schema: Schema) -> None:
    """The code refuses an empty or over-long key (400); a schema that did not say so had a fuzzer's empty
    key count as valid."""
    found = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for param in operation.get("parameters", []):
                if param["name"] == "Idempotency-Key":
                    found.append((method, path))
                    rule = non_null(param["schema"])
                    assert (rule.get("minLength"), rule.get("maxLength")) == (1, KEY_MAX), (method, path, rule)
    assert ("delete", "/v1/conversations/{conversation_id}") in found and len(found) >= 5, found


def test_the_cursor_and_json_parameters_say_what_they_hold(schema: Schema) -> None:
    params = {p["name"]: p for p in schema["paths"]["/v1/memories"]["get"]["parameters"]}
    assert non_null(params["cursor"]["schema"])["format"] == "pgcontext-memories-cursor"
    assert "base64url" in params["cursor"]["description"]
    metadata = params["metadata"]["content"]["application/json"]["schema"]
    assert metadata["type"] == "object" and metadata["additionalProperties"] == {
        "$ref": "#/components/schemas/JsonValue"}
    for name in ("created_after", "created_before", "occurred_after", "occurred_before", "as_of"):
        assert non_null(params[name]["schema"])["format"] == "date-time", name
    memory_id = schema["paths"]["/v1/memories/{memory_id}"]["get"]["parameters"][0]
    assert memory_id["schema"]["format"] == "uuid"


# -- limits: documented == enforced, for the settings the app runs with ------------------------------

SMALL = {"max_text_chars": 40, "max_batch": 3, "max_page_size": 7, "max_directive_chars": 30}


@pytest.fixture(scope="module")
async def small(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> AsyncIterator[
        AsyncTestClient[Any]]:
    """The app with small limits: the schema must follow the settings, not the defaults."""
    custom = dataclasses.replace(
        settings, limits=dataclasses.replace(settings.limits, **SMALL),
        retrieval=dataclasses.replace(settings.retrieval, max_query_chars=25),
        documents=dataclasses.replace(settings.documents, max_files_per_request=2, max_path_chars=12,
                                      max_list_page=9),
        assembly=dataclasses.replace(settings.assembly, max_messages=2, max_message_chars=20))
    async with AsyncTestClient(app=create_app(custom, endpoints, embedder=embedder)) as test_client:
        yield test_client


async def test_documented_limits_are_the_enforced_ones(small: AsyncTestClient[Any], tenant: Tenant,
                                                       settings: Settings) -> None:
    schema = (await small.get("/schema/openapi.json")).json()

    def prop(name: str, field: str) -> Schema:
        return non_null(component(schema, name)["properties"][field])

    def query(path: str, name: str, method: str = "get") -> Schema:
        params = {p["name"]: p for p in schema["paths"][path][method]["parameters"]}
        return non_null(params[name]["schema"])

    h = tenant.headers
    text = max_length(prop("MemoryIn", "text"))
    assert text == SMALL["max_text_chars"] == max_length(prop("MemoryPatch", "text"))
    assert (await small.post("/v1/memories", json={"text": "t" * text}, headers=h)).status_code == 201
    assert (await small.post("/v1/memories", json={"text": "t" * (text + 1)}, headers=h)).status_code == 413
    batch = prop("MemoryBatchIn", "memories")["maxItems"]
    assert batch == SMALL["max_batch"] and prop("MemoryBatchIn", "memories")["minItems"] == 1
    assert (await small.post("/v1/memories", json={"memories": [{"text": "b"}] * batch}, headers=h)).status_code == 201
    over = {"memories": [{"text": "b"}] * (batch + 1)}
    assert (await small.post("/v1/memories", json=over, headers=h)).status_code == 413
    assert (await small.post("/v1/memories", json={"memories": []}, headers=h)).status_code == 400
    page = query("/v1/memories", "limit")["maximum"]
    assert page == SMALL["max_page_size"] == prop("SearchRequest", "limit")["maximum"]
    assert (await small.get(f"/v1/memories?limit={int(page)}", headers=h)).status_code == 200
    assert (await small.get(f"/v1/memories?limit={int(page) + 1}", headers=h)).status_code == 400
    assert (await small.post("/v1/memories/search", json={"query": "b", "limit": int(page) + 1},
                             headers=h)).status_code == 400
    directive = max_length(prop("DirectiveIn", "content"))
    assert directive == SMALL["max_directive_chars"]
    assert (await small.put("/v1/agents/a/directive", json={"content": "d" * directive}, headers=h)).status_code == 200
    assert (await small.put("/v1/agents/a/directive", json={"content": "d" * (directive + 1)},
                            headers=h)).status_code == 413
    q = max_length(prop("SearchRequest", "query"))
    assert q == 25 == max_length(prop("AssembleRequest", "query"))
    r = await small.post("/v1/memories/search", json={"query": "q" * q, "limit": 5}, headers=h)
    assert r.status_code == 200, r.text
    r = await small.post("/v1/memories/search", json={"query": "q" * (q + 1), "limit": 5}, headers=h)
    assert r.status_code == 400, r.text
    messages = prop("AssembleRequest", "recent_messages")["maxItems"]
    chars = max_length(prop("Message", "content"))
    assert (messages, chars) == (2, 20)
    base = {"agent_id": "a", "query": "q", "model": "gpt-4o", "max_context_tokens": 4000}
    ok = [{"role": "user", "content": "m" * chars}] * messages
    r = await small.post("/v1/context/assemble", json={**base, "recent_messages": ok}, headers=h)
    assert r.status_code == 200, r.text
    for bad in (ok + ok[:1], [{"role": "user", "content": "m" * (chars + 1)}]):
        r = await small.post("/v1/context/assemble", json={**base, "recent_messages": bad}, headers=h)
        assert r.status_code == 400, r.text
    files = prop("IngestRequest", "files")["maxItems"]
    path_chars = max_length(prop("FileIn", "path"))
    assert (files, path_chars) == (2, 12)
    docs = [{"path": f"p{i}".ljust(path_chars, "x"), "content": "c"} for i in range(files)]
    assert (await small.post("/v1/documents", json={"files": docs}, headers=h)).status_code == 200
    assert (await small.post("/v1/documents", json={"files": [*docs, {"path": "z", "content": "c"}]},
                             headers=h)).status_code == 413
    assert (await small.post("/v1/documents", json={"files": [{"path": "y" * (path_chars + 1), "content": "c"}]},
                             headers=h)).status_code == 400
    assert query("/v1/documents", "limit")["maximum"] == 9
    assert (await small.get("/v1/documents?limit=9", headers=h)).status_code == 200
    assert (await small.get("/v1/documents?limit=10", headers=h)).status_code == 400
    appended = prop("AppendIn", "messages")["maxItems"]
    content = max_length(prop("MessageIn", "content"))
    assert (appended, content) == (SMALL["max_batch"], SMALL["max_text_chars"])
    chat = "/v1/conversations/limits/messages"
    ok_messages = [{"content": "m" * content, "role": "user"}] * appended
    assert (await small.post(chat, json={"messages": ok_messages}, headers=h)).status_code == 201
    assert (await small.post(chat, json={"messages": [*ok_messages, ok_messages[0]]}, headers=h)).status_code == 413
    assert (await small.post(chat, json={"messages": [{"content": "m" * (content + 1)}]}, headers=h)).status_code == 413
    for path, template in (("/v1/conversations", "/v1/conversations"),
                           (chat, "/v1/conversations/{conversation_id}/messages")):
        most = query(template, "limit")["maximum"]
        assert most == SMALL["max_page_size"]
        assert (await small.get(f"{path}?limit={int(most)}", headers=h)).status_code == 200
        assert (await small.get(f"{path}?limit={int(most) + 1}", headers=h)).status_code == 400
    dim = settings.embedding.dim
    embedding = prop("MemoryIn", "embedding")
    assert embedding["minItems"] == embedding["maxItems"] == dim
    vector = {"text": "v", "embedding": [0.5] * dim}
    assert (await small.post("/v1/memories", json=vector, headers=h)).status_code == 201
    for bad_vector in ([0.5] * (dim - 1), [0.0] * dim, [1e-7] * dim):
        r = await small.post("/v1/memories", json={"text": "v", "embedding": bad_vector}, headers=h)
        assert r.status_code == 400, r.text


def test_text_rules_in_the_schema_match_the_code(schema: Schema) -> None:
    """Blank (by ``str.isspace``) and NUL-holding texts are rejected in code; the pattern says the same."""
    pattern = re.compile(component(schema, "MemoryIn")["properties"]["text"]["pattern"])
    for text, valid in (("a", True), (" a\n", True), ("", False), (" \t\n", False), ("\x1c\x1f\u3000", False),
                        ("a\x00", False), ("\u2028x", True)):
        assert bool(pattern.search(text)) is valid, repr(text)
        assert (bool(text.strip()) and "\x00" not in text) is valid, repr(text)
    speaker = re.compile(non_null(component(schema, "MessageIn")["properties"]["speaker"])["pattern"])
    for name, valid in (("Ann", True), (" Mary Ann ", True), ("Zoë", True), ("", False), ("  ", False),
                        ("\u3000", False), ("two\nlines", False), ("tab\tbed", False), ("a\x00", False)):
        assert bool(speaker.search(name)) is valid, repr(name)


def _patterns(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for value in node.values() for p in _patterns(value)]
    return [p for item in node for p in _patterns(item)] if isinstance(node, list) else []


def test_every_pattern_compiles_where_clients_and_validators_read_it(schema: Schema) -> None:
    """A pattern a validator cannot compile is dropped (schemathesis then generates what the service
    refuses; a client's validator accepts it): each must compile in Python and in jsonschema-rs (Rust
    regexes, which cannot name a surrogate)."""
    patterns = sorted(set(_patterns(schema)))
    assert len(patterns) > 10
    for pattern in patterns:
        re.compile(pattern)
        jsonschema_rs.validator_for({"type": "string", "pattern": pattern})


# -- the docs page ------------------------------------------------------------------------------------

async def test_the_docs_page_loads_only_assets_the_service_serves(client: AsyncTestClient[Any]) -> None:
    for page in ("/schema", "/schema/swagger"):
        r = await client.get(page)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", r.text)
        assert len(urls) >= 4, urls  # the CSS, two scripts and the icon
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), f"{url} is not same-origin"
            asset = await client.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 100, url
        assert "SwaggerUIBundle(" in r.text
    js = await client.get("/schema/assets/swagger-ui-bundle.js")
    assert "javascript" in js.headers["content-type"] and b"SwaggerUIBundle" in js.content


async def test_every_memory_time_states_its_year_range(schema: Schema, client: AsyncTestClient[Any],
                                                       tenant: Tenant) -> None:
    """The years 1900-2199 that writes enforce are in the schema for every time a memory carries, so a
    schema-valid time is never refused (and ``as_of=`` empty is no date-time)."""
    for component in ("MemoryIn", "MemoryPatch"):
        for name in ("occurred_at", "expires_at", "valid_until"):
            prop = schema["components"]["schemas"][component]["properties"][name]
            assert OCCURRED_PATTERN in json.dumps(prop), (component, name, prop)
    r = await client.post("/v1/memories", json={"text": "far future", "valid_until": "2300-01-01T00:00:00Z"},
                          headers=tenant.headers)
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "valid_until"
    r = await client.get("/v1/memories", params={"as_of": ""}, headers=tenant.headers)
    assert r.status_code == 400 and r.json()["error"]["details"]["field"] == "as_of"


def test_every_format_of_the_service_has_a_fuzzing_strategy(schema: Schema) -> None:
    """A format of the service's own (a cursor's encoding) that the fuzzer does not know is drawn as
    any string, and a cursor no page could have issued is then reported as valid data refused."""
    own = set(re.findall(r'"format": "(pgcontext-[a-z-]+)"', json.dumps(schema)))
    hooks = (Path(__file__).with_name("schemathesis_hooks.py")).read_text()
    assert own and {name for name in own if f'format("{name}"' not in hooks} == set()

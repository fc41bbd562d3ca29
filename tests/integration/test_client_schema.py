"""The Python client's types against the OpenAPI schema the live service publishes (/schema/openapi.json).

Every operation in the schema is covered by a client call (bar the explicitly excluded), each call hits
a path of its operation, and every response (and request) object the client declares has the same field
names, the same required fields and the same coarse JSON types as the schema says, all the way down.
The comparison walks both schemas by meaning (``$ref``, ``oneOf``/``anyOf`` alternatives, arrays, maps),
not by component names, so a schema that documents more (titles, descriptions, formats, error answers,
a request body for an endpoint that had none) still passes as long as it agrees with the client.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import httpx
import msgspec
import pytest
from pgcontext_client import endpoints as ep
from pgcontext_client import types as t
from pgcontext_client._http import Call

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.integration.live import live_service

pytestmark = pytest.mark.integration

ID = UUID("01a22ddc-3507-74bb-9886-f62081aacd52")
EXCLUDED = {("GET", "/metrics"): "Prometheus text for scrapers, not an API call"}
Schema = dict[str, Any]


def client_calls() -> dict[tuple[str, str], list[Call[Any]]]:
    """Every call the client can make, by the schema operation it should hit."""
    return {
        ("POST", "/v1/memories"): [ep.create_memory("x"), ep.create_memories([t.MemoryIn(text="x")])],
        ("GET", "/v1/memories"): [ep.list_memories(agent_id="a")],
        ("DELETE", "/v1/memories"): [ep.erase_agent("a")],
        ("GET", "/v1/memories/{memory_id}"): [ep.get_memory(ID)],
        ("PATCH", "/v1/memories/{memory_id}"): [ep.update_memory(ID, text="y")],
        ("DELETE", "/v1/memories/{memory_id}"): [ep.delete_memory(ID)],
        ("GET", "/v1/memories/hot"): [ep.hot_set("a")],
        ("POST", "/v1/memories/feedback"): [ep.feedback({ID: True})],
        ("POST", "/v1/memories/search"): [ep.search("q")],
        ("GET", "/v1/export"): [Call("GET", ep.EXPORT_PATH, None)],  # streamed NDJSON: Client.export
        ("POST", "/v1/import"): [ep.import_lines([{"type": "end", "counts": {}}])],
        ("POST", "/v1/context/assemble"): [ep.assemble("a", "q", max_context_tokens=1000)],
        ("PUT", "/v1/agents/{agent_id}/directive"): [ep.put_directive("a", "c")],
        ("GET", "/v1/agents/{agent_id}/directive"): [ep.get_directive("a")],
        ("DELETE", "/v1/agents/{agent_id}/directive"): [ep.delete_directive("a")],
        ("POST", "/v1/documents"): [ep.ingest_documents([t.FileIn(path="a.py", content="x")])],
        ("GET", "/v1/documents"): [ep.list_documents()],
        ("DELETE", "/v1/documents"): [ep.delete_documents(["a.py"])],
        ("GET", "/v1/documents/index"): [ep.documents_index()],
        ("GET", "/v1/memories/{memory_id}/history"): [ep.memory_history(ID)],
        ("POST", "/v1/memories/{memory_id}/history/{event_id}/undo"): [ep.undo_event(ID, ID, reason="r")],
        ("GET", "/v1/org/settings"): [ep.org_settings()],
        ("PATCH", "/v1/org/settings"): [ep.set_org_settings(on_duplicate="keep")],
        ("POST", "/v1/conversations/{conversation_id}/messages"): [
            ep.append_messages("c", [t.MessageIn(content="x", speaker="Ann")], agent_id="a")],
        ("GET", "/v1/conversations/{conversation_id}/messages"): [ep.list_messages("c", session_id="s", order="desc")],
        ("DELETE", "/v1/conversations/{conversation_id}/messages"): [ep.truncate_conversation("c", 2, message_count=3)],
        ("GET", "/v1/conversations/{conversation_id}"): [ep.get_conversation("c")],
        ("GET", "/v1/conversations"): [ep.list_conversations(agent_id="a")],
        ("DELETE", "/v1/conversations/{conversation_id}"): [ep.delete_conversation("c")],
        ("GET", "/healthz"): [ep.health()],
        ("GET", "/readyz"): [ep.ready()],
    }


@pytest.fixture(scope="module")
def openapi(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> Schema:
    with live_service(settings, endpoints, embedder) as url:
        response = httpx.get(f"{url}/schema/openapi.json", timeout=30)
    assert response.status_code == 200, response.text
    schema = response.json()
    assert isinstance(schema, dict)
    return schema


def operations(schema: Schema) -> Iterator[tuple[str, str, Schema]]:
    for path, item in schema["paths"].items():
        for method, op in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                yield method.upper(), path, op


class Walker:
    """Resolves a schema node (from the service's document or the client's msgspec schema) to what the
    comparison needs: its object alternatives, its coarse JSON types, its array items and map values."""

    def __init__(self, document: Schema) -> None:
        self.document = document

    def resolve(self, node: Schema) -> Schema:
        seen = 0
        while "$ref" in node:
            seen += 1
            assert seen < 50, node
            target: Any = self.document
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        return node

    def alternatives(self, node: Schema) -> list[Schema]:
        node = self.resolve(node)
        if "properties" in node or "type" in node:
            # oneOf/anyOf/allOf beside the node's own shape are extra rules on it (e.g. "a budget or
            # selective", "one of the two feedback forms"), not alternative shapes.
            return [node]
        for key in ("oneOf", "anyOf"):
            if key in node:
                return [alt for sub in node[key] for alt in self.alternatives(sub)]
        if "allOf" in node and len(node["allOf"]) == 1:
            return self.alternatives(node["allOf"][0])
        return [node]

    def objects(self, node: Schema) -> list[Schema]:
        return [alt for alt in self.alternatives(node) if "properties" in alt]

    def types(self, node: Schema) -> set[str]:
        found: set[str] = set()
        for alt in self.alternatives(node):
            kind = alt.get("type")
            if isinstance(kind, list):
                found.update(kind)
            elif isinstance(kind, str):
                found.add(kind)
            elif "properties" in alt:
                found.add("object")
            elif "const" in alt or "enum" in alt:
                values = alt.get("enum", [alt.get("const")])
                found.update("null" if v is None else "string" if isinstance(v, str) else "integer"
                             if isinstance(v, int) else "other" for v in values)
        return found

    def children(self, node: Schema) -> list[Schema]:
        """Array items and map values (where nested objects hide)."""
        out: list[Schema] = []
        for alt in self.alternatives(node):
            if isinstance(alt.get("items"), dict):
                out.append(alt["items"])
            if isinstance(alt.get("additionalProperties"), dict) and alt["additionalProperties"]:
                out.append(alt["additionalProperties"])
        return out


def compare(service: Walker, s_node: Schema, client: Walker, c_node: Schema, where: str, *, request: bool,
            problems: list[str]) -> None:
    s_types, c_types = service.types(s_node), client.types(c_node)
    if s_types and c_types:
        # A request field the client leaves out is typed ``X | None`` there (None is never sent).
        s_cmp, c_cmp = (s_types - {"null"}, c_types - {"null"}) if request else (s_types, c_types)
        s_cmp = {"number" if k == "integer" and "number" in c_cmp else k for k in s_cmp}
        if s_cmp != c_cmp:
            problems.append(f"{where}: types {sorted(c_types)} in the client, {sorted(s_types)} in the schema")
    s_objs, c_objs = service.objects(s_node), client.objects(c_node)
    if s_objs and not c_objs and c_types != set():
        problems.append(f"{where}: an object in the schema ({sorted(s_objs[0]['properties'])}), untyped in the client")
    for c_obj in c_objs:
        names = set(c_obj["properties"])
        match = next((s for s in s_objs if set(s["properties"]) == names), None)
        if match is None:
            closest = max(s_objs, key=lambda s: len(names & set(s["properties"])), default=None)
            if closest is None:
                problems.append(f"{where}: the client has an object {sorted(names)}, the schema none")
            else:
                theirs = set(closest["properties"])
                problems.append(f"{where} ({closest.get('title', '?')}): only in the client {sorted(names - theirs)}, "
                                f"only in the schema {sorted(theirs - names)}")
            continue
        s_required, c_required = set(match.get("required", [])), set(c_obj.get("required", []))
        if s_required != c_required:
            problems.append(f"{where} ({match.get('title', '?')}): required in the client {sorted(c_required)}, "
                            f"in the schema {sorted(s_required)}")
        for name in sorted(names):
            compare(service, match["properties"][name], client, c_obj["properties"][name], f"{where}.{name}",
                    request=request, problems=problems)
    for s_child, c_child in zip(service.children(s_node), client.children(c_node), strict=False):
        compare(service, s_child, client, c_child, f"{where}[]", request=request, problems=problems)


def client_schema(kind: Any) -> tuple[Walker, Schema]:
    (node,), components = msgspec.json.schema_components([kind], ref_template="#/$defs/{name}")
    return Walker({"$defs": components}), node


def json_schema(content: Schema) -> Schema | None:
    for media, body in content.items():
        if "json" in media and "schema" in body:
            schema = body["schema"]
            assert isinstance(schema, dict)
            return schema
    return None


def test_every_operation_has_a_client_call(openapi: Schema) -> None:
    published = {(method, path) for method, path, _ in operations(openapi)}
    covered = set(client_calls())
    assert published - covered - set(EXCLUDED) == set(), "operations the client does not cover"
    assert covered - published == set(), "client calls for operations the service does not publish"
    for (method, template), calls in client_calls().items():
        pattern = re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")
        for call in calls:
            assert call.method == method and pattern.match(call.path), (method, template, call.path)


def test_response_types_match_the_schema(openapi: Schema) -> None:
    service = Walker(openapi)
    problems: list[str] = []
    checked = 0
    for method, path, op in operations(openapi):
        for call in client_calls().get((method, path), []):
            for status, response in op.get("responses", {}).items():
                schema = json_schema(response.get("content", {}))
                if not status.startswith("2") or schema is None or call.returns is None:
                    continue
                client, node = client_schema(call.returns)
                compare(service, schema, client, node, f"{method} {path} -> {call.returns.__name__}",
                        request=False, problems=problems)
                checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 17, f"only {checked} response schemas were compared"


def test_request_types_match_the_schema(openapi: Schema) -> None:
    service = Walker(openapi)
    problems: list[str] = []
    checked = 0
    for method, path, op in operations(openapi):
        schema = json_schema(op.get("requestBody", {}).get("content", {}))
        if schema is None:
            continue  # the handler reads the raw body (memories and documents POST): nothing published
        for call in client_calls().get((method, path), []):
            assert call.body is not None, f"{method} {path} takes a body; the client sends none"
            client, node = client_schema(type(call.body))
            compare(service, schema, client, node, f"{method} {path} <- {type(call.body).__name__}",
                    request=True, problems=problems)
            checked += 1
    assert not problems, "\n".join(problems)
    assert checked >= 5, f"only {checked} request schemas were compared"


def test_the_comparison_catches_a_missing_field_and_a_wrong_required_set() -> None:
    """The checker itself: a client type that lost a field, or made one optional, is reported."""

    class Wrong(msgspec.Struct, kw_only=True):
        agent_id: str
        content: str | None = None

    service = Walker({"components": {"schemas": {"DirectiveOut": {
        "type": "object", "title": "DirectiveOut", "required": ["agent_id", "content", "version"],
        "properties": {"agent_id": {"type": "string"}, "content": {"type": "string"},
                       "version": {"type": "integer"}}}}}})
    problems: list[str] = []
    client, node = client_schema(Wrong)
    compare(service, {"$ref": "#/components/schemas/DirectiveOut"}, client, node, "x", request=False,
            problems=problems)
    assert problems == ["x (DirectiveOut): only in the client [], only in the schema ['version']"]

    class Optional(msgspec.Struct, kw_only=True):
        agent_id: str
        content: str = ""
        version: int = 0

    problems = []
    client, node = client_schema(Optional)
    compare(service, {"$ref": "#/components/schemas/DirectiveOut"}, client, node, "x", request=False,
            problems=problems)
    assert problems == ["x (DirectiveOut): required in the client ['agent_id'], "
                        "in the schema ['agent_id', 'content', 'version']"]

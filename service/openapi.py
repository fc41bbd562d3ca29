"""The OpenAPI contract at ``/schema``: what every operation accepts and answers, exactly.

Litestar builds the schema from the handlers' types and decorators. This module supplies what the
types cannot say, and :func:`finish_schema` completes the built schema once, when the app is made:

- the HTTP bearer security scheme, on every operation that authenticates (a handler with an
  ``org_id`` dependency -- the same test :func:`service.deps.before_request` applies);
- the request body of the handlers that decode their own (``opt={"body": <type>}`` on the decorator);
- errors in the service's one shape (:class:`ErrorBody`), with every status an operation can
  answer: its own (``responses=errors(404, 409)`` on its decorator) and the ones shared by every
  authenticated, parameterised or body-carrying operation (401, 429, 503; 400; 413);
- the limits that come from settings (text lengths, batch and page sizes), so the schema states what
  validation enforces in this deployment, and the text rules (not blank, no NUL) checked in code;
- the docs page (Swagger UI), whose scripts and styles the service serves itself (no CDN).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    Operation,
    Reference,
    RequestBody,
    Schema,
    SecurityScheme,
)
from litestar.openapi.spec.enums import OpenAPIType
from litestar.plugins import OpenAPISchemaPlugin
from litestar.plugins.prometheus import PrometheusController
from litestar.router import Router
from litestar.routes import HTTPRoute
from litestar.static_files import create_static_files_router
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from litestar.typing import FieldDefinition

from service import __version__
from service.jsondepth import MAX_JSON_DEPTH
from service.settings import Settings
from service.tokens import _MODEL_PREFIXES as MODEL_PREFIXES
from service.tokens import ENCODINGS

BEARER: Final = "bearerAuth"
SCHEMA_PATH: Final = "/schema"
ASSETS_PATH: Final = "/assets"
"""Swagger UI's files, under ``/schema`` (``/schema/assets/swagger-ui-bundle.js``, ...)."""


class ErrorInfo(msgspec.Struct):
    code: str
    """Stable, machine-readable (``validation_error``, ``not_found``, ``rate_limited``, ...)."""
    message: str
    """For a human: what was wrong and, where it helps, the limit or the expected form."""
    details: dict[str, Any]
    """More about this error (e.g. ``field``, ``limit``, validation ``errors``); may be empty."""
    request_id: str
    """The request's id, as in the ``X-Request-ID`` response header and the service's logs."""


class ErrorBody(msgspec.Struct):
    """Every 4xx and 5xx answer of the service has this body."""

    error: ErrorInfo


ERROR_DESCRIPTIONS: Final[dict[int, str]] = {
    400: "Bad input: malformed JSON, nested more than 32 levels, a field of the wrong type, form or range, "
         "a bad id or cursor (`validation_error`, `malformed_json`, `bad_id`, ...).",
    401: "Missing, invalid or revoked API key (`unauthorized`). Send `Authorization: Bearer <key>`.",
    404: "Not found in the caller's org (another org's ids look exactly the same).",
    409: "Conflicts with the stored state (e.g. `idempotency_key_reused`, `managed_by_documents`).",
    413: "Too large: the body, a text, metadata or a batch is over its limit (`payload_too_large`, "
         "`text_too_long`, `metadata_too_large`, `batch_too_large`, ...); `details.limit` says the limit.",
    422: "Well-formed but cannot be done (e.g. `context_budget_too_small`).",
    429: "Too many requests: the org's rate limit (`rate_limited`) or a per-org concurrency limit; "
         "retry after `Retry-After` seconds.",
    503: "A dependency is unavailable or the service is overloaded (`database_unavailable`, "
         "`redis_unavailable`, `embedding_unavailable`, `overloaded`, ...); retry, after `Retry-After` "
         "seconds when given.",
    504: "The deadline passed before the answer was ready (`deadline_exceeded`, `client_disconnected`).",
}

_HEADERS: Final[dict[int, dict[str, str]]] = {
    401: {"WWW-Authenticate": "The scheme to authenticate with: `Bearer`."},
    429: {"Retry-After": "Seconds to wait before retrying."},
    503: {"Retry-After": "Seconds to wait before retrying (when the service is overloaded)."},
}


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """``responses=`` for a handler's decorator: the error statuses particular to the operation."""
    return {status: ResponseSpec(data_container=ErrorBody, description=ERROR_DESCRIPTIONS[status],
                                 generate_examples=False) for status in statuses}


class StrictStructs(OpenAPISchemaPlugin):
    """msgspec Structs as Litestar describes them, plus ``additionalProperties: false`` for the ones
    that reject unknown fields (``forbid_unknown_fields``): every request type does."""

    def __init__(self) -> None:
        from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin

        self._structs = StructSchemaPlugin()

    def is_plugin_supported_field(self, field_definition: FieldDefinition) -> bool:
        return self._structs.is_plugin_supported_field(field_definition)

    def to_openapi_schema(self, field_definition: FieldDefinition, schema_creator: Any) -> Schema:
        schema = self._structs.to_openapi_schema(field_definition, schema_creator)
        info = msgspec.inspect.type_info(field_definition.type_)
        assert isinstance(info, msgspec.inspect.StructType)
        if info.forbid_unknown_fields:
            schema.additional_properties = False
        # Litestar drops some of msgspec's constraints (a bound of 0, those of an UNSET-able field,
        # those of list items): restate every one from msgspec's own view of the type.
        for field in info.fields:
            prop = (schema.properties or {}).get(field.encode_name)
            if isinstance(prop, Schema):
                _restate(prop, field.type)
        return schema


_CONSTRAINTS: Final = {"ge": "minimum", "le": "maximum", "gt": "exclusive_minimum", "lt": "exclusive_maximum",
                       "multiple_of": "multiple_of", "pattern": "pattern"}


def _restate(schema: Schema, typ: msgspec.inspect.Type) -> None:
    if isinstance(typ, msgspec.inspect.UnionType):
        members = [t for t in typ.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(members) == 1:
            typ = members[0]
    constraints: dict[str, Any] = {}
    for name, key in _CONSTRAINTS.items():
        if getattr(typ, name, None) is not None:
            constraints[key] = getattr(typ, name)
    sized = isinstance(typ, (msgspec.inspect.ListType, msgspec.inspect.SetType, msgspec.inspect.FrozenSetType))
    for bound in ("min_length", "max_length"):
        if getattr(typ, bound, None) is not None:
            constraints[bound.replace("length", "items") if sized else bound] = getattr(typ, bound)
    if constraints:
        _constrain(schema, constraints)
    if isinstance(typ, (msgspec.inspect.ListType, msgspec.inspect.SetType, msgspec.inspect.FrozenSetType)):
        target = _non_null(schema)
        if isinstance(target.items, Schema):
            _restate(target.items, typ.item_type)


def _non_null(schema: Schema) -> Schema:
    for alternative in schema.one_of or schema.any_of or []:
        if isinstance(alternative, Schema) and alternative.type != OpenAPIType.NULL:
            return alternative
    return schema


def allow_header_middleware(app: ASGIApp) -> ASGIApp:
    """``Allow`` on OPTIONS answers lists every method of the path. Litestar's automatic OPTIONS handler
    is made with the first handler registered for a path and keeps that route's methods (for
    ``/v1/memories``: ``OPTIONS, POST``), so the header is rewritten from the app's final routes."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "OPTIONS":  # type: ignore[comparison-overlap]
            await app(scope, receive, send)
            return
        allow = _allowed_methods(scope["app"]).get(str(scope.get("path_template")))

        async def send_allow(message: Message) -> None:
            if message["type"] == "http.response.start" and allow is not None:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"allow"]
                message["headers"] = [*headers, (b"allow", allow.encode())]
            await send(message)

        await app(scope, receive, send_allow)

    return middleware


@functools.lru_cache(maxsize=16)
def _allowed_methods(app: Litestar) -> dict[str, str]:
    return {route.path_format: ", ".join(sorted(route.methods)) for route in app.routes
            if isinstance(route, HTTPRoute) and route.path_format}


# -- the docs page ---------------------------------------------------------------------------------

def swagger_ui_dir() -> Path:
    """Swagger UI's distribution files, as the ``swagger-ui-py`` wheel ships them (found without
    importing the package, whose web-framework adapters the service does not use)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


class SelfHostedSwagger(SwaggerRenderPlugin):
    """Swagger UI with its JS, CSS and icon served from ``/schema/assets`` by the service itself."""

    def __init__(self) -> None:
        base = SCHEMA_PATH + ASSETS_PATH
        super().__init__(js_url=f"{base}/swagger-ui-bundle.js", css_url=f"{base}/swagger-ui.css",
                         standalone_preset_js_url=f"{base}/swagger-ui-standalone-preset.js",
                         favicon=f"<link rel='icon' type='image/png' href='{base}/favicon-32x32.png'>")

    def receive_router(self, router: Router) -> None:
        super().receive_router(router)
        router.register(create_static_files_router(path=ASSETS_PATH, directories=[swagger_ui_dir()],
                                                   name="swagger_ui_assets", include_in_schema=False))


def openapi_config() -> OpenAPIConfig:
    return OpenAPIConfig(
        title="pgcontext", version=__version__, path=SCHEMA_PATH, render_plugins=[SelfHostedSwagger()],
        components=Components(security_schemes={BEARER: SecurityScheme(
            type="http", scheme="bearer", description="An API key of your org: `Authorization: Bearer <key>`.")}),
        create_examples=False,
    )


# -- finishing the built schema ---------------------------------------------------------------------

_BODY_METHODS: Final = frozenset({"POST", "PUT", "PATCH"})
_SPACE: Final = r"\t\n\x0b\x0c\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
"""Exactly the characters ``str.isspace`` (and so ``str.strip``) treats as whitespace: regex engines'
``\\s`` differ on some (``\x1c``-``\x1f``)."""
NOT_BLANK: Final = rf"^[^\x00]*[^\x00{_SPACE}][^\x00]*$"
"""Some character that is not whitespace, and no NUL anywhere (PostgreSQL text cannot hold NUL)."""
NO_NUL: Final = r"^[^\x00]*$"


def finish_schema(app: Litestar, settings: Settings) -> OpenAPI:
    """Complete ``app``'s OpenAPI schema in place (call once, after the app is built)."""
    openapi = app.openapi_schema
    components = openapi.components
    schemas = components.schemas = dict(components.schemas or {})
    schemas.update(_generate(app, ErrorBody)[1])
    for route, method, operation in _operations(app, openapi):
        handler = route.route_handler_map[method][0]  # type: ignore[index]
        authenticated = "org_id" in handler.parsed_fn_signature.parameters
        body_type = handler.opt.get("body")
        if body_type is not None:
            body_schema, body_components = _generate(app, body_type)
            schemas.update(body_components)
            operation.request_body = RequestBody(
                required=True, content={"application/json": OpenAPIMediaType(schema=body_schema)})
        responses = operation.responses = dict(operation.responses or {})
        if isinstance(getattr(handler.fn, "__self__", None), PrometheusController):  # its text format, not JSON
            responses["200"] = OpenAPIResponse(description="The metrics, in Prometheus' text format.", content={
                "text/plain": OpenAPIMediaType(schema=Schema(type=OpenAPIType.STRING))})
        shared: set[int] = set()
        if authenticated:
            operation.security = [{BEARER: []}]
            shared |= {401, 429, 503}
        if handler.guards:  # /metrics with a token
            shared.add(401)
        if operation.parameters or operation.request_body:
            shared.add(400)
        if method in _BODY_METHODS and operation.request_body:
            shared |= {400, 413}
        for status in shared | {int(s) for s in responses if int(s) >= 400}:
            responses[str(status)] = _error_response(status)
        if any(not isinstance(p, Reference) and p.param_in == "query" for p in operation.parameters or []):
            # A request line over 64 KiB (e.g. hundreds of long ``path`` values) is refused by the HTTP
            # server itself, in plain text, before the service sees it.
            refused = responses["400"]
            assert isinstance(refused, OpenAPIResponse) and refused.content is not None
            refused.content["text/plain"] = OpenAPIMediaType(
                schema=Schema(type=OpenAPIType.STRING, description="The HTTP server's own refusal of a request "
                              "line over 64 KiB: `Invalid HTTP request received.`"))
    _apply_limits(openapi, settings)
    _apply_rules(openapi)
    return openapi


def _operations(app: Litestar, openapi: OpenAPI) -> Iterator[tuple[HTTPRoute, str, Operation]]:
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or openapi.paths is None:
            continue
        item = openapi.paths.get(route.path_format or "/")
        if item is None:
            continue
        for method in route.route_handler_map:
            operation = getattr(item, method.lower(), None)
            if isinstance(operation, Operation):
                yield route, method, operation


def _error_response(status: int) -> OpenAPIResponse:
    headers: dict[str, OpenAPIHeader | Reference] | None = {
        name: OpenAPIHeader(description=text, schema=Schema(type=OpenAPIType.STRING), required=False)
        for name, text in _HEADERS.get(status, {}).items()} or None
    return OpenAPIResponse(description=ERROR_DESCRIPTIONS[status], headers=headers, content={
        "application/json": OpenAPIMediaType(schema=Reference(ref=f"#/components/schemas/{ErrorBody.__name__}"))})


def _generate(app: Litestar, annotation: Any) -> tuple[Schema | Reference, dict[str, Schema]]:
    """The schema of ``annotation`` and the components it refers to, made by Litestar's own generator
    (so they read like the ones it made from the handlers' signatures). Its references get their
    names when the components are generated, so both come from one registry."""
    from litestar._openapi.datastructures import OpenAPIContext
    from litestar._openapi.schema_generation import SchemaCreator

    assert app.openapi_config is not None
    context = OpenAPIContext(openapi_config=app.openapi_config, plugins=app.plugins.openapi)
    creator = SchemaCreator.from_openapi_context(context, prefer_alias=True)
    schema: Schema | Reference = creator.for_field_definition(FieldDefinition.from_annotation(annotation))
    components: dict[str, Schema] = context.schema_registry.generate_components_schemas()
    return schema, components


# -- limits from settings and rules checked in code ---------------------------------------------------

def _limits(settings: Settings) -> dict[tuple[str, str], dict[str, Any]]:
    """(component, property) -> constraints that validation enforces with this deployment's settings."""
    # Imported here: these feature modules import ``errors`` from this one.
    from service.assembly.feedback import MAX_FEEDBACK_ITEMS
    from service.memories.types import DOCUMENT_CHUNK_KIND
    from service.memories.validation import MAX_EMBEDDING_VALUE, MIN_EMBEDDING_COMPONENT, OCCURRED_PATTERN

    lim, docs, asm = settings.limits, settings.documents, settings.assembly
    text = _text(lim.max_text_chars, NOT_BLANK)
    query = _text(settings.retrieval.max_query_chars, NOT_BLANK)
    dim = settings.embedding.dim
    kind = {"schema_not": Schema(const=DOCUMENT_CHUNK_KIND)}  # written only through /v1/documents
    return {
        ("MemoryIn", "text"): text,
        ("MemoryPatch", "text"): text,
        ("MemoryIn", "kind"): kind,
        ("MemoryPatch", "kind"): kind,
        ("MemoryIn", "occurred_at"): {"pattern": OCCURRED_PATTERN},
        ("MemoryPatch", "occurred_at"): {"pattern": OCCURRED_PATTERN},
        ("MemoryIn", "embedding"): {"min_items": dim, "max_items": dim, "items": Schema(
            type=OpenAPIType.NUMBER, minimum=-MAX_EMBEDDING_VALUE, maximum=MAX_EMBEDDING_VALUE), "contains": Schema(
            any_of=[Schema(minimum=MIN_EMBEDDING_COMPONENT), Schema(maximum=-MIN_EMBEDDING_COMPONENT)])},
        ("MemoryBatchIn", "memories"): {"min_items": 1, "max_items": lim.max_batch},
        ("DirectiveIn", "content"): _text(lim.max_directive_chars, NOT_BLANK),
        ("SearchRequest", "query"): query,
        ("SearchRequest", "limit"): {"maximum": lim.max_page_size},
        ("SearchRequest", "modes"): {"min_items": 1},
        ("SearchFilters", "kinds"): {"min_items": 1},
        ("SearchFilters", "levels"): {"min_items": 1},
        ("SearchFilters", "source_prefix"): {"pattern": NO_NUL},
        ("AssembleRequest", "query"): query,
        ("AssembleRequest", "model"): {"pattern": model_pattern()},
        ("AssembleRequest", "recent_messages"): {"max_items": asm.max_messages},
        ("AssembleRequest", "max_context_tokens"): {"maximum": asm.max_context_tokens},
        ("AssembleRequest", "reserve_tokens"): {"maximum": asm.max_context_tokens},
        ("Message", "content"): _text(asm.max_message_chars, NO_NUL),
        ("Message", "role"): {"pattern": NO_NUL},
        ("FeedbackIn", "items"): {"min_items": 1, "max_items": MAX_FEEDBACK_ITEMS},
        ("FeedbackIn", "memory_ids"): {"min_items": 1, "max_items": MAX_FEEDBACK_ITEMS},
        ("IngestRequest", "files"): {"min_items": 1, "max_items": docs.max_files_per_request},
        ("FileIn", "path"): _text(docs.max_path_chars, DOCUMENT_PATH),
        ("FileIn", "content"): {"pattern": NO_NUL},
    }


def _text(max_length: int, pattern: str) -> dict[str, Any]:
    """A pattern and a length limit; the limit in an ``allOf`` of its own, which means the same and lets
    a generator (schemathesis) draw matching strings ~5x faster than from both side by side."""
    return {"pattern": pattern, "all_of": [Schema(max_length=max_length)]}


def _parameters(settings: Settings) -> dict[tuple[str, str], dict[str, Any]]:
    """(path, parameter) -> constraints of path, query and header parameters checked in code."""
    from service.documents.handlers import MAX_DELETE_PATHS
    from service.memories.types import AGENT_ID_MAX_LENGTH, AGENT_ID_PATTERN
    from service.memories.write import IDEMPOTENCY_KEY_MAX

    agent = {"min_length": 1, "max_length": AGENT_ID_MAX_LENGTH, "pattern": AGENT_ID_PATTERN}
    path = Schema(type=OpenAPIType.STRING, pattern=DOCUMENT_PATH,
                  all_of=[Schema(max_length=settings.documents.max_path_chars)])
    deadline = {"replace": Schema(type=OpenAPIType.NUMBER)}
    return {
        ("/v1/memories", "limit"): {"maximum": settings.limits.max_page_size},
        ("/v1/memories", "cursor"): {"format": "pgcontext-memories-cursor", "description": MEMORIES_CURSOR},
        **{("/v1/memories", name): {"format": "date-time"} for name in (
            "created_after", "created_before", "occurred_after", "occurred_before")},
        ("/v1/memories", "Idempotency-Key"): {"min_length": 1, "max_length": IDEMPOTENCY_KEY_MAX},
        ("/v1/memories/{memory_id}", "memory_id"): {"format": "uuid"},
        ("/v1/agents/{agent_id}/directive", "agent_id"): agent,
        ("/v1/documents", "limit"): {"maximum": settings.documents.max_list_page},
        ("/v1/documents", "cursor"): {"format": "pgcontext-documents-cursor", "description": DOCUMENTS_CURSOR},
        ("/v1/documents", "path_prefix"): {"pattern": NO_NUL},
        ("/v1/documents", "path"): {"min_items": 1, "max_items": MAX_DELETE_PATHS, "items": path},
        ("/v1/context/assemble", "X-Deadline-Ms"): deadline,
        ("/v1/context/assemble", "X-Timeout-Ms"): deadline,
    }


MEMORIES_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of `<created_at, RFC 3339>|<id>`, "
                          "the position after which the page starts.")
DOCUMENTS_CURSOR: Final = ("`next_cursor` of the previous page: base64url (unpadded) of the JSON list "
                           "`[collection, path]`, the position after which the page starts.")
DOCUMENT_PATH: Final = (lambda seg: rf"^{seg}(?:/{seg})*$")(
    r"(?:[^/\\.\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]*|\.[^/\\.\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]*"
    r"|\.\.[^/\\\x00-\x1f\x7f]+)")
"""Relative posix segments, none empty, ``.`` or ``..``; no backslash or control character."""


def model_pattern() -> str:
    """What :func:`service.tokens.encoding_for_model` accepts, as a (case-insensitive) regex."""
    def anycase(text: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in text)

    encodings = "|".join(anycase(name) for name in ENCODINGS)
    prefixes = "|".join(anycase(prefix) for prefix, _ in MODEL_PREFIXES)
    return (rf"^\s*(?:(?:{encodings})|(?:[\s\S]*/)?(?:[fF][tT]:)?(?:{prefixes})(?:[-.:][^/]*)?)\s*$")


def _apply_limits(openapi: OpenAPI, settings: Settings) -> None:
    schemas = openapi.components.schemas or {}
    for (component, prop), constraints in _limits(settings).items():
        target = schemas.get(component)
        if target is None or target.properties is None or prop not in target.properties:
            raise RuntimeError(f"the schema has no {component}.{prop} to state its limits on")
        _constrain(target.properties[prop], constraints)
    found = set()
    limits = _parameters(settings)
    for path, item in (openapi.paths or {}).items():
        for method in ("get", "put", "post", "patch", "delete"):
            operation = getattr(item, method)
            for parameter in (operation.parameters if operation else None) or []:
                if isinstance(parameter, Reference):
                    continue
                wanted = limits.get((path, parameter.name))
                if wanted is not None and isinstance(parameter.schema, Schema):
                    if "replace" in wanted:
                        parameter.schema = wanted["replace"]
                    _constrain(parameter.schema, {k: v for k, v in wanted.items()
                                                  if k not in ("description", "replace")})
                    parameter.description = wanted.get("description", parameter.description)
                    found.add((path, parameter.name))
    if missing := set(limits) - found:
        raise RuntimeError(f"the schema has no parameters {sorted(missing)} to state their limits on")


def _constrain(schema: Schema | Reference, constraints: dict[str, Any]) -> None:
    """Set ``constraints`` on ``schema``, or on its non-null alternative(s) when it is nullable."""
    if isinstance(schema, Reference):
        raise RuntimeError(f"cannot constrain a reference ({schema.ref})")
    alternatives = [s for s in (schema.one_of or schema.any_of or []) if isinstance(s, Schema)
                    and s.type != OpenAPIType.NULL]
    if alternatives:  # Litestar sets a nullable value's limits beside its oneOf: move them in
        for name in ("max_length", "min_length", "pattern", "minimum", "maximum"):
            for alternative in alternatives:
                if getattr(schema, name) is not None and getattr(alternative, name) is None:
                    setattr(alternative, name, getattr(schema, name))
            setattr(schema, name, None)
    for target in alternatives or [schema]:
        for name, value in constraints.items():
            if name in ("maximum", "minimum"):
                value = float(value)
            setattr(target, name, copy.copy(value))


def _apply_rules(openapi: OpenAPI) -> None:
    """Rules across fields and inside free-form JSON, checked in code, stated in the schema."""
    from service.documents.ingest import RESERVED_METADATA

    schemas = openapi.components.schemas = dict(openapi.components.schemas or {})
    null = Schema(type=OpenAPIType.NULL)
    no_nul = Schema(type=OpenAPIType.STRING, pattern=NO_NUL)
    value = Reference(ref="#/components/schemas/JsonValue")
    schemas["JsonValue"] = Schema(
        description="Any JSON value whose strings and keys hold no NUL character.",
        one_of=[null, Schema(type=OpenAPIType.BOOLEAN), Schema(type=OpenAPIType.NUMBER), no_nul,
                Schema(type=OpenAPIType.ARRAY, items=value),
                Schema(type=OpenAPIType.OBJECT, property_names=no_nul, additional_properties=value)])

    def metadata(reserved: tuple[str, ...] = ()) -> Schema:
        names = Schema(type=OpenAPIType.STRING, pattern=NO_NUL,
                       schema_not=Schema(enum=list(reserved)) if reserved else None)
        return Schema(type=OpenAPIType.OBJECT, property_names=names, additional_properties=value, description=(
            "A JSON object: at most 16,384 bytes encoded (PGCONTEXT_MAX_METADATA_BYTES, else 413), nested at most "
            f"{MAX_JSON_DEPTH} levels with the body, no NUL in any key or string"
            + (f"; reserved keys: {', '.join(reserved)}" if reserved else "") + "."))

    for component, prop, reserved in (("MemoryIn", "metadata", ()), ("MemoryPatch", "metadata", ()),
                                      ("SearchFilters", "metadata", ()), ("FileIn", "metadata", RESERVED_METADATA)):
        current = schemas[component].properties[prop]  # type: ignore[index]
        nullable = isinstance(current, Schema) and any(
            isinstance(s, Schema) and s.type == OpenAPIType.NULL for s in current.one_of or [])
        schemas[component].properties[prop] = (  # type: ignore[index]
            Schema(one_of=[metadata(reserved), null]) if nullable else metadata(reserved))

    # Feedback comes in one of two forms.
    schemas["FeedbackIn"].one_of = [
        Schema(required=["items"], properties={"items": Schema(type=OpenAPIType.ARRAY), "memory_ids": null,
                                                "helpful": null}),
        Schema(required=["memory_ids", "helpful"], properties={
            "memory_ids": Schema(type=OpenAPIType.ARRAY), "helpful": Schema(type=OpenAPIType.BOOLEAN),
            "items": null}),
    ]
    # ``modes`` fuses the named modes itself: with it, ``strategy`` stays ``auto``.
    schemas["SearchRequest"].schema_if = Schema(required=["modes"], properties={"modes": Schema(schema_not=null)})
    schemas["SearchRequest"].then = Schema(properties={"strategy": Schema(const="auto")})
    # An assembly needs a window or selective mode, and its agent scopes the search (no filters.agent_id).
    schemas["AssembleRequest"].any_of = [
        Schema(required=["max_context_tokens"], properties={"max_context_tokens": Schema(type=OpenAPIType.INTEGER)}),
        Schema(required=["selective"], properties={"selective": Schema(const=True)}),
    ]
    filters = copy.deepcopy(schemas["SearchFilters"])
    filters.title = "AssembleFilters"
    filters.properties["agent_id"] = null  # type: ignore[index]
    schemas["AssembleFilters"] = filters
    schemas["RetrievalOptions"].properties["filters"] = Reference(  # type: ignore[index]
        ref="#/components/schemas/AssembleFilters")
    # The list filter ``metadata`` is JSON text: described as such, clients send an object as JSON.
    for parameter in (openapi.paths or {})["/v1/memories"].get.parameters or []:  # type: ignore[union-attr]
        if not isinstance(parameter, Reference) and parameter.name == "metadata":
            parameter.schema = None
            parameter.content = {"application/json": OpenAPIMediaType(schema=metadata())}

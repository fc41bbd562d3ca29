"""The OpenAPI contract at ``/schema``: what every operation accepts and answers, exactly.

Litestar builds the schema from the handlers' types and decorators. This module supplies what the
types cannot say, and :func:`finish_schema` completes the built schema once, when the app is made:

- the HTTP bearer security scheme, on every operation that authenticates (a handler with an
  ``org_id`` dependency -- the same test :func:`service.http.deps.before_request` applies);
- the request body of the handlers that decode their own (``opt={"body": <type>}`` on the decorator);
- errors in the service's one shape (:class:`ErrorBody`), with every status an operation can
  answer: its own (``responses=errors(404, 409)`` on its decorator, :mod:`service.http.responses`)
  and the ones shared by every
  authenticated, parameterised or body-carrying operation (401, 429, 503; 400; 413, 415);
- the limits that come from settings (text lengths, batch and page sizes), so the schema states what
  validation enforces in this deployment, and the text rules (not blank, no NUL) checked in code;
- the docs page (Swagger UI), whose scripts and styles the service serves itself (no CDN).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig
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
from service.http.openapi_rules import apply_limits, apply_rules, constrain
from service.http.responses import ERROR_DESCRIPTIONS, ERROR_HEADERS, ErrorBody
from service.settings import Settings

BEARER: Final = "bearerAuth"
SCHEMA_PATH: Final = "/schema"
ASSETS_PATH: Final = "/assets"
"""Swagger UI's files, under ``/schema`` (``/schema/assets/swagger-ui-bundle.js``, ...)."""


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
        constrain(schema, constraints)
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
            shared |= {400, 413, 415}
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
    apply_limits(openapi, settings)
    apply_rules(openapi, settings)
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
        # Every 401 carries WWW-Authenticate (service.errors); the others only sometimes.
        name: OpenAPIHeader(description=text, schema=Schema(type=OpenAPIType.STRING), required=status == 401)
        for name, text in ERROR_HEADERS.get(status, {}).items()} or None
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

"""Request-scoped dependencies shared by every feature's handlers."""

from __future__ import annotations

import re
from typing import Annotated, Any, Final
from uuid import UUID

import msgspec
from litestar import Request
from litestar.datastructures import State
from litestar.di import Dependency
from litestar.params import SkipValidationMarker
from litestar.types import Scope

from service.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType
from service.http.auth import authenticate
from service.http.jsondepth import check_json_depth
from service.runtime import Services
from service.tenancy.ratecost import work_cost
from service.tenancy.ratelimit import SLOT_STATE

ServicesDep = Annotated[Services, Dependency(kind="named"), SkipValidationMarker()]
"""The running app's services (pool, Redis, embedder, ...), injected by name, never validated."""
OrgId = Annotated[UUID, Dependency(kind="named")]
"""The caller's org, resolved from its API key."""


def provide_services(state: State) -> Services:
    services = state.services
    assert isinstance(services, Services)
    return services


async def provide_org_id(request: Request[Any, Any, Any], services: ServicesDep) -> UUID:
    org_id = request.state.get("org_id")  # set by ``before_request`` for every handler that needs it
    return org_id if isinstance(org_id, UUID) else await authenticate(request, services)


_PARAM_TYPE = re.compile(r":[^}]*}")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_NO_BODY: Any = object()
JSON_MEDIA_TYPE = "application/json"
"""The one type of body the service takes (with parameters; a ``charset``, if any, ``utf-8``)."""
_UTF8 = frozenset({"utf-8", "utf8"})


async def before_request(request: Request[Any, Any, Any]) -> None:
    """Runs before a handler's parameters and body are decoded: authenticate first (an anonymous
    caller gets 401, whatever its body), refuse an org known to be short of the route's price (429,
    before the body is read, and while it is read once the bytes so far cost more than the org can
    pay), bound the body's JSON nesting (400, not a decoder's ``RecursionError``), take the request's
    full price (:mod:`service.tenancy.ratecost`: the bytes read, whatever ``Content-Length`` said or
    did not say, and the decoded body) from its org's bucket (429), then check the body's JSON types.
    A body not sent as JSON (:func:`check_json_media_type`) is refused once the caller is known, before
    it is priced or read (415), as is a path whose ids hold an escaped ``/`` (400, :func:`check_path_ids`)."""
    limiter, org_id, cost, route = None, None, 0, ""
    services: Services | None = None
    if "org_id" in request.route_handler.parsed_fn_signature.parameters:
        services = request.app.state.services
        assert isinstance(services, Services)
        org_id = request.state.org_id = await authenticate(request, services)
    check_path_ids(request.scope)
    if request.method in _BODY_METHODS:
        check_json_media_type(request.headers.get("content-type"))
    if services is not None and org_id is not None:
        check_body_size(_content_length(request), services.settings.limits.max_request_bytes)  # before its price
        limiter = services.rate_limiter
        if limiter is not None:
            limiter.enter(org_id)
            request.scope["state"][SLOT_STATE] = org_id  # given back by in_flight_middleware
            if limiter.enabled:
                route = route_template(request)
                cost = limiter.cost(request.method, route, _content_length(request))
                refusal = limiter.refusal_if_short(org_id, cost)
                if refusal is not None:
                    raise refusal
            else:
                limiter = None
    value: Any = _NO_BODY
    data = None
    if request.method in _BODY_METHODS:
        if limiter is not None and org_id is not None:
            request.receive = limiter.metered(request.receive, org_id, request.method, route)
        body = await request.body()
        if limiter is not None:
            cost = limiter.cost(request.method, route, len(body))  # chunked bodies announce no length
        check_json_depth(body)
        data = request.route_handler.parsed_fn_signature.parameters.get("data")
        if body and (data is not None or limiter is not None):  # decoded only for a reader
            try:
                value = msgspec.json.decode(body)
            except msgspec.DecodeError:
                data = None  # malformed JSON: Litestar's own decoding answers it, as before
    if limiter is not None and org_id is not None:
        extra = work_cost(limiter.settings, request.method, route, value)
        await limiter.check(org_id, cost + extra)
    if data is not None and value is not _NO_BODY:
        check_types_strictly(value, data.annotation)


ESCAPED_SLASH: Final = b"%2f"


def escaped_slash(scope: Scope) -> bool:
    """Whether the path as sent holds ``%2F``: a ``/`` escaped inside a segment, which the server decodes
    before routing (``/v1/conversations/a%2Fmessages`` reaches conversation ``a``'s messages)."""
    raw = scope.get("raw_path")  # the path alone, but some servers and test clients leave the query on
    return isinstance(raw, bytes) and ESCAPED_SLASH in raw.partition(b"?")[0].lower()


def path_id_error() -> BadRequest:
    """The 400 for an id in the path holding ``/``: no id may hold one (memory and event ids are UUIDs;
    agent, conversation and session ids are letters, digits and ``_.:@-``)."""
    return BadRequest("an id in the path holds '/' (sent as %2F), which no id may hold: the request would "
                      "reach another resource, or none; nothing was read or written",
                      code="validation_error", details={"field": "path"})


def check_path_ids(scope: Scope) -> None:
    """400 for a path whose ids hold an escaped ``/`` (:func:`escaped_slash`), before the handler reads
    or writes anything (a route that matched the decoded path is the wrong one)."""
    if escaped_slash(scope):
        raise path_id_error()


def check_json_media_type(content_type: str | None) -> None:
    """415 for a body whose ``Content-Type`` is not ``application/json`` (case aside, parameters allowed;
    a ``charset``, if any, ``utf-8``): text, forms and multipart, JSON-based types whose meaning the
    service does not implement (``application/merge-patch+json``) and no ``Content-Type`` at all (the
    service does not guess). Whatever the body holds, nothing of it is read or written."""
    media_type, *parameters = (content_type or "").split(";")
    charsets = [value.strip().strip('"').lower() for name, sep, value in (p.partition("=") for p in parameters)
                if sep and name.strip().lower() == "charset"]
    if media_type.strip().lower() == JSON_MEDIA_TYPE and all(c in _UTF8 for c in charsets):
        return
    sent = None if content_type is None else content_type[:200]
    said = "no Content-Type" if sent is None else f"Content-Type {sent!r}"
    raise UnsupportedMediaType(f"the body must be JSON, sent with Content-Type: {JSON_MEDIA_TYPE} "
                               f"(a charset, if given, utf-8); got {said}",
                               details={"accepted": [JSON_MEDIA_TYPE], "content_type": sent})


def body_too_large(limit: int, size: int | None = None) -> PayloadTooLarge:
    """The 413 for a body over ``limit`` bytes (``size``: as announced, when it was)."""
    said = f"the body is {size:,} bytes" if size is not None else "the body is larger than the limit"
    return PayloadTooLarge(f"{said}; the limit is {limit:,} bytes",
                           details={"limit": limit})


def check_body_size(length: int, limit: int) -> None:
    """A body announced over the limit is refused before it is read or priced: its price would take
    the org's whole rate-limit burst and answer 429 for what is a 413."""
    if length > limit:
        raise body_too_large(limit, length)


def _content_length(request: Request[Any, Any, Any]) -> int:
    raw = request.headers.get("content-length", "")
    return int(raw) if raw.isdigit() else 0


def check_types_strictly(value: Any, annotation: Any) -> None:
    """Litestar converts a JSON body leniently (``"5"`` for an int, ``0``/``1`` for a bool); the OpenAPI
    schema promises JSON Schema's types, which take ``5.0`` as an integer and nothing else across types.
    So: 400 for a value of another JSON type, before the handler's lenient decoding runs."""
    try:
        msgspec.convert(_integral_floats_as_ints(value), annotation, strict=True)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid body: {exc}", code="validation_error") from exc


def _integral_floats_as_ints(value: Any) -> Any:
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    return value


def route_template(request: Request[Any, Any, Any]) -> str:
    """The matched route with its parameters' types left out: ``/v1/memories/{memory_id}``."""
    return strip_param_types(str(request.scope.get("path_template") or request.url.path))


def strip_param_types(path: str) -> str:
    return _PARAM_TYPE.sub("}", path)


def parse_uuid(value: str, what: str) -> UUID:
    try:
        return UUID(value)
    except ValueError as exc:
        raise BadRequest(f"{what} must be a UUID, got {value[:60]!r}", code="bad_id") from exc

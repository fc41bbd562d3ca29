"""The per-org rate limits at the HTTP edge: refusals in a middleware, before dependency injection,
the body or Redis (:func:`rate_limit_edge`), and the in-flight slot given back once a request is
done (:func:`in_flight_middleware`). The limiter itself is :mod:`service.tenancy.ratelimit`.
"""

from __future__ import annotations

from litestar.types import ASGIApp, Receive, Scope, Send

from service.auth.failures import FailedAuthLimiter
from service.auth.keys import KeyCache, hash_key
from service.errors import TooManyRequests
from service.http.edge import send_error
from service.tenancy.ratelimit import SLOT_STATE, RateLimiter


def in_flight_middleware(app: ASGIApp) -> ASGIApp:
    """Gives back the org's in-flight slot (:meth:`RateLimiter.enter`, taken after authentication)
    once the whole request is done: response sent, stream ended, error or client gone."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await app(scope, receive, send)
        finally:
            org_id = scope.get("state", {}).pop(SLOT_STATE, None)
            if org_id is not None:
                limiter = getattr(scope["app"].state, "services", None)
                if limiter is not None and limiter.rate_limiter is not None:
                    limiter.rate_limiter.leave(org_id)

    return middleware


def rate_limit_edge(app: ASGIApp) -> ASGIApp:
    """Refuses, in the routed request's middleware (before dependency injection, the body or Redis),
    a ``/v1/`` request whose API key was resolved in the last seconds (:class:`service.auth.KeyCache`)
    and whose org is known to be unable to pay the route's price (:meth:`RateLimiter.refusal_if_short`)
    or holds all its in-flight slots, and one whose key is to be looked up from an address out of
    unknown-key lookups (:class:`service.auth.failures.FailedAuthLimiter`). Everything else goes on to
    :func:`service.http.deps.before_request`."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):  # type: ignore[comparison-overlap]
            refusal = _edge_refusal(scope)
            if refusal is not None:
                await send_error(send, scope["headers"], refusal)
                return
        await app(scope, receive, send)

    return middleware


def _edge_refusal(scope: Scope) -> TooManyRequests | None:
    services = getattr(getattr(scope.get("app"), "state", None), "services", None)
    if services is None:
        return None
    token, body_bytes = b"", 0
    for name, value in scope["headers"]:
        if name == b"authorization":
            token = value
        elif name == b"content-length" and value.isdigit():
            body_bytes = int(value)
    scheme, _, key = token.partition(b" ")
    cache = services.extras.get("key_cache")
    if scheme.lower() != b"bearer" or not key.strip() or not isinstance(cache, KeyCache):
        return None
    key_hash = hash_key(key.strip().decode("latin-1"))
    org_id = cache.get(key_hash)
    if org_id is None:
        # A key to look up: not from an address that has sent too many unknown ones (unless it was found
        # recently: another client of a shared address may be the one sending unknown keys).
        failures = services.extras.get("auth_failures")
        if not isinstance(failures, FailedAuthLimiter) or failures.known(key_hash):
            return None
        client = scope.get("client")
        return failures.refusal(client[0] if client else "")
    limiter = getattr(services, "rate_limiter", None)
    if not isinstance(limiter, RateLimiter) or not (limiter.enabled or limiter.settings.max_in_flight > 0):
        return None
    if body_bytes > services.settings.limits.max_request_bytes:
        return None  # a 413, answered once authenticated, at no price (service.http.deps.check_body_size)
    method = str(scope.get("method", "GET"))
    return limiter.in_flight_refusal(org_id) or limiter.refusal_if_short(
        org_id, limiter.cost(method, scope["path"], body_bytes))

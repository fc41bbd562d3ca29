"""The bearer dependency: ``Authorization: Bearer <key>`` -> the caller's org id.

Keys are hashed and looked up in the in-process cache of resolved keys first
(:class:`service.auth.KeyCache`), then in Postgres.
"""

from __future__ import annotations

import time
from uuid import UUID

from litestar import Request

from service.auth.failures import FailedAuthLimiter
from service.auth.keys import KeyCache, hash_key
from service.errors import DeadlineExceeded, InvalidToken, ServiceUnavailable, Unauthorized
from service.runtime import Services


def _caller_budget_s(request: Request) -> float | None:  # type: ignore[type-arg]
    """Seconds left of the caller's own deadline (``X-Timeout-Ms`` relative, ``X-Deadline-Ms`` absolute
    Unix ms; the sooner wins), if it sent one. A malformed value is ignored here: the handlers that
    read these headers answer 400 for it."""
    left: list[float] = []
    for name, absolute in (("x-timeout-ms", False), ("x-deadline-ms", True)):
        raw = request.headers.get(name)
        try:
            value = float(raw) if raw is not None else None
        except ValueError:
            continue
        if value is not None and value == value and abs(value) != float("inf"):
            left.append((value / 1000 - time.time()) if absolute else value / 1000)
    return min(left) if left else None


async def _lookup(services: Services, key_hash: bytes, request: Request) -> UUID | None:  # type: ignore[type-arg]
    """The key's org from Postgres, within ``acquire_timeout_ms`` or the caller's deadline if sooner."""
    bound_s = services.db.acquire_timeout_ms / 1000
    caller_s = _caller_budget_s(request)
    if caller_s is None or caller_s >= bound_s or caller_s <= 0:
        # A deadline already passed is the handler's to answer (assembly's 504 L3, logged as such).
        return await services.db.resolve_api_key(key_hash, bound_s)
    try:
        return await services.db.resolve_api_key(key_hash, caller_s)
    except ServiceUnavailable as exc:
        if exc.details.get("timed_out") is True:
            raise DeadlineExceeded("the caller's deadline passed while the API key was checked",
                                   code="deadline_exceeded", details={"level": "L3"}) from exc
        raise


async def authenticate(request: Request, services: Services) -> UUID:  # type: ignore[type-arg]
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("missing bearer API key: send 'Authorization: Bearer <key>'")
    key_hash = hash_key(token.strip())
    cache = services.extras.get("key_cache")
    assert isinstance(cache, KeyCache)
    org_id = cache.get(key_hash)
    if org_id is None:
        extra = services.extras.get("auth_failures")
        failures = extra if isinstance(extra, FailedAuthLimiter) else None
        # A key found recently takes no token: another client of a shared address may be the one failing.
        limited = failures is not None and not failures.known(key_hash)
        address = request.client.host if request.client is not None else ""
        if failures is not None and limited:
            refusal = failures.take(address)  # before the lookup: concurrent unknown keys are bounded too
            if refusal is not None:
                raise refusal
        org_id = await _lookup(services, key_hash, request)
        if org_id is None:
            if failures is not None:
                failures.forget(key_hash)
            raise InvalidToken("invalid or revoked API key")
        if failures is not None:
            if limited:
                failures.give_back(address)
            failures.vouch(key_hash)
        cache.put(key_hash, org_id)
    return org_id

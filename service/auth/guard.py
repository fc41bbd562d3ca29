"""Bearer-key authentication: ``Authorization: Bearer <key>`` -> the caller's org id."""

from __future__ import annotations

import time
from uuid import UUID

from litestar import Request

from service.auth.keys import hash_key
from service.errors import InvalidToken, Unauthorized
from service.runtime import Services


class KeyCache:
    """Resolved keys, cached in-process for a few seconds so auth costs no round trip per request."""

    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[UUID, float]] = {}

    def get(self, key_hash: bytes) -> UUID | None:
        hit = self._entries.get(key_hash)
        if hit is None or hit[1] < time.monotonic():
            return None
        return hit[0]

    def put(self, key_hash: bytes, org_id: UUID) -> None:
        if self.ttl_s <= 0:
            return
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key_hash] = (org_id, time.monotonic() + self.ttl_s)


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
        org_id = await services.db.resolve_api_key(key_hash)
        if org_id is None:
            raise InvalidToken("invalid or revoked API key")
        cache.put(key_hash, org_id)
    return org_id

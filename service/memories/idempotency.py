"""``Idempotency-Key`` on the POST writes (memories, conversation appends).

A key is the org's for 24 hours and bound to its request: the endpoint and the body as JSON, however
it is spaced or its keys are ordered (a client that serialises its body again on a retry is replayed,
not refused). A retry with the same key and request gets the first answer and writes nothing; the key
with another request is a 409 ``idempotency_key_reused``; while the first is still running, a 409
``idempotency_in_progress``. The claim is a row written in the write's own transaction, so the key
and what it wrote commit or roll back together.
"""

from __future__ import annotations

import hashlib
from typing import Any, TypeVar

import msgspec

from service.db import TenantTx
from service.errors import BadRequest, Conflict
from service.runtime import Services

KEY_MAX = 200
T = TypeVar("T")


def check_key(key: str | None) -> None:
    if key is not None and not 0 < len(key) <= KEY_MAX:
        raise BadRequest(f"Idempotency-Key must be 1-{KEY_MAX} characters", code="validation_error")


def request_hash(body: Any, endpoint: str = "") -> bytes:
    """What a key is bound to: ``endpoint`` (empty for ``POST /v1/memories``) and ``body`` (JSON bytes,
    or the decoded request) as canonical JSON."""
    decoded = msgspec.json.decode(body) if isinstance(body, bytes) else msgspec.to_builtins(body)
    return hashlib.sha256(endpoint.encode() + msgspec.json.encode(decoded, order="sorted")).digest()


async def earlier(services: Services, org_id: Any, key: str, bound_to: bytes, answer: type[T]) -> T | None:
    """The first answer to a retry, read before any work (embedding); None when the key is new."""
    async with services.db.tenant(org_id, readonly=True) as tx:
        stored = await tx.fetchrow("idempotency.get", org_id, key)
    return None if stored is None else _replay(stored, bound_to, answer)


async def claim(tx: TenantTx, key: str, bound_to: bytes, answer: type[T]) -> T | None:
    """Claim the key in the write's transaction; the first answer instead when a concurrent request
    with the key committed first (the claim waited for it)."""
    await tx.execute("idempotency.forget_stale", tx.org_id, key)
    if await tx.fetchval("idempotency.claim", tx.org_id, key, bound_to) is not None:
        return None
    stored = await tx.fetchrow("idempotency.get", tx.org_id, key)
    if stored is None:
        raise Conflict("a request with this Idempotency-Key is still in progress; retry",
                       code="idempotency_in_progress")
    return _replay(stored, bound_to, answer)


async def remember(tx: TenantTx, key: str, result: Any) -> None:
    """Keep the answer of the request that claimed ``key`` (in its transaction)."""
    await tx.execute("idempotency.store", tx.org_id, key, msgspec.to_builtins(result))


def _replay(stored: Any, bound_to: bytes, answer: type[T]) -> T:
    if bytes(stored["request_hash"]) != bound_to:
        raise Conflict("this Idempotency-Key was used with a different request", code="idempotency_key_reused")
    if stored["response"] is None:
        raise Conflict("a request with this Idempotency-Key is still in progress; retry",
                       code="idempotency_in_progress")
    return msgspec.convert(stored["response"], answer)

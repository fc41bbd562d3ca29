"""API keys: random, shown once, stored only as a SHA-256 hash, and resolved keys cached in process.

Keys carry 256 bits of entropy, so a fast hash is enough: there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from uuid import UUID

KEY_PREFIX = "pgc_"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


DISPLAY_CHARS = 6
"""Characters after ``pgc_`` stored in clear (``keys list`` shows them): 36 random bits, so two keys
can share them, rarely."""


def display_prefix(key: str) -> str:
    """What is stored in clear to let people recognise a key: its first characters only."""
    return key[: len(KEY_PREFIX) + DISPLAY_CHARS]


def as_display_prefix(text: str) -> str | None:
    """``text`` as a display prefix (``keys list`` shows it with an ellipsis: taken with or without
    one), or None when it is not one."""
    prefix = text.removesuffix("…").removesuffix("...")
    if prefix.startswith(KEY_PREFIX) and len(prefix) == len(KEY_PREFIX) + DISPLAY_CHARS:
        return prefix
    return None


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

"""API keys: random, shown once, stored only as a SHA-256 hash.

Keys carry 256 bits of entropy, so a fast hash is enough: there is nothing to brute-force.
"""

from __future__ import annotations

import hashlib
import secrets

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

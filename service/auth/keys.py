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


def display_prefix(key: str) -> str:
    """What is stored in clear to let people recognise a key: its first characters only."""
    return key[: len(KEY_PREFIX) + 6]

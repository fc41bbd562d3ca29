"""API keys -> org: generation and hashing, the request dependency, and owner-side management."""

from service.auth.guard import KeyCache, authenticate

__all__ = ["KeyCache", "authenticate"]

"""API keys -> org: generation, hashing and the in-process cache of resolved keys, and owner-side
management (the bearer dependency that uses them is :mod:`service.http.auth`)."""

from service.auth.keys import KeyCache

__all__ = ["KeyCache"]

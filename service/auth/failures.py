"""Failed authentications, limited per source address before the key lookup costs Postgres a round trip.

Each address has a token bucket in this process (``burst`` tokens, refilled at ``rate_per_s``). A key
that is not already resolved (:class:`service.auth.KeyCache`) takes a token *before* it is looked up
and gives it back when the lookup finds it: unknown keys from one address reach Postgres at most
``burst`` times, then ``rate_per_s`` times a second, however many are sent and however concurrently.
An address with no token left is answered 429 ``auth_rate_limited`` (``Retry-After``) at the edge;
its cached keys keep working, and so does a key that was found within the last ``KNOWN_GOOD_S``
(looked up again when its cache entry ends, but without a token: clients behind one proxy or NAT
share an address, and one of them still sending a revoked key must not lock the others out). A key
found no more is forgotten at once. IPv6 addresses count by their /64 (one host holds a whole subnet).

The addresses remembered are bounded (least recently seen forgotten first, and a forgotten address is
simply full again): a stranger spreading over many addresses costs at most ``max_addresses`` small
entries. The limit is per process: N workers and M instances let N x M times through.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict

from prometheus_client import Counter

from service.errors import TooManyRequests

AUTH_RATE_LIMITED = Counter("pgcontext_auth_rate_limited_total",
                            "Requests refused with 429 because their address sent too many unknown API keys")


KNOWN_GOOD_S = 900.0
"""How long a key that was found is looked up again without taking a token of its address."""


def address_key(address: str) -> str:
    """The unit an address is counted in: itself, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is None:
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip.ipv4_mapped or ip) if isinstance(ip, ipaddress.IPv6Address) else str(ip)


class FailedAuthLimiter:
    def __init__(self, burst: int, rate_per_s: float, max_addresses: int = 10_000) -> None:
        self.burst = burst
        self.rate_per_s = rate_per_s
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        """Per address: (tokens, monotonic time they were counted)."""
        self._good: OrderedDict[bytes, float] = OrderedDict()
        """Hashes of keys found recently: monotonic time until which they need no token."""

    @property
    def enabled(self) -> bool:
        return self.burst > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, key: str, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.rate_per_s)

    def refusal(self, address: str) -> TooManyRequests | None:
        """The 429 for an address with no lookup left (nothing taken); None when it may look one up."""
        if not self.enabled:
            return None
        tokens = self._tokens(address_key(address), time.monotonic())
        return None if tokens >= 1 else self._refusal(tokens)

    def take(self, address: str) -> TooManyRequests | None:
        """Take one lookup from the address's budget, or return the 429 when none is left."""
        if not self.enabled:
            return None
        key, now = address_key(address), time.monotonic()
        tokens = self._tokens(key, now)
        if tokens < 1:
            return self._refusal(tokens)
        self._buckets[key] = (tokens - 1, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
        return None

    def known(self, key_hash: bytes) -> bool:
        """Whether the key was found within the last ``KNOWN_GOOD_S`` (its lookup takes no token)."""
        until = self._good.get(key_hash)
        return until is not None and until > time.monotonic()

    def vouch(self, key_hash: bytes) -> None:
        """The key was found: for ``KNOWN_GOOD_S`` its lookups take no token (at most ``max_addresses``
        keys remembered, the least recently found forgotten first)."""
        self._good[key_hash] = time.monotonic() + KNOWN_GOOD_S
        self._good.move_to_end(key_hash)
        while len(self._good) > self.max_addresses:
            self._good.popitem(last=False)

    def forget(self, key_hash: bytes) -> None:
        """The key was not found (revoked): its lookups take tokens again."""
        self._good.pop(key_hash, None)

    def give_back(self, address: str) -> None:
        """The key was found: its lookup was no failure."""
        if not self.enabled:
            return
        key, now = address_key(address), time.monotonic()
        if key in self._buckets:
            self._buckets[key] = (min(float(self.burst), self._tokens(key, now) + 1), now)

    def _refusal(self, tokens: float) -> TooManyRequests:
        AUTH_RATE_LIMITED.inc()
        wait_s = max(1, math.ceil((1 - tokens) / self.rate_per_s)) if self.rate_per_s > 0 else 3600
        return TooManyRequests(
            f"too many unknown API keys from this address; retry in {wait_s} s", code="auth_rate_limited",
            retry_after_s=wait_s, details={"retry_after_s": wait_s})

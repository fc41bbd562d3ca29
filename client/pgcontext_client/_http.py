"""What one API call is (``Call``), how it becomes an httpx request, and when to try it again (``RetryPolicy``).

Shared by ``Client`` and ``AsyncClient``: they differ only in how they send and sleep.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx
import msgspec

from pgcontext_client import errors

T = TypeVar("T")

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (``returns=None``: the answer has no body worth reading)."""

    method: str
    path: str
    returns: type[T] | None
    body: msgspec.Struct | None = None
    params: list[tuple[str, str]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None
    repeatable: bool = False
    """Safe to send again after a broken connection (reads, PUT/DELETE, writes the service deduplicates)."""
    accept: frozenset[int] = frozenset()
    """Non-2xx statuses whose body is still the answer (``/readyz``'s 503), never retried."""

    def prepared_headers(self) -> dict[str, str]:
        """Headers for every attempt: a write gets one ``Idempotency-Key``, the same on each retry."""
        headers = dict(self.headers)
        if self.method in WRITE_METHODS:
            headers["Idempotency-Key"] = self.idempotency_key or str(uuid.uuid4())
        if self.body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def request(self, http: httpx.Client | httpx.AsyncClient, headers: dict[str, str], content: bytes | None
                ) -> httpx.Request:
        return http.build_request(self.method, self.path, params=tuple(self.params), headers=headers,
                                  content=content)

    def content(self) -> bytes | None:
        return None if self.body is None else msgspec.json.encode(self.body)

    def decode(self, response: httpx.Response) -> T:
        if response.is_success or response.status_code in self.accept:
            if self.returns is None:
                return None  # type: ignore[return-value]
            return msgspec.json.decode(response.content, type=self.returns)
        raise errors.from_response(response)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of 429 and 503 answers (and of broken connections for repeatable calls).

    ``attempts`` counts every try (1 = never retry). The wait is the answer's ``Retry-After`` when it
    has one (an answer asking for more than ``max_retry_after_s`` is raised at once), otherwise
    exponential backoff from ``backoff_s`` up to ``max_backoff_s``, with jitter.
    """

    attempts: int = 4
    backoff_s: float = 0.25
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    statuses: frozenset[int] = frozenset({429, 503})

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")

    def backoff(self, attempt: int) -> float:
        """The wait after failed try number ``attempt`` (1-based), without a ``Retry-After``."""
        ceiling = min(self.max_backoff_s, self.backoff_s * 2.0 ** (attempt - 1))
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def after_response(self, call: Call[Any], response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before trying ``call`` again, or None to stop here."""
        if attempt >= self.attempts or response.status_code not in self.statuses:
            return None
        if response.status_code in call.accept:
            return None
        wait = errors.retry_after(response)
        if wait is None:
            return self.backoff(attempt)
        return wait if wait <= self.max_retry_after_s else None

    def after_transport_error(self, call: Call[Any], attempt: int) -> float | None:
        if attempt >= self.attempts or not call.repeatable:
            return None
        return self.backoff(attempt)


def transport_error(exc: httpx.TransportError, call: Call[Any], base_url: httpx.URL) -> errors.TransportError:
    url = str(base_url).rstrip("/") + call.path
    if isinstance(exc, httpx.ConnectError):
        what = f"nothing answered at {base_url} (is the service running there? set PGCONTEXT_URL or PGCONTEXT_PORT)"
    else:
        what = f"the connection to {base_url} failed"
    return errors.TransportError(f"{what}: {call.method} {url}: {type(exc).__name__}: {exc}", url=url)


def auth_headers(api_key: str | None, user_agent: str) -> dict[str, str]:
    headers = {"User-Agent": user_agent, "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers

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
DEADLINE_GRACE_S = 1.0
"""How long past the caller's deadline a try still waits for the service's own answer (its 504)."""


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
    timeout_ms: int | None = None
    """The caller's deadline for the whole call, retries included: sent as ``X-Timeout-Ms`` (what is left
    of it on a retry); no retry starts past it (see ``Tries``)."""
    min_read_timeout_s: float | None = None
    """Without a deadline, wait at least this long for the answer's next bytes, whatever the client's
    read timeout (an export's first line comes once the service has sorted what it sends)."""

    def prepared_headers(self) -> dict[str, str]:
        """Headers for every attempt: a write gets one ``Idempotency-Key``, the same on each retry."""
        headers = dict(self.headers)
        if self.method in WRITE_METHODS:
            headers["Idempotency-Key"] = self.idempotency_key or str(uuid.uuid4())
        if self.body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def request(self, http: httpx.Client | httpx.AsyncClient, headers: dict[str, str], content: bytes | None,
                timeout: httpx.Timeout | None = None) -> httpx.Request:
        return http.build_request(self.method, self.path, params=tuple(self.params), headers=headers,
                                  content=content, timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)

    def content(self) -> bytes | None:
        """The body as JSON; a string holding a lone surrogate (half of a UTF-16 pair, e.g. text cut in the
        middle of an emoji) is a ``ValidationError`` and nothing is sent, as the service refuses one."""
        try:
            return None if self.body is None else msgspec.json.encode(self.body)
        except UnicodeEncodeError as exc:
            bad = exc.object[exc.start] if isinstance(exc.object, str) else "?"
            raise errors.ValidationError(
                f"the request holds a lone surrogate (U+{ord(bad):04X}), which UTF-8 JSON cannot carry; "
                "nothing was sent", code="validation_error") from exc

    def decode(self, response: httpx.Response) -> T:
        if response.is_success or response.status_code in self.accept:
            if self.returns is None:
                return None  # type: ignore[return-value]
            try:
                return msgspec.json.decode(response.content, type=self.returns)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise errors.invalid_response(response, self.returns.__name__, exc) from exc
        raise errors.from_response(response)


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of 429 and 503 answers (and of broken connections for repeatable calls), and of a write's
    409 ``idempotency_in_progress`` (its key's first request is still running: the retry gets its answer).

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
        """Seconds to wait before trying ``call`` again, or None to stop here. A call that is not
        repeatable is tried again only after a refusal that did nothing (a 429, a 503 ``overloaded``):
        another 503 (the database failed at commit) may come after its write was made."""
        if attempt >= self.attempts:
            return None
        if response.status_code == 409 and error_code(response) == "idempotency_in_progress":
            return self.backoff(attempt)  # the first request with this key is still running: its answer comes
        if response.status_code not in self.statuses:
            return None
        if response.status_code in call.accept:
            return None
        if not call.repeatable and not refused_before_work(response):
            return None
        wait = errors.retry_after(response)
        if wait is None:
            return self.backoff(attempt)
        return wait if wait <= self.max_retry_after_s else None

    def after_transport_error(self, call: Call[Any], attempt: int, exc: BaseException | None = None
                              ) -> float | None:
        """Seconds to wait before trying ``call`` again after no answer, or None to stop here. A call that
        is not repeatable is tried again only when its connection was never made (nothing was sent)."""
        if attempt >= self.attempts or isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
            return None  # the request cannot be sent as it is: it would fail again
        if not call.repeatable and not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return None
        return self.backoff(attempt)


REFUSALS = frozenset({(429, None), (503, "overloaded")})
"""Answers given before any work, whatever the request (``None``: any code)."""


def refused_before_work(response: httpx.Response) -> bool:
    """The service refused the request before doing any of it: rate limited, or shedding load."""
    return (response.status_code, None) in REFUSALS or (response.status_code, error_code(response)) in REFUSALS


def error_code(response: httpx.Response) -> str | None:
    """The ``code`` of an error answer (None: not the service's error shape, or a stream not read)."""
    try:
        return msgspec.json.decode(response.content, type=errors.Envelope).error.code
    except (httpx.ResponseNotRead, msgspec.DecodeError, msgspec.ValidationError):
        return None


def transport_error(exc: httpx.TransportError, call: Call[Any], base_url: httpx.URL) -> errors.TransportError:
    url = str(base_url).rstrip("/") + call.path
    if call.timeout_ms is not None and isinstance(exc, httpx.TimeoutException):
        what = (f"no answer from {base_url} within your deadline (timeout_ms={call.timeout_ms}) "
                f"and {DEADLINE_GRACE_S:g} s more")
    elif isinstance(exc, httpx.ConnectError):
        what = f"nothing answered at {base_url} (is the service running there? set PGCONTEXT_URL or PGCONTEXT_PORT)"
    elif isinstance(exc, httpx.LocalProtocolError | httpx.UnsupportedProtocol):
        what = f"the request to {base_url} could not be sent"
    else:
        what = f"the connection to {base_url} failed"
    return errors.TransportError(f"{what}: {call.method} {url}: {type(exc).__name__}: {redacted(str(exc))}",
                                 url=url)


def redacted(text: str) -> str:
    """``text`` without the keys of ``Bearer`` headers in it (httpx names an illegal header's value)."""
    out, start = [], 0
    while (at := text.find("Bearer ", start)) != -1:
        end = at + len("Bearer ")
        while end < len(text) and text[end] not in " '\"\\":
            end += 1
        out.append(text[start:at] + "Bearer [redacted]")
        start = end
    return "".join(out) + text[start:]


def auth_headers(api_key: str | None, user_agent: str) -> dict[str, str]:
    """The headers of every request. The key is taken without surrounding whitespace (a key read from a
    file ends with a newline); one holding whitespace or control characters inside is refused here, before
    any request could carry it into an error message."""
    headers = {"User-Agent": user_agent, "Accept": "application/json"}
    key = (api_key or "").strip()
    if key:
        if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
            raise ValueError("the API key holds whitespace, control or non-ASCII characters inside "
                             "(check PGCONTEXT_API_KEY or the api_key given)")
        headers["Authorization"] = f"Bearer {key}"
    return headers

"""One call's tries (``Tries``): the headers and body every try sends, and the caller's deadline.

With a deadline (``Call.timeout_ms``) each try sends what is left of it as ``X-Timeout-Ms``, waits for
an answer at most that long plus ``DEADLINE_GRACE_S`` (the service answers 504 at the deadline), and no
retry starts when its wait would end past the deadline: the caller's deadline holds for the whole call.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from pgcontext_client._http import DEADLINE_GRACE_S, Call


class Tries:
    def __init__(self, call: Call[Any]) -> None:
        self.call = call
        self.headers = call.prepared_headers()
        self.content = call.content()
        self.number = 0
        """The try under way (1-based)."""
        self.deadline = None if call.timeout_ms is None else time.monotonic() + call.timeout_ms / 1000

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        """The next try's request."""
        self.number += 1
        if self.deadline is None:
            floor, t = self.call.min_read_timeout_s, http.timeout
            if floor is None or t.read is None or t.read >= floor:
                return self.call.request(http, self.headers, self.content)
            timeout = httpx.Timeout(connect=t.connect, read=floor, write=t.write, pool=t.pool)
            return self.call.request(http, self.headers, self.content, timeout)
        left = max(0.0, self.deadline - time.monotonic())
        self.headers["X-Timeout-Ms"] = str(int(left * 1000 + 0.999))
        limit = left + DEADLINE_GRACE_S
        t = http.timeout
        timeout = httpx.Timeout(connect=_least(t.connect, limit), read=_least(t.read, limit),
                                write=_least(t.write, limit), pool=_least(t.pool, limit))
        return self.call.request(http, self.headers, self.content, timeout)

    def fits(self, wait: float | None) -> float | None:
        """``wait`` (the retry policy's), or None when no retry should start: none planned, or it would
        start past the deadline."""
        if wait is None or self.deadline is None:
            return wait
        return wait if time.monotonic() + wait < self.deadline else None


def _least(timeout: float | None, limit: float) -> float:
    return limit if timeout is None else min(timeout, limit)

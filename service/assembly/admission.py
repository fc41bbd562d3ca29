"""Admission: at most ``limit`` assemblies at once per process; the rest wait in line.

When the cores are the limit (the service and a co-located Postgres share them), interleaving more
assemblies does not finish more of them per second: it stretches every one of them, so their
branches miss the wall together (L1/L2) and the server's own ``total_ms`` runs past the deadline
with event-loop lag. Waiting in line first keeps each admitted assembly inside its wall; the
caller sees the same latency, now with full context. The wait is reported
(``metrics.queued_ms``), counts against the caller's own deadline (``X-Deadline-Ms`` /
``X-Timeout-Ms``: passing it in line is an L3, a 504), and the line is bounded: beyond
``max_queued`` a request is refused at once (503 ``overloaded`` with ``Retry-After``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from service.errors import DeadlineExceeded, ServiceUnavailable


class Admission:
    def __init__(self, limit: int, max_queued: int) -> None:
        self.limit = limit
        self.max_queued = max_queued
        self._slots = asyncio.Semaphore(limit) if limit > 0 else None
        self.waiting = 0
        """Assemblies in line right now."""

    @contextlib.asynccontextmanager
    async def admit(self, caller_left_ms: float | None = None) -> AsyncIterator[float]:
        """Hold a slot for the body; yields the ms spent waiting for it. ``caller_left_ms``: the
        caller's remaining time (None: no caller deadline)."""
        slots = self._slots
        if slots is None:
            yield 0.0
            return
        queued_ms = 0.0
        if slots.locked():
            started = time.perf_counter()
            if self.waiting >= self.max_queued:
                raise ServiceUnavailable(
                    f"{self.limit} assemblies are running and {self.waiting} waiting: try again shortly",
                    code="overloaded", details={"in_flight": self.limit, "queued": self.waiting}, retry_after_s=1)
            self.waiting += 1
            try:
                timeout = None if caller_left_ms is None else max(0.0, caller_left_ms) / 1000
                # asyncio.timeout, not wait_for: on 3.11 wait_for runs acquire() as a task of its own,
                # which costs two event-loop turns (each behind every other ready callback) per admission.
                async with asyncio.timeout(timeout):
                    await slots.acquire()
            except TimeoutError as exc:
                raise DeadlineExceeded("the caller's deadline passed while the assembly waited to be admitted",
                                       code="deadline_exceeded", details={"level": "L3"}) from exc
            finally:
                self.waiting -= 1
            queued_ms = round((time.perf_counter() - started) * 1000, 3)
        else:
            await slots.acquire()  # a free slot: does not wait
        try:
            yield queued_ms
        finally:
            slots.release()

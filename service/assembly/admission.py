"""Admission: at most ``limit`` assemblies at once per process; the rest wait in line.

When the cores are the limit (the service and a co-located Postgres share them), interleaving more
assemblies does not finish more of them per second: it stretches every one of them, so their
branches miss the wall together (L1/L2) and the server's own ``total_ms`` runs past the deadline
with event-loop lag. Waiting in line first keeps each admitted assembly inside its wall; the
caller sees the same latency, now with full context. The wait is reported
(``metrics.queued_ms``), counts against the caller's own deadline (``X-Deadline-Ms`` /
``X-Timeout-Ms``: passing it in line is an L3, a 504), and the line is bounded: beyond
``max_queued`` a request is refused at once (503 ``overloaded`` with ``Retry-After``).

The line is fair between orgs: each org waits in its own line, first come first served within it,
and a freed slot goes to the next org in turn (round robin), so an org that queued a hundred
assemblies delays another org's next one by at most one assembly per busy slot, not by its whole
backlog; and no org may hold more than half of the line (``max_queued // 2``), so one org cannot
fill it and have every other org's assemblies refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Hashable

from service.errors import DeadlineExceeded, ServiceUnavailable


class Admission:
    def __init__(self, limit: int, max_queued: int) -> None:
        self.limit = limit
        self.max_queued = max_queued
        self.max_queued_per_org = max(1, max_queued // 2)
        self.in_flight = 0
        self.waiting = 0
        """Assemblies in line right now (all orgs)."""
        self._lines: OrderedDict[Hashable, deque[asyncio.Future[None]]] = OrderedDict()
        """Per org, its waiters in arrival order; the dict's order is the round robin's."""

    @contextlib.asynccontextmanager
    async def admit(self, caller_left_ms: float | None = None, org: Hashable = None) -> AsyncIterator[float]:
        """Hold a slot for the body; yields the ms spent waiting for it. ``caller_left_ms``: the
        caller's remaining time (None: no caller deadline); ``org``: whose line to wait in."""
        if self.limit <= 0:
            yield 0.0
            return
        queued_ms = 0.0
        if self.in_flight < self.limit and not self.waiting:
            self.in_flight += 1  # a free slot: does not wait
        else:
            started = time.perf_counter()
            await self._wait(caller_left_ms, org)
            queued_ms = round((time.perf_counter() - started) * 1000, 3)
        try:
            yield queued_ms
        finally:
            self._release()

    async def _wait(self, caller_left_ms: float | None, org: Hashable) -> None:
        line = self._lines.get(org)
        if self.waiting >= self.max_queued or (line is not None and len(line) >= self.max_queued_per_org):
            raise ServiceUnavailable(
                f"{self.limit} assemblies are running and {self.waiting} waiting: try again shortly",
                code="overloaded", details={"in_flight": self.limit, "queued": self.waiting}, retry_after_s=1)
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if line is None:
            line = self._lines[org] = deque()
        line.append(turn)
        self.waiting += 1
        try:
            timeout = None if caller_left_ms is None else max(0.0, caller_left_ms) / 1000
            async with asyncio.timeout(timeout):
                await turn
        except BaseException as exc:  # the caller's deadline, or its client went away
            if turn.done() and not turn.cancelled():
                self._release()  # the slot was handed over just now: pass it on
            else:
                turn.cancel()
                self._leave(org, turn)
            if isinstance(exc, TimeoutError):
                raise DeadlineExceeded("the caller's deadline passed while the assembly waited to be admitted",
                                       code="deadline_exceeded", details={"level": "L3"}) from exc
            raise

    def _leave(self, org: Hashable, turn: asyncio.Future[None]) -> None:
        line = self._lines.get(org)
        if line is not None and turn in line:
            line.remove(turn)
            self.waiting -= 1
            if not line:
                del self._lines[org]

    def _release(self) -> None:
        """Hand the slot to the first waiter of the next org in turn, or free it."""
        while self._lines:
            org, line = next(iter(self._lines.items()))
            turn = line.popleft()
            self.waiting -= 1
            if line:
                self._lines.move_to_end(org)  # its next waiter goes after the other orgs' first
            else:
                del self._lines[org]
            if not turn.done():
                turn.set_result(None)  # in_flight is unchanged: the slot changes hands
                return
        self.in_flight -= 1

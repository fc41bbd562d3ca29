"""Admission: at most ``limit`` assemblies at once per process; the rest wait briefly, or are refused.

When the cores are the limit (the service and a co-located Postgres share them), interleaving more
assemblies does not finish more of them per second: it stretches every one of them, so their
branches miss the wall together (L1/L2). Waiting in line first keeps each admitted assembly inside
its wall; the wait is reported (``metrics.queued_ms``).

A line is only useful while it is short. Under sustained overload a first-come-first-served line
grows to its bound, every request in it waits seconds (the callers have long given up) and the
service spends its cores on answers nobody reads. So the line sheds work before it costs anything
(CoDel with adaptive LIFO, as in Facebook's "Fail at Scale", plus deadline awareness):

* **Service time** is measured: an EWMA of how long admitted assemblies hold a slot.
* **Deadline.** A request whose caller's deadline (``X-Deadline-Ms`` / ``X-Timeout-Ms``) leaves
  less than one service time is refused on arrival; one that waits is dropped from the line as soon
  as the deadline would leave less than a service time once admitted.
* **CoDel.** While the line has not been empty for ``interval_ms`` (a standing queue, not a burst),
  it holds what the slots serve within ``target_ms``, otherwise within ``interval_ms`` (at least
  one round of the slots), and a request waits at most twice that (or two service times). A burst
  is absorbed, a standing queue is drained to what the slots serve within ``target_ms``.
* **Adaptive LIFO.** While the line is standing, longer than the slots, and either full (arrivals
  are being refused) or it has not served anyone within ``target_ms`` of their arrival for
  ``interval_ms`` (CoDel's own signal: the wait stayed above the target for an interval), a freed
  slot goes to the newest waiter (the one most likely to still be wanted); otherwise to the
  oldest. A line that the slots clear within the target stays first-come-first-served, so no
  waiter there is passed over by newer arrivals until it times out: a closed loop of twice
  ``limit`` clients (0.2-0.4% of assemblies refused at concurrency 8 with 4 slots when such lines
  were LIFO too), or of four times ``limit`` (16 clients on 4 slots at 100K: 3.7-4.9% refused
  when every standing line longer than the slots was LIFO, 1.5-3.1% when one whose oldest waiter
  was past the target was, none since; see docs/operations.md, "Decisions").
* Beyond that length (and never more than ``max_queued``) a request is refused, by
  :mod:`service.assembly.shedding` at the edge, before its body is read. A request let in at the
  edge holds a place (:meth:`Admission.arrive`) until it reaches the line: a crowd arriving together
  is not all let in to be parsed, authenticated and then refused for want of room.
* **Fair between orgs.** A freed slot goes to the orgs in line in turn (round robin; within the
  org whose turn it is, newest or oldest as above), so an org that queued a hundred assemblies
  delays another org's next one by at most one assembly per busy slot, not by its whole backlog;
  and no org may hold more than half of ``max_queued``, so one org cannot fill the line.

Every refusal is a 503 ``overloaded`` with ``Retry-After`` (seconds until the line should have
drained, at least 1), answered no sooner than ``hold_ms`` after the request arrived (or just
before the caller's deadline): a held refusal costs a timer, while clients that ignore
``Retry-After`` and retry at once would otherwise spend the cores on refusals (a measured collapse:
41,846 refusals, and the admitted assemblies' branches starved into L2). Passing the
caller's own deadline is still an L3 504. Refused work never touched Postgres, Redis or the embedder.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Hashable, Iterator
from dataclasses import dataclass

import prometheus_client

from service.errors import DeadlineExceeded, ServiceUnavailable

SHED = prometheus_client.Counter(
    "pgcontext_assembly_shed_total", "Assemblies refused by admission (503 overloaded) by reason", ["reason"])
QUEUE_WAIT = prometheus_client.Histogram(
    "pgcontext_assembly_queue_seconds", "Time admitted assemblies waited for a slot",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0))

ROOM_REFUSALS = frozenset({"line_full", "queue_full"})
"""Refusals of arrivals for want of room in line (at the edge, or on reaching the line): overload."""

SERVICE_EWMA_WEIGHT = 0.05
"""Weight of one finished assembly in the service-time average (~20 assemblies of memory)."""


@dataclass(slots=True)
class Ticket:
    """A place held between the edge and the line (see :meth:`Admission.arrive`)."""

    admission: Admission | None

    def leave(self) -> None:
        """Give the place back (once: at the line, or when the request ends before it)."""
        if self.admission is not None:
            self.admission.arriving -= 1
            self.admission = None


_TICKET: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar("admission_ticket", default=None)


@dataclass(slots=True)
class _Waiter:
    future: asyncio.Future[None]
    arrived: float
    org: Hashable = None


class Admission:
    def __init__(self, limit: int, max_queued: int, *, target_ms: float = 100.0, interval_ms: float = 500.0,
                 initial_service_ms: float = 10.0, hold_ms: float = 0.0) -> None:
        self.limit = limit
        self.max_queued = max_queued
        self.hold_ms = hold_ms
        self.target_ms = target_ms
        self.interval_ms = interval_ms
        self.service_ms = initial_service_ms
        """Measured: EWMA of the time an admitted assembly holds its slot. It starts optimistic (a
        long line, no early refusals) and the first assemblies replace it (a running mean until
        the EWMA's own weight takes over)."""
        self._measured = 0
        self.in_flight = 0
        self.arriving = 0
        """Requests let in at the edge that have not reached :meth:`admit` yet."""
        self._line: deque[_Waiter] = deque()
        self.max_queued_per_org = max(1, max_queued // 2)
        self._turns: OrderedDict[Hashable, int] = OrderedDict()
        """Per org, its waiters in line; the dict's order is the round robin's (next turn first)."""
        self._empty_since = time.monotonic()
        """When the line was last seen empty (CoDel: a line not empty for ``interval_ms`` is standing)."""
        self._served_in_target_at = self._empty_since
        """When a request was last admitted within ``target_ms`` of arriving (see :meth:`lifo`)."""
        self._turned_away_at = -math.inf
        """When an arrival was last refused for want of room in line (see :meth:`lifo`)."""

    @property
    def waiting(self) -> int:
        """Assemblies in line right now."""
        return len(self._line)

    def standing(self, now: float | None = None) -> bool:
        """The line has not been empty for ``interval_ms``: overload, not a burst."""
        if not self._line:
            return False
        return ((now or time.monotonic()) - self._empty_since) * 1000 >= self.interval_ms

    def line_cap(self, now: float | None = None) -> int:
        """The longest useful line: what the slots serve within ``target_ms`` while the line is
        standing (``interval_ms`` for a burst) at the measured service time. Whoever is let into
        the line is then almost always served (refusing after the body was read and parsed wastes
        that work); whoever is not is refused at the edge, cheaply."""
        wait_ms = self.target_ms if self.standing(now) else self.interval_ms
        # At least one round of the slots: when assemblies are slow (a busy machine), a line shorter
        # than the slots would refuse even a closed loop of 2 x limit clients.
        return min(self.max_queued, max(self.limit, math.ceil(self.limit * wait_ms / max(self.service_ms, 1.0))))

    def full(self) -> bool:
        """A new request would be refused for want of room in line, counting those let in at the
        edge on their way to it (checked at the edge)."""
        return (self.limit > 0 and self.in_flight + len(self._line) + self.arriving
                >= self.limit + self.line_cap())

    @contextlib.contextmanager
    def arrive(self) -> Iterator[Ticket]:
        """Hold a place for a request let in at the edge while its body is read, parsed and
        authenticated (in this context): :meth:`admit` takes it over, or leaving gives it back."""
        self.arriving += 1
        ticket = Ticket(self)
        token = _TICKET.set(ticket)
        try:
            yield ticket
        finally:
            _TICKET.reset(token)
            ticket.leave()

    def retry_after_s(self) -> int:
        """Seconds until the current line should have drained (at least 1)."""
        drain_ms = (len(self._line) + 1) * self.service_ms / max(self.limit, 1)
        return max(1, math.ceil(drain_ms / 1000))

    def refusal(self, reason: str, message: str) -> ServiceUnavailable:
        SHED.labels(reason).inc()
        if reason in ROOM_REFUSALS:
            self._turned_away_at = time.monotonic()
        return ServiceUnavailable(message, code="overloaded", retry_after_s=self.retry_after_s(),
                                  details={"in_flight": self.in_flight, "queued": len(self._line), "reason": reason})

    async def hold(self, arrived: float, caller_left_ms: float | None) -> None:
        """Wait until ``hold_ms`` after ``arrived`` (not past the caller's deadline) before refusing."""
        hold_ms = self.hold_ms if caller_left_ms is None else min(self.hold_ms, caller_left_ms - 1)
        pause = hold_ms / 1000 - (time.monotonic() - arrived)
        if pause > 0:
            await asyncio.sleep(pause)

    async def _refused(self, reason: str, message: str, arrived: float, caller_left_ms: float | None
                       ) -> ServiceUnavailable:
        refusal = self.refusal(reason, message)
        await self.hold(arrived, caller_left_ms)
        return refusal

    @contextlib.asynccontextmanager
    async def admit(self, caller_left_ms: float | None = None, org: Hashable = None) -> AsyncIterator[float]:
        """Hold a slot for the body; yields the ms spent waiting for it. ``caller_left_ms``: the
        caller's remaining time (None: no caller deadline); ``org``: whose turn it waits for."""
        ticket = _TICKET.get()
        if ticket is not None and ticket.admission is self:
            ticket.leave()  # at the line: its place is counted there now
        if self.limit <= 0:
            yield 0.0
            return
        queued_ms = 0.0
        if self.in_flight < self.limit and not self._line:
            self.in_flight += 1  # a free slot: does not wait
            started = self._served_in_target_at = time.monotonic()
        else:
            queued_ms = await self._wait(caller_left_ms, org)
            started = time.monotonic()
        try:
            yield queued_ms
        finally:
            held_ms = (time.monotonic() - started) * 1000
            self._measured += 1
            self.service_ms += max(SERVICE_EWMA_WEIGHT, 1 / self._measured) * (held_ms - self.service_ms)
            self._release()

    async def _wait(self, caller_left_ms: float | None, org: Hashable) -> float:
        now = time.monotonic()
        if len(self._line) >= self.line_cap(now):
            raise await self._refused("queue_full", f"{self.in_flight} assemblies are running and {len(self._line)} "
                                                    "waiting: try again shortly", now, caller_left_ms)
        if self._turns.get(org, 0) >= self.max_queued_per_org:
            raise await self._refused("org_queue_full", f"{self._turns[org]} of this org's assemblies are waiting "
                                                        "already: try again shortly", now, caller_left_ms)
        if caller_left_ms is not None and caller_left_ms < self.service_ms:
            raise await self._refused("deadline", f"the caller's deadline ({caller_left_ms:.0f} ms left) is shorter "
                                                  f"than an assembly takes under this load (~{self.service_ms:.0f} ms)",
                                      now, caller_left_ms)
        if not self._line:
            self._empty_since = now
        # How long this request may wait: twice what the line was sized for, or two service times
        # (so the few refused after waiting are the ones passed over by newer arrivals), and the
        # caller's deadline less one service time.
        limit_ms = 2 * max(self.target_ms if self.standing(now) else self.interval_ms, self.service_ms)
        if caller_left_ms is not None:
            limit_ms = min(limit_ms, caller_left_ms - self.service_ms)
        waiter = _Waiter(asyncio.get_running_loop().create_future(), now, org)
        self._line.append(waiter)
        self._turns[org] = self._turns.get(org, 0) + 1
        try:
            async with asyncio.timeout(limit_ms / 1000):
                await waiter.future
        except BaseException as exc:
            granted = waiter.future.done() and not waiter.future.cancelled()
            if not isinstance(exc, TimeoutError):
                if granted:  # cancelled (client gone, shutdown) just as a slot was handed over: pass it on
                    self._release()
                raise
            if not granted:
                self._leave(waiter)
                if caller_left_ms is not None and (time.monotonic() - now) * 1000 >= caller_left_ms:
                    raise DeadlineExceeded("the caller's deadline passed while the assembly waited to be admitted",
                                           code="deadline_exceeded", details={"level": "L3"}) from None
                raise await self._refused("queue_timeout", f"waited {limit_ms:.0f} ms for one of {self.limit} "
                                                           "assembly slots: try again shortly",
                                          now, caller_left_ms) from None
            # the slot arrived together with the timeout: take it
        finally:
            self._leave(waiter)
        waited = time.monotonic() - now
        QUEUE_WAIT.observe(waited)
        return round(waited * 1000, 3)

    def _leave(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of line (nothing if it was handed a slot already)."""
        try:
            self._line.remove(waiter)
        except ValueError:
            return
        left = self._turns[waiter.org] - 1
        if left:
            self._turns[waiter.org] = left
        else:
            del self._turns[waiter.org]
        if not self._line:
            self._empty_since = time.monotonic()

    def _release(self) -> None:
        """Hand the slot to a waiter (newest first while :meth:`lifo`), or free it."""
        if not self._hand_over():
            self.in_flight -= 1

    def lifo(self, now: float | None = None) -> bool:
        """Serve the newest first: the line is standing and longer than the slots, and either full
        (an arrival was refused for want of room within ``interval_ms``: overload) or not draining:
        its oldest waiter has waited past ``target_ms`` and nobody was admitted within ``target_ms``
        of arriving for ``interval_ms`` (CoDel's own test: the wait stayed above the target for an
        interval, rather than the odd slow round of a line that drains)."""
        if len(self._line) <= self.limit:
            return False
        now = now or time.monotonic()
        if not self.standing(now):
            return False
        return (now - self._turned_away_at) * 1000 < self.interval_ms or (
            (now - self._line[0].arrived) * 1000 > self.target_ms
            and (now - self._served_in_target_at) * 1000 >= self.interval_ms)

    def _hand_over(self) -> bool:
        """The org whose turn it is gets the slot: its newest waiter while :meth:`lifo`, else its
        oldest; that org's next waiter then goes after the other orgs'."""
        now = time.monotonic()
        lifo = self.lifo(now)
        while self._turns:
            org = next(iter(self._turns))
            waiter = next(w for w in (reversed(self._line) if lifo else self._line) if w.org == org)
            self._leave(waiter)
            if org in self._turns:
                self._turns.move_to_end(org)
            if not waiter.future.done():
                waiter.future.set_result(None)  # the slot passes on: in_flight is unchanged
                if (now - waiter.arrived) * 1000 <= self.target_ms:
                    self._served_in_target_at = now
                return True
        return False

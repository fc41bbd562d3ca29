"""The assembly's branches (directive, hot, cold): started together, each under its own timeout, settled together.

* A branch runs as a task of its own from :meth:`BranchTask.start`.
* :func:`settle` waits until every branch has answered or is *overdue* (past its own timeout). An
  overdue branch is still waited for while another branch is within its own timeout: the assembly
  waits for that one anyway, so a late answer costs no latency and is used (reported ``ok``, with
  its time and a ``detail`` saying it was late). A branch's timeout therefore bounds how long the
  assembly waits for that branch *alone*: a slow Redis still costs at most the hot timeout when
  the cold search is quick, and never more than the cold branch when it is not. Without this,
  under load (event-loop lag of a few ms) most directives missed their 5 ms and hot sets their
  15 ms while the cold search was still running.
* A cache read that has to go to Postgres instead (a hot-set miss: the first assembly after a write
  to the agent's memories, or after a restart emptied Redis) says so (:class:`SlowPath`), and its
  branch is then waited for up to the wall, as the directive's is: the short cache timeout bounds a
  slow Redis, not the one read that fills the cache (at 15 ms it made those assemblies L1).
* The cache branches (directive, hot) may start before the assembly does: their reads are sent when
  the request arrives (:class:`EarlyReads`), so a request waiting in line for admission has them in
  hand when it is admitted instead of queueing those round trips behind the event loop's other work
  then. Their timeouts still count from the assembly's start; ``ms`` is how long the assembly
  waited for them (~0 when they were already there) and ``detail`` says how long before the
  assembly the read was sent, when the request waited in line.
* Overdue branches are then *abandoned*, not cancelled: their own inner deadlines (the Postgres
  ``statement_timeout`` of their queries, the search's step timeouts) end them moments later,
  whereas cancelling would make asyncpg cancel a running query over a new connection — a Postgres
  backend fork per timed-out branch, which under overload is most of them. Only the request itself
  being cancelled (client gone) cancels its branches.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog
from redis.exceptions import RedisError

from service.assembly.hot import RedisCircuit
from service.assembly.types import Branch, Outcome
from service.errors import forget_outcome
from service.timing import elapsed_ms

log = structlog.get_logger(__name__)
T = TypeVar("T")

EARLY_DETAIL_MS = 1.0
"""A read sent at least this long before its assembly started says so in its ``detail``."""


@dataclass(slots=True)
class BranchRun(Generic[T]):
    outcome: Outcome
    value: T | None
    ms: float
    detail: str | None = None

    def stood_in(self, value: T, note: str) -> BranchRun[T]:
        """This run of a branch that gave no answer, with ``value`` standing in for it (its outcome kept)."""
        return BranchRun(self.outcome, value, self.ms, f"{self.detail}; {note}" if self.detail else note)

    def report(self, *, count: int | None = None, source: str | None = None) -> Branch:
        return Branch(outcome=self.outcome, ms=self.ms, detail=self.detail, count=count, source=source)


class BranchTimedOut(Exception):
    """A branch gave up on its own deadline (e.g. every search branch hit its statement_timeout):
    reported as ``timeout``, like a branch the assembly stopped waiting for."""


def _stop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs; whatever it ends with is not worth a warning."""
    if not task.done():
        task.cancel()
    task.add_done_callback(forget_outcome)


class SlowPath:
    """Set by a cache read when it goes to Postgres instead (a hot-set miss): its branch then waits
    as long as the slow timeout it was adopted with, not the cache read's short one."""

    __slots__ = ("taken",)

    def __init__(self) -> None:
        self.taken = False

    def take(self) -> None:
        self.taken = True


class BranchTask(Generic[T]):
    """One branch; its :attr:`run` is set by :func:`settle`."""

    __slots__ = ("began", "circuit", "finished", "name", "run", "slow", "slow_timeout_ms", "started", "task",
                 "timeout_ms")

    def __init__(self, name: str, timeout_ms: float, task: asyncio.Future[T] | None,
                 circuit: RedisCircuit | None = None, run: BranchRun[T] | None = None,
                 began: float | None = None, slow: SlowPath | None = None, slow_timeout_ms: float = 0.0) -> None:
        self.name = name
        self.timeout_ms = timeout_ms
        self.circuit = circuit
        self.started = time.perf_counter()
        self.began = began
        """When the branch's work was started, if before the assembly (:class:`EarlyReads`)."""
        self.slow = slow
        self.slow_timeout_ms = max(timeout_ms, slow_timeout_ms)
        self.finished: float | None = None
        self.task = task
        self.run = run
        if task is not None:
            task.add_done_callback(self._done)

    @classmethod
    def start(cls, name: str, timeout_ms: float, work: Callable[[], Awaitable[T]],
              circuit: RedisCircuit | None = None) -> BranchTask[T]:
        if timeout_ms <= 0:
            return cls.skipped(name, "no time left before the deadline")
        return cls(name, timeout_ms, asyncio.ensure_future(work()), circuit)

    @classmethod
    def adopt(cls, name: str, timeout_ms: float, early: EarlyRead[T], circuit: RedisCircuit | None = None,
              slow_timeout_ms: float = 0.0) -> BranchTask[T]:
        """The branch for a read started before the assembly (timed from now, like any branch); one
        that takes its slow path (:class:`SlowPath`) is waited for up to ``slow_timeout_ms``."""
        if timeout_ms <= 0:
            return cls.skipped(name, "no time left before the deadline")
        early.adopted = True
        return cls(name, timeout_ms, early.task, circuit, began=early.began, slow=early.slow,
                   slow_timeout_ms=slow_timeout_ms)

    def limit_ms(self) -> float:
        """How long the assembly waits for this branch alone: its timeout, or its slow timeout once
        its read has taken the slow path."""
        return self.slow_timeout_ms if self.slow is not None and self.slow.taken else self.timeout_ms

    @property
    def deadline(self) -> float:
        return self.started + self.limit_ms() / 1000

    @classmethod
    def skipped(cls, name: str, reason: str) -> BranchTask[T]:
        return cls(name, 0.0, None, run=BranchRun("skipped", None, 0.0, reason))

    def result(self) -> BranchRun[T]:
        """How the branch ended (after :func:`settle`)."""
        assert self.run is not None, "settle() first"
        return self.run

    def _done(self, _: asyncio.Future[T]) -> None:
        self.finished = time.perf_counter()

    def pending(self) -> bool:
        return self.task is not None and not self.task.done()

    def cancel(self) -> None:
        """The request is going away before :func:`settle` decided: stop the branch (its late failure
        is not worth a warning). A settled branch is left alone: an overdue one was abandoned."""
        if self.run is None and self.pending():
            assert self.task is not None
            _stop(self.task)

    def _settle(self) -> BranchRun[T]:
        if self.run is not None:
            return self.run
        task = self.task
        assert task is not None
        limit = self.limit_ms()
        if not task.done():
            task.add_done_callback(forget_outcome)
            return BranchRun("timeout", None, elapsed_ms(self.started), f"no answer within {limit:.0f} ms")
        ms = max(0.0, elapsed_ms(self.started, self.finished))
        exc = task.exception()
        if isinstance(exc, BranchTimedOut):
            return BranchRun("timeout", None, ms, str(exc))
        if exc is not None:  # a failed branch is recorded and the others are used: never a 500
            if self.circuit is not None and isinstance(exc, RedisError):
                self.circuit.failed()
            log.warning("assembly_branch_failed", branch=self.name, error=repr(exc)[:300])
            return BranchRun("error", None, ms, f"{type(exc).__name__}: {str(exc)[:200]}")
        detail = None
        if ms > limit:
            detail = f"answered after its {limit:.0f} ms timeout, while another branch was still running"
        elif ms > self.timeout_ms:
            detail = f"read from Postgres (not cached): waited past its {self.timeout_ms:.0f} ms, up to {limit:.0f}"
        elif self.began is not None and (ahead := elapsed_ms(self.began, self.started)) >= EARLY_DETAIL_MS:
            detail = f"read while the request waited in line ({ahead:.1f} ms)"
        return BranchRun("ok", task.result(), ms, detail)


@dataclass(slots=True)
class EarlyRead(Generic[T]):
    """A branch's read started before the assembly (see :class:`EarlyReads`)."""

    task: asyncio.Future[T]
    began: float
    adopted: bool = False
    slow: SlowPath | None = None


class EarlyReads:
    """Reads sent when a request arrives, for branches that only read caches (directive, hot set).

    They cost a Redis round trip or two and no CPU to speak of, so unlike the cold search they do not
    wait for admission: a request that waits in line is admitted with them done. A branch takes one
    over with :meth:`BranchTask.adopt`; :meth:`drop` cancels those no branch took (the request was
    refused, failed or went away before its assembly started)."""

    __slots__ = ("reads",)

    def __init__(self) -> None:
        self.reads: dict[str, EarlyRead[Any]] = {}

    def start(self, name: str, work: Callable[[], Awaitable[T]], slow: SlowPath | None = None) -> None:
        self.reads[name] = EarlyRead(asyncio.ensure_future(work()), time.perf_counter(), slow=slow)

    def get(self, name: str) -> EarlyRead[Any] | None:
        return self.reads.get(name)

    def drop(self) -> None:
        for read in self.reads.values():
            if not read.adopted:
                _stop(read.task)


class _Settling:
    """When to stop waiting (see :func:`settle`), decided in callbacks: a branch answering or the
    timer at the latest deadline of those still running. :meth:`close` drops every reference the
    loop holds to it (and so the timer's reference back to it)."""

    __slots__ = ("armed_for", "branches", "loop", "over", "tasks", "timer")

    def __init__(self, branches: Sequence[BranchTask[Any]]) -> None:
        self.branches = branches
        self.tasks = [b.task for b in branches if b.task is not None and not b.task.done()]
        self.loop = asyncio.get_running_loop()
        self.over: asyncio.Future[None] = self.loop.create_future()
        self.timer: asyncio.TimerHandle | None = None
        self.armed_for: float | None = None
        for task in self.tasks:
            task.add_done_callback(self.check)
        self.check()

    def check(self, _: object = None) -> None:
        if self.over.done():
            return
        last = max((b.deadline for b in self.branches if b.pending()), default=None)
        now = time.perf_counter()
        if last is None or now >= last:  # all answered, or every one still running is overdue
            self.over.set_result(None)
        elif last != self.armed_for:
            if self.timer is not None:
                self.timer.cancel()
            self.timer, self.armed_for = self.loop.call_later(last - now, self.check), last

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for task in self.tasks:
            task.remove_done_callback(self.check)


async def settle(branches: Sequence[BranchTask[Any]]) -> None:
    """Wait for ``branches`` as described in the module docstring, then set each one's ``run``.

    The assembly resumes once, when waiting is over, rather than once per branch answering."""
    if any(b.pending() for b in branches):
        settling = _Settling(branches)
        try:
            await settling.over
        except asyncio.CancelledError:
            for b in branches:
                b.cancel()
            raise
        finally:
            settling.close()
    for b in branches:
        b.run = b._settle()

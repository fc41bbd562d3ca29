"""The caller's own deadline (``X-Deadline-Ms``, ``X-Timeout-Ms``, the body's ``timeout_ms``) and the
wall an assembly runs under.

A caller's deadline works both ways. Shorter than ``PGCONTEXT_DEADLINE_MS``, it shortens the wall:
past it the assembly is the ladder's L3 (504), never late context. Longer, it lengthens the wall and
every branch timeout with it, up to ``PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS``: a caller that would
rather wait 200 ms for a complete context than get a reduced one in 40 ms says so with its deadline,
and its assembly runs the full planned retrieval (and is judged for shedding by its own budget).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from service.errors import BadRequest
from service.settings import AssemblySettings


@dataclass(frozen=True, slots=True)
class CallerDeadline:
    """The caller's own deadline as a ``time.monotonic()`` instant (None: only the server's wall)."""

    at: float | None = None

    def remaining_ms(self) -> float | None:
        return None if self.at is None else (self.at - time.monotonic()) * 1000

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def within(self, timeout_ms: float | None) -> CallerDeadline:
        """This deadline, or ``timeout_ms`` from now if sooner (the body's ``timeout_ms``)."""
        if timeout_ms is None:
            return self
        at = time.monotonic() + timeout_ms / 1000
        return CallerDeadline(at if self.at is None else min(self.at, at))

    @classmethod
    def from_headers(cls, deadline_ms: str | None, timeout_ms: str | None) -> CallerDeadline:
        """``X-Deadline-Ms``: absolute Unix time in ms; ``X-Timeout-Ms``: ms from now. Sooner wins."""
        candidates: list[float] = []
        now_mono, now_unix = time.monotonic(), time.time()
        for name, raw, absolute in (("X-Deadline-Ms", deadline_ms, True), ("X-Timeout-Ms", timeout_ms, False)):
            if raw is None:
                continue
            try:
                value = float(raw)
            except ValueError as exc:
                raise BadRequest(f"{name} must be a number of milliseconds, got {raw[:40]!r}",
                                 code="validation_error") from exc
            if value != value or value in (float("inf"), float("-inf")):
                raise BadRequest(f"{name} must be finite", code="validation_error")
            seconds = (value / 1000 - now_unix) if absolute else value / 1000
            candidates.append(now_mono + seconds)
        return cls(min(candidates) if candidates else None)


@dataclass(frozen=True, slots=True)
class Wall:
    """The deadline one assembly runs under, and how long it waits for each branch."""

    deadline_ms: float
    """``PGCONTEXT_DEADLINE_MS``, or the caller's remaining time (within ``max_deadline_ms``)."""
    wall_ms: float
    """Every branch ends by this: the deadline less the processing reserve (which grows with a longer
    deadline in proportion: ranking on a busy host must not push a long assembly past its caller's
    deadline into a 504)."""
    directive_ms: float
    hot_ms: float
    cold_ms: float
    scale: float = 1.0
    """How many times the default wall this one is (1 unless the caller asked for more time)."""

    @property
    def extended(self) -> bool:
        return self.scale > 1.0


def plan_wall(s: AssemblySettings, caller_left_ms: float | None) -> Wall:
    """The wall for an assembly starting now with ``caller_left_ms`` of the caller's time left.

    Without a caller deadline: ``deadline_ms``. With one: the caller's time, at most
    ``max(deadline_ms, max_deadline_ms)``. The processing reserve and the branch timeouts grow with
    the deadline in proportion (the directive's is the whole wall unless configured), each branch's
    at most the wall."""
    deadline = float(s.deadline_ms)
    if caller_left_ms is not None:
        deadline = min(caller_left_ms, float(max(s.deadline_ms, s.max_deadline_ms)))
    scale = max(1.0, deadline / max(1, s.deadline_ms))
    wall = deadline - s.processing_reserve_ms * scale

    def branch(timeout_ms: float) -> float:
        return wall if not timeout_ms else min(wall, timeout_ms * scale)

    return Wall(deadline_ms=deadline, wall_ms=wall, directive_ms=branch(s.directive_timeout_ms),
                hot_ms=min(wall, s.hot_timeout_ms * scale), cold_ms=branch(s.cold_timeout_ms), scale=scale)

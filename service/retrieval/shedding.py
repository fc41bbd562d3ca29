"""Shedding as the last resort: reduce a retrieval only when the full one would miss its deadline, as measured.

Before, an assembly's cold search went "light" (lexical only, fewer postings) as soon as a few
assemblies were in flight, and ``auto`` went lexical as soon as two query embeddings were running:
at concurrency 8 almost every assembly quietly lost its semantic branch although the full search
fitted in its budget. Now each kind of work keeps its own recent latency -- the query embedder a
moving average (:class:`LatencyEwma`), assembly's full cold searches the median of the last few
per load level (:class:`LatencyByLoad`) -- and the retrieval is reduced only when that exceeds a
share of the time left for it (``would_miss``).

Reduced work is not measured, so an average that says "too slow" would never be corrected: once a
sample is older than ``stale_s``, the next request runs in full again (a probe), and the probe's
latency *replaces* the stale average instead of moving it a fifth of the way: after a burst had
pushed the average to 60 ms, blending one probe a second took six seconds of reduced searches to
come back under a 26 ms threshold although every probe took 15 ms (assemble_load at 100K, c=1
after the warm-up burst: 60% of assemblies ran light on a quiet machine).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Final, Literal

ALPHA: Final = 0.2
"""Weight of the latest sample (≈ the last 5-10 samples dominate)."""
STALE_S: Final = 1.0
"""After this long without a sample, the average is not trusted to shed (the next one probes)."""
ALONE_STALE_S: Final = 0.1
"""The same for a request running alone (:class:`LatencyByLoad`): its probe delays nobody else."""
ALONE_STALE_LATENCIES: Final = 3.0
"""... but at least three of its recent searches' durations (a single client's slow searches arrive
one search apart: they must not look stale to each other)."""


class LatencyEwma:
    """Exponentially weighted moving average of recent latencies (ms) of one kind of work."""

    __slots__ = ("alpha", "samples", "stale_s", "updated", "value")

    def __init__(self, *, alpha: float = ALPHA, stale_s: float = STALE_S) -> None:
        self.alpha = alpha
        self.stale_s = stale_s
        self.value: float | None = None
        self.updated = 0.0
        self.samples = 0

    def observe(self, ms: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        stale = self.value is None or now - self.updated > self.stale_s
        self.value = ms if stale or self.value is None else self.value + self.alpha * (ms - self.value)
        self.updated = now
        self.samples += 1

    def would_miss(self, budget_ms: float, share: float, now: float | None = None) -> bool:
        """The recent average exceeds ``share`` of ``budget_ms`` (False without a fresh average, or
        with ``share`` <= 0: never shed)."""
        if share <= 0 or self.value is None:
            return False
        if (time.monotonic() if now is None else now) - self.updated > self.stale_s:
            return False
        return self.value > share * budget_ms

    def describe(self) -> str:
        return "no recent samples" if self.value is None else f"recent average {self.value:.1f} ms"


MAX_BACKOFF: Final = 2
"""A shedding window stays fresh for at most ``2 ** MAX_BACKOFF`` times its ``stale_s`` (4 s; 0.4 s alone)."""
MIN_SAMPLES: Final = 3
"""Fresh samples a median needs before it may shed: until then requests run in full (probes)."""

Verdict = Literal["fits", "probe", "miss", "probing", "late"]
""":meth:`RecentLatency.judge`: run in full (``fits``), run in full to measure (``probe``), reduce
(``miss``: the window's median would miss; ``probing``: enough probes are already measuring;
``late``: too little budget left, after waiting in line)."""
SHEDS: Final = frozenset({"miss", "probing", "late"})


class RecentLatency:
    """The median of the last ``size`` latencies (ms) of one kind of work. A median, not an average:
    a few outliers (a checkpoint, a GC pause, one query with common terms) do not shed the searches
    after them, while a load that makes most searches slow does (with an average, two 60 ms
    searches among 15 ms ones took a single-request stream light for a second at a time: 15% of
    assemble_load's c=1 in one run). Stale after ``stale_s``; the probes then start it afresh, and it
    sheds only once it holds ``min_samples`` fresh ones: full searches right after a second of light
    ones are slow (assembly at 100K, c=1: cold branch median 26-28 ms for the first full search after
    light ones, 15.9 ms for one after a full one; cause not found), and one such probe judged alone
    sent single requests light for the next second, again and again (588 of 600 light).

    ``stale_latencies``: the window is also fresh for that many times its latest sample, so that a
    stream of searches each slower than ``stale_s`` (one after another, as a single client sends
    them) does not look stale between its own samples and can still shed.

    **Probes back off while they keep finding "would miss".** Each window that sheds doubles the time
    until the next one goes stale, up to ``2 ** MAX_BACKOFF`` times ``stale_s``; a window that finds
    the full search fits starts over at ``stale_s``. Under a load that lasts, a probe is a full search
    that misses: at concurrency 8 on two cores the probes were ~3% of assemblies, each about twice a
    light one's CPU, and most ended as the semantic branch's timeout.

    **At most ``min_samples`` probes run at once.** Every request that arrived while the window was
    unjudged used to probe, until ``min_samples`` probes had finished: at concurrency 16 that was
    10-25 full searches per window (3-8% of assemblies, each holding its slot for up to its
    embedding wait, which raised the p99 by 18%); the others now stay light until the
    window can judge. After a window that shed, a request probes only with ``share`` of its budget
    still ahead of it (see :meth:`judge`)."""

    __slots__ = ("backoff", "judged", "min_samples", "probing", "samples", "stale_latencies", "stale_s",
                 "updated")

    def __init__(self, *, size: int = 9, stale_s: float = STALE_S, min_samples: int = MIN_SAMPLES,
                 stale_latencies: float = 0.0) -> None:
        self.samples: deque[float] = deque(maxlen=size)
        self.stale_s = stale_s
        self.stale_latencies = stale_latencies
        self.min_samples = min_samples
        self.updated = 0.0
        self.backoff = 0
        """Windows in a row that shed (each doubles the staleness interval, up to MAX_BACKOFF)."""
        self.judged = False
        """The current window has shed at least once (and counted in ``backoff``)."""
        self.probing = 0
        """Probes running (the caller counts them: ``+= 1`` on a ``probe`` verdict, ``-= 1`` when it ends)."""

    def _stale(self, now: float) -> bool:
        last_s = self.samples[-1] / 1000 if self.samples else 0.0
        return now - self.updated > max(self.stale_s * (1 << self.backoff), self.stale_latencies * last_s)

    @property
    def value(self) -> float | None:
        if not self.samples:
            return None
        return sorted(self.samples)[len(self.samples) // 2]

    def observe(self, ms: float, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if self._stale(now):
            self.samples.clear()  # a probe after a stale window: what the service does now
            self.judged = False
        self.samples.append(ms)
        self.updated = now

    def judge(self, budget_ms: float, share: float, now: float | None = None, waited_ms: float = 0.0) -> Verdict:
        """Whether the next full search runs, with ``budget_ms`` less ``waited_ms`` (the time this one
        already waited in line) left for it: ``miss`` if the recent median exceeds ``share`` of what
        is left, ``fits`` if not; with fewer than ``min_samples`` fresh samples ``probe``, or
        ``probing`` while ``min_samples`` probes are already running. ``late``: nothing
        left, or after a window that shed too little to probe with (a probe then is for a request
        with ``share`` of the budget still ahead of it: one that waited in line has already spent its
        caller's time, and under a lasting load most do). ``share`` <= 0: always ``fits`` (never shed).
        The verdict also sets the backoff: the first ``miss`` of a window doubles its staleness
        interval, a ``fits`` resets it."""
        if share <= 0:
            return "fits"
        left_ms = budget_ms - waited_ms
        if left_ms <= 0:
            return "late"
        if len(self.samples) < self.min_samples or self._stale(time.monotonic() if now is None else now):
            if self.backoff and left_ms < share * budget_ms:
                return "late"
            return "probing" if self.probing >= self.min_samples else "probe"
        value = self.value  # sorted only past the cheap checks
        if value is None or value <= share * left_ms:
            self.backoff = 0
            return "fits"
        if not self.judged:
            self.judged = True
            self.backoff = min(self.backoff + 1, MAX_BACKOFF)
        return "miss"

    def fits(self, budget_ms: float, share: float, now: float | None = None, waited_ms: float = 0.0) -> bool:
        """Whether a full search fits what ``waited_ms`` left of ``budget_ms``, by the recent median,
        without judging (no probe counted, no backoff changed): true unless ``min_samples`` fresh
        samples say it would take more than ``share`` of it. For a budget longer than the ones the
        window sheds for (a caller that gave more time), whose verdict must not move theirs."""
        left_ms = budget_ms - waited_ms
        if left_ms <= 0:
            return False
        if share <= 0 or len(self.samples) < self.min_samples:
            return True
        if self._stale(time.monotonic() if now is None else now):
            return True
        value = self.value
        return value is None or value <= share * left_ms

    def would_miss(self, budget_ms: float, share: float, now: float | None = None) -> bool:
        """:meth:`judge` says reduce (``miss``, ``probing`` or ``late``)."""
        return self.judge(budget_ms, share, now) in SHEDS

    def describe(self) -> str:
        value = self.value
        return "no recent samples" if value is None else f"recent median {value:.1f} ms"


class LatencyByLoad:
    """A :class:`RecentLatency` per load level: how many requests were running when the measured one
    started, in powers of two (1, 2-3, 4-7, 8-15, ...). A full search at concurrency 8 queues for the
    cores and says nothing about one at concurrency 1: with one average for both, a burst made the
    next seconds of single requests go light although each alone fitted its budget easily
    (assemble_load at 100K, c=1 after the warm-up burst). A level with no fresh samples probes.

    A request running alone probes sooner (``alone_stale_s``, not ``stale_s``): its full search
    delays nobody else, whereas a probe among others is a likely deadline miss that also takes their
    cores. With one second for both, the first full searches after a service start (caches still
    cold: 27-36 ms against 10-18 ms a second later) sent single requests light for a second at a
    time: ~100 of assemble_load's ~1,000 at c=1."""

    __slots__ = ("_levels", "alone_stale_s", "stale_s")

    def __init__(self, *, stale_s: float = STALE_S, alone_stale_s: float = ALONE_STALE_S) -> None:
        self.stale_s = stale_s
        self.alone_stale_s = alone_stale_s
        self._levels: dict[int, RecentLatency] = {}

    @staticmethod
    def level(running: int) -> int:
        return max(1, running).bit_length()

    def at(self, running: int) -> RecentLatency:
        """The recent latencies for ``running`` requests in flight (this one included)."""
        level = self.level(running)
        found = self._levels.get(level)
        if found is None:
            alone = level == 1
            found = self._levels[level] = RecentLatency(
                stale_s=self.alone_stale_s if alone else self.stale_s,
                stale_latencies=ALONE_STALE_LATENCIES if alone else 0.0)
        return found

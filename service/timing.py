"""Elapsed time as the responses and logs report it."""

from __future__ import annotations

import time


def elapsed_ms(since: float, until: float | None = None) -> float:
    """ms from ``since`` to ``until`` (default: now), both ``time.perf_counter()`` readings, to the microsecond."""
    return round(((until if until is not None else time.perf_counter()) - since) * 1000, 3)

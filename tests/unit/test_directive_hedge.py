"""When a directive's Redis read is raced by Postgres (service.assembly.directive.HedgeAfter)."""

from __future__ import annotations

from service.assembly.directive import HEDGE_CAP, HEDGE_WINDOW, HedgeAfter


def test_fast_reads_keep_the_floor() -> None:
    hedge = HedgeAfter(5)
    for _ in range(HEDGE_WINDOW):
        hedge.observe(0.001)
    assert hedge.threshold_s == 0.005


def test_a_busy_loop_raises_it_to_the_recent_95th_percentile() -> None:
    hedge = HedgeAfter(5)
    for i in range(HEDGE_WINDOW):
        hedge.observe(0.004 if i % 10 else 0.009)  # a tenth at 9 ms: the 95th percentile is 9 ms
    assert hedge.threshold_s == 0.009


def test_it_never_waits_past_its_cap_and_comes_back_down() -> None:
    hedge = HedgeAfter(5)
    for _ in range(HEDGE_WINDOW):
        hedge.observe(1.0)  # a stalled host
    assert hedge.threshold_s == HEDGE_CAP * 0.005
    for _ in range(HEDGE_WINDOW):
        hedge.observe(0.002)
    assert hedge.threshold_s == 0.005


def test_zero_floor_hedges_at_once() -> None:
    hedge = HedgeAfter(0)
    for _ in range(HEDGE_WINDOW):
        hedge.observe(0.003)
    assert hedge.threshold_s == 0.0

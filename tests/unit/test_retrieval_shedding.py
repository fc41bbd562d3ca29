"""The shedding rule: reduce a retrieval only when recent full ones took more than a share of the budget."""

from __future__ import annotations

from service.retrieval.shedding import LatencyEwma


def test_no_samples_never_sheds() -> None:
    assert not LatencyEwma().would_miss(30.0, 0.8, now=0.0)


def test_sheds_only_when_the_recent_average_exceeds_the_share_of_the_budget() -> None:
    ewma = LatencyEwma(alpha=0.5, stale_s=1.0)
    ewma.observe(20.0, now=10.0)
    assert not ewma.would_miss(30.0, 0.8, now=10.1)  # 20 <= 24: the full search fits
    ewma.observe(40.0, now=10.2)  # average 30
    assert ewma.value == 30.0
    assert ewma.would_miss(30.0, 0.8, now=10.3)  # 30 > 24
    assert not ewma.would_miss(60.0, 0.8, now=10.3)  # a larger budget (e.g. a caller's own) still fits


def test_one_slow_sample_among_fast_ones_does_not_shed() -> None:
    ewma = LatencyEwma(alpha=0.2)
    for _ in range(20):
        ewma.observe(10.0, now=1.0)
    ewma.observe(60.0, now=1.0)  # one burst: 10 + 0.2 * 50 = 20
    assert not ewma.would_miss(30.0, 0.8, now=1.0)


def test_a_stale_average_probes_with_a_full_search() -> None:
    ewma = LatencyEwma(alpha=0.2, stale_s=1.0)
    ewma.observe(100.0, now=5.0)
    assert ewma.would_miss(30.0, 0.8, now=5.5)
    assert not ewma.would_miss(30.0, 0.8, now=6.1)  # shed work is not measured: after stale_s, measure again


def test_share_zero_never_sheds() -> None:
    ewma = LatencyEwma()
    ewma.observe(1000.0, now=0.0)
    assert not ewma.would_miss(30.0, 0.0, now=0.0)
    assert ewma.describe() == "recent average 1000.0 ms"

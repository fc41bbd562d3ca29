"""The shedding rule: reduce a retrieval only when recent full ones took more than a share of the budget."""

from __future__ import annotations

from service.retrieval.shedding import LatencyByLoad, LatencyEwma, RecentLatency


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


def test_a_probe_after_a_stale_average_replaces_it() -> None:
    # After a burst the average is high; the probe a second later measures the quiet service, and
    # that is what the next decisions use (blending it in would shed for several more seconds).
    ewma = LatencyEwma(alpha=0.2, stale_s=1.0)
    for i in range(10):
        ewma.observe(60.0, now=5.0 + i * 0.01)
    ewma.observe(15.0, now=6.5)
    assert ewma.value == 15.0
    assert not ewma.would_miss(32.0, 0.8, now=6.6)
    ewma.observe(45.0, now=6.7)  # fresh samples still blend
    assert ewma.value == 21.0


def test_share_zero_never_sheds() -> None:
    ewma = LatencyEwma()
    ewma.observe(1000.0, now=0.0)
    assert not ewma.would_miss(30.0, 0.0, now=0.0)
    assert ewma.describe() == "recent average 1000.0 ms"


def test_a_few_outliers_do_not_shed_but_a_slow_majority_does() -> None:
    recent = RecentLatency(size=9, stale_s=1.0)
    for i in range(9):
        recent.observe(15.0, now=1.0 + i * 0.01)
    recent.observe(60.0, now=1.1)
    recent.observe(70.0, now=1.11)  # two outliers: an average of these nine would be 27 > 25.6
    assert recent.value == 15.0 and not recent.would_miss(32.0, 0.8, now=1.12)
    for i in range(3):
        recent.observe(40.0, now=1.2 + i * 0.01)  # five of the last nine slow: now it sheds
    assert recent.value == 40.0 and recent.would_miss(32.0, 0.8, now=1.25)
    assert recent.would_miss(32.0, 0.8, now=2.5)  # this window shed: it stays fresh twice as long (2 s)
    assert not recent.would_miss(32.0, 0.8, now=3.5)  # stale: the next one probes
    recent.observe(12.0, now=3.5)  # and the probe starts the window afresh
    assert list(recent.samples) == [12.0] and recent.describe() == "recent median 12.0 ms"
    assert not RecentLatency().would_miss(32.0, 0.8) and RecentLatency().describe() == "no recent samples"


def test_a_fresh_window_sheds_only_once_it_holds_three_samples() -> None:
    # After a stale window the first full search (the probe) may be slow for reasons of its own: it
    # alone does not send the next second light; three slow ones in a row do.
    recent = RecentLatency(size=9, stale_s=1.0)
    recent.observe(60.0, now=1.0)
    assert not recent.would_miss(32.0, 0.8, now=1.01)
    recent.observe(14.0, now=1.02)
    recent.observe(15.0, now=1.03)
    assert recent.value == 15.0 and not recent.would_miss(32.0, 0.8, now=1.04)
    recent.observe(70.0, now=2.5)  # stale: a new window
    recent.observe(65.0, now=2.51)
    assert list(recent.samples) == [70.0, 65.0] and not recent.would_miss(32.0, 0.8, now=2.52)
    recent.observe(80.0, now=2.53)
    assert recent.would_miss(32.0, 0.8, now=2.54)


def test_each_load_level_has_its_own_latencies() -> None:
    # A burst at 8 running measured slow full searches; one request alone has no fresh sample of its
    # own level, so it runs in full (a probe) instead of inheriting the burst's latency.
    by_load = LatencyByLoad(stale_s=1.0)
    assert [LatencyByLoad.level(n) for n in (0, 1, 2, 3, 4, 7, 8, 15, 16)] == [1, 1, 2, 2, 3, 3, 4, 4, 5]
    for i in range(10):
        by_load.at(8).observe(60.0, now=1.0 + i * 0.01)
    assert by_load.at(9).would_miss(32.0, 0.8, now=1.2)  # same level (8-15): shed
    assert not by_load.at(1).would_miss(32.0, 0.8, now=1.2)  # alone: no sample, probe
    by_load.at(1).observe(14.0, now=1.3)
    assert not by_load.at(1).would_miss(32.0, 0.8, now=1.4)
    assert by_load.at(1) is by_load.at(1) and by_load.at(1) is not by_load.at(2)


def test_a_request_alone_probes_sooner_than_one_among_others() -> None:
    # The first full searches after a start are slow (cold caches), later ones fast: alone, a request
    # re-measures after 0.1 s instead of running light for a whole second; among others the window
    # keeps its second (a probe there is a likely deadline miss that also takes the others' cores).
    by_load = LatencyByLoad(stale_s=1.0, alone_stale_s=0.1)
    for i in range(3):
        by_load.at(1).observe(30.0, now=5.0 + i * 0.01)
        by_load.at(4).observe(30.0, now=5.0 + i * 0.01)
    assert by_load.at(1).would_miss(32.0, 0.8, now=5.05) and by_load.at(4).would_miss(32.0, 0.8, now=5.05)
    # alone: stale after 0.2 s (0.1 s, doubled as the window shed), the next one probes
    assert not by_load.at(1).would_miss(32.0, 0.8, now=5.25)
    assert by_load.at(4).would_miss(32.0, 0.8, now=5.25)  # among others: still shed
    for i in range(3):  # the probes find the warm path
        by_load.at(1).observe(15.0, now=5.25 + i * 0.01)
    assert not by_load.at(1).would_miss(32.0, 0.8, now=5.3)


def test_a_single_client_with_searches_slower_than_the_alone_staleness_still_sheds() -> None:
    # One request after another, each full search 450 ms (a deadline raised to seconds): the samples
    # arrive ~0.46 s apart, more than 0.1 s, yet they are one stream and must add up to a median.
    by_load = LatencyByLoad(stale_s=1.0, alone_stale_s=0.1)
    for i in range(3):
        by_load.at(1).observe(450.0, now=10.0 + i * 0.46)
    assert by_load.at(1).would_miss(998.0, 0.4, now=10.93)
    assert not by_load.at(1).would_miss(998.0, 0.4, now=10.92 + 1.4)  # three searches' time: probe


def test_probes_back_off_while_the_load_lasts_and_start_over_once_a_full_search_fits() -> None:
    # Eight running on two cores: every window of probes finds the full search too slow. Each
    # window that sheds doubles the time until the next probes (1, 2, 4 s, no more); a window whose
    # probes fit starts over at 1 s.
    recent = LatencyByLoad(stale_s=1.0).at(8)

    def window(start: float, ms: float) -> bool:
        for i in range(3):
            recent.observe(ms, now=start + i * 0.01)
        return recent.would_miss(32.0, 0.8, now=start + 0.03)

    assert window(10.0, 40.0) and recent.would_miss(32.0, 0.8, now=10.5)
    assert recent.would_miss(32.0, 0.8, now=11.5)  # 2 s after its last sample, not 1 s
    assert not recent.would_miss(32.0, 0.8, now=12.1)  # stale: probe
    assert window(12.1, 40.0) and recent.would_miss(32.0, 0.8, now=15.5)  # 4 s now
    assert not recent.would_miss(32.0, 0.8, now=16.2)
    assert window(16.2, 40.0) and not recent.would_miss(32.0, 0.8, now=20.3)  # 4 s at most
    assert not window(20.3, 12.0)  # the load is gone: the full search fits
    assert not recent.would_miss(32.0, 0.8, now=21.4)  # ... and 1 s again (nothing to shed anyway)
    assert window(21.4, 40.0) and recent.would_miss(32.0, 0.8, now=22.5)  # the backoff starts over: 2 s,
    assert not recent.would_miss(32.0, 0.8, now=23.5)  # not 8


def test_only_a_few_probes_run_at_once() -> None:
    # At concurrency 16 every arrival of an unjudged window used to probe until three probes had
    # finished (10-25 full searches per window); now three at a time measure, the rest stay light.
    recent = RecentLatency(size=9, stale_s=1.0)
    verdicts = []
    for _ in range(4):
        verdicts.append(recent.judge(32.0, 0.8, now=1.0))
        recent.probing += verdicts[-1] == "probe"
    assert verdicts == ["probe", "probe", "probe", "probing"]
    recent.probing = 0
    for i in range(3):
        recent.observe(60.0, now=1.0 + i * 0.01)
    assert recent.judge(32.0, 0.8, now=1.1) == "miss" and recent.backoff == 1
    # Stale after 2 s: the next three probe, a fourth while they run stays light.
    verdicts = []
    for _ in range(4):
        verdicts.append(recent.judge(32.0, 0.8, now=3.2))
        recent.probing += verdicts[-1] == "probe"
    assert verdicts == ["probe", "probe", "probe", "probing"] and recent.would_miss(32.0, 0.8, now=3.2)
    recent.probing -= 1
    recent.observe(14.0, now=3.21)  # the first probe ends: a new window of one sample, still unjudged
    assert recent.judge(32.0, 0.8, now=3.22) == "probe"  # a place is free again
    recent.probing -= 2
    recent.observe(15.0, now=3.23)
    recent.observe(13.0, now=3.24)
    assert recent.judge(32.0, 0.8, now=3.25) == "fits" and recent.backoff == 0
    assert RecentLatency().judge(32.0, 0.0) == "fits"


def test_time_waited_in_line_counts_against_the_budget() -> None:
    # 32 ms budget, share 0.8: a full search's 20 ms median fits a request that did not wait (20 <=
    # 25.6), not one that waited 10 ms of it (20 > 0.8 * 22); one that waited it all has nothing left.
    recent = RecentLatency(size=9, stale_s=1.0)
    for i in range(3):
        recent.observe(20.0, now=1.0 + i * 0.01)
    assert recent.judge(32.0, 0.8, now=1.1) == "fits"
    # A stale window after one that fitted: every request measures, however long it waited.
    assert recent.judge(32.0, 0.8, now=9.0, waited_ms=20.0) == "probe"
    for i in range(3):
        recent.observe(20.0, now=10.0 + i * 0.01)
    assert recent.judge(32.0, 0.8, now=10.1, waited_ms=10.0) == "miss" and recent.backoff == 1
    assert recent.judge(32.0, 0.8, now=10.1, waited_ms=32.0) == "late"
    # After a window that shed, only with share of the budget still ahead: a request that waited 6
    # ms (26 left >= 25.6) probes, one that waited 7 ms does not.
    assert recent.judge(32.0, 0.8, now=13.0, waited_ms=6.0) == "probe"
    assert recent.judge(32.0, 0.8, now=13.0, waited_ms=7.0) == "late"
    assert recent.judge(32.0, 0.0, now=13.0, waited_ms=100.0) == "fits"  # share 0: never shed


def test_a_longer_budget_fits_without_judging_the_window_for_the_shorter_ones() -> None:
    # A caller that gave more time: its search runs in full while the median fits its own budget,
    # and asking changes nothing for the default budget's requests (no probe counted, no backoff).
    window = RecentLatency(stale_s=1.0)
    for _ in range(3):
        window.observe(60.0, now=1.0)
    assert window.judge(34.0, 0.8, now=1.1) == "miss" and window.backoff == 1
    assert window.fits(500.0, 0.8, now=1.1) and window.fits(500.0, 0.8, now=1.1, waited_ms=450.0) is False
    assert window.backoff == 1 and window.probing == 0 and window.judged
    assert not window.fits(60.0, 0.8, now=1.1)  # 60 > 48: too slow even for that budget
    assert RecentLatency().fits(34.0, 0.8)  # no samples: nothing says it would miss
    assert not RecentLatency().fits(34.0, 0.8, waited_ms=34.0)  # nothing left of the budget

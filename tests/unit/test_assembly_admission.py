"""Admission: a bounded number of assemblies at once; a short line (CoDel, adaptive LIFO, deadlines)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from service.assembly.admission import Admission
from service.errors import DeadlineExceeded, ServiceUnavailable


async def holding(admission: Admission, release: asyncio.Event) -> None:
    """Hold a slot (waiting in line for one if need be) until ``release`` is set."""
    async with admission.admit():
        await release.wait()


async def test_at_most_limit_inside_and_the_rest_in_arrival_order() -> None:
    admission = Admission(limit=2, max_queued=10)
    inside, most, order, waited = 0, 0, [], {}

    async def one(i: int) -> None:
        nonlocal inside, most
        async with admission.admit() as queued_ms:
            inside += 1
            most = max(most, inside)
            order.append(i)
            waited[i] = queued_ms
            await asyncio.sleep(0.03)
            inside -= 1

    tasks = []
    for i in range(5):
        tasks.append(asyncio.ensure_future(one(i)))
        await asyncio.sleep(0)  # arrive one after the other
    await asyncio.gather(*tasks)
    assert most == 2 and order == [0, 1, 2, 3, 4]
    assert waited[0] == waited[1] == 0.0 and waited[2] >= 20 and waited[4] >= 45
    assert admission.waiting == 0


async def test_a_full_line_refuses_at_once_with_retry_after() -> None:
    admission = Admission(limit=1, max_queued=1)
    release = asyncio.Event()

    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    waiter = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    assert admission.waiting == 1
    with pytest.raises(ServiceUnavailable) as refused:
        async with admission.admit():
            pass
    assert refused.value.code == "overloaded" and refused.value.retry_after_s == 1
    assert refused.value.details == {"in_flight": 1, "queued": 1, "reason": "queue_full"}
    release.set()
    await asyncio.gather(holder, waiter)
    async with admission.admit() as queued_ms:  # the slots all came back
        assert queued_ms < 5


async def test_a_deadline_shorter_than_the_service_time_is_refused_on_arrival() -> None:
    admission = Admission(limit=1, max_queued=10, initial_service_ms=100)
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    with pytest.raises(ServiceUnavailable) as refused:
        async with admission.admit(caller_left_ms=90):
            pass
    assert refused.value.code == "overloaded" and refused.value.details["reason"] == "deadline"
    assert admission.waiting == 0
    # With time for one assembly it waits, but only until the deadline would leave less than that.
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as dropped:
        async with admission.admit(caller_left_ms=300):
            pass
    waited_ms = (time.monotonic() - started) * 1000
    assert dropped.value.details["reason"] == "queue_timeout" and 190 <= waited_ms < 300  # not the 1 s limit
    release.set()
    await holder


async def test_the_callers_deadline_passing_in_line_is_L3_and_leaks_nothing() -> None:
    admission = Admission(limit=1, max_queued=10, initial_service_ms=0)
    release = asyncio.Event()

    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    with pytest.raises(DeadlineExceeded) as late:
        async with admission.admit(caller_left_ms=20):
            pass
    assert late.value.details == {"level": "L3"} and admission.waiting == 0
    # A request whose client went away while waiting is cancelled: it leaves the line too.
    gone = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0.01)
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert admission.waiting == 0
    release.set()
    await holder
    async with admission.admit() as queued_ms:
        assert queued_ms < 5
    assert admission.in_flight == 0


async def test_a_standing_line_sheds_after_the_target_and_serves_the_newest_first() -> None:
    admission = Admission(limit=1, max_queued=100, target_ms=30, interval_ms=60, initial_service_ms=5)
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    outcomes: dict[str, str] = {}
    admitted: list[str] = []

    async def one(name: str) -> None:
        try:
            async with admission.admit():
                outcomes[name] = "admitted"
                admitted.append(name)
                await asyncio.sleep(0.002)
        except ServiceUnavailable as exc:
            outcomes[name] = str(exc.details["reason"])

    # A burst: the first waiters may wait up to twice the interval.
    tasks = [asyncio.ensure_future(one("burst-1"))]
    await asyncio.sleep(0.03)
    tasks.append(asyncio.ensure_future(one("burst-2")))
    await asyncio.sleep(0.04)
    # The line has not been empty for 70 ms: standing.
    assert admission.standing() and outcomes == {}
    tasks.append(asyncio.ensure_future(one("old")))
    await asyncio.sleep(0.005)
    tasks.append(asyncio.ensure_future(one("new")))
    await asyncio.sleep(0)
    release.set()  # the slot frees: the newest waiter gets it first
    await asyncio.gather(holder, *tasks)
    assert admitted[0] == "new"
    assert admission.in_flight == 0 and admission.waiting == 0


async def test_a_standing_line_no_longer_than_the_slots_is_served_oldest_first() -> None:
    """A closed loop of twice the slots keeps a standing line of ``limit`` waiters: one round of the
    slots serves them all, so a freed slot goes to the oldest (LIFO would pass it over again and
    again, until it timed out)."""
    admission = Admission(limit=2, max_queued=100, target_ms=30, interval_ms=40, initial_service_ms=5)
    release = asyncio.Event()
    holders = [asyncio.ensure_future(holding(admission, release)) for _ in range(2)]
    await asyncio.sleep(0)
    admitted: list[str] = []

    async def one(name: str) -> None:
        async with admission.admit():
            admitted.append(name)

    tasks = [asyncio.ensure_future(one("old"))]
    await asyncio.sleep(0.005)
    tasks.append(asyncio.ensure_future(one("new")))
    await asyncio.sleep(0.05)
    assert admission.standing() and admission.waiting == 2  # standing, but no longer than the slots
    release.set()
    await asyncio.gather(*holders, *tasks)
    assert admitted == ["old", "new"]
    assert admission.in_flight == 0 and admission.waiting == 0


async def line_of_three(admission: Admission, gap_s: float, check: Callable[[Admission], None]) -> list[str]:
    """One slot held, three waiters arriving ``gap_s`` apart, ``check`` run ``gap_s`` after the last,
    then the slot freed: the waiters in the order they were admitted."""
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    admitted: list[str] = []

    async def one(name: str) -> None:
        async with admission.admit():
            admitted.append(name)

    tasks = []
    for name in ("first", "second", "third"):
        tasks.append(asyncio.ensure_future(one(name)))
        await asyncio.sleep(gap_s)
    check(admission)
    release.set()
    await asyncio.gather(holder, *tasks)
    assert admission.in_flight == 0 and admission.waiting == 0
    return admitted


async def test_a_standing_line_that_drains_within_the_target_is_served_oldest_first() -> None:
    """A closed loop of four times the slots keeps a standing line longer than the slots whose oldest
    waiter is still inside ``target_ms``: first come first served (LIFO passed the oldest over until
    it timed out: the 503s of 16 clients on 4 slots). Past the target the same line is newest first."""
    for target_ms, lifo in ((400, False), (30, True)):
        def check(admission: Admission, lifo: bool = lifo) -> None:
            # The line has not been empty for 120 ms (standing) and is longer than the slots.
            assert admission.standing() and admission.waiting == 3 and admission.lifo() == lifo

        admitted = await line_of_three(Admission(limit=1, max_queued=100, target_ms=target_ms, interval_ms=100,
                                                 initial_service_ms=5), 0.04, check)
        assert admitted[0] == ("third" if lifo else "first")
        if not lifo:
            assert admitted == ["first", "second", "third"]


async def test_a_line_that_served_someone_within_the_target_lately_stays_oldest_first() -> None:
    """CoDel's test for a line that does not drain: nobody admitted within ``target_ms`` of arriving
    for a whole ``interval_ms``. One slow round (the oldest waiter past the target) in a line that
    served a waiter in time lately keeps it first come first served."""
    def check(admission: Admission) -> None:
        # Standing (90 ms), longer than the slot, not full (room for 6), the oldest waited past the target.
        assert admission.standing() and admission.waiting == 3 and admission.line_cap() == 6
        admission._served_in_target_at = time.monotonic() - 0.04  # someone was served in time 40 ms ago
        assert not admission.lifo()
        admission._served_in_target_at = time.monotonic() - 0.07  # ... or a whole interval ago: not draining
        assert admission.lifo()

    admitted = await line_of_three(Admission(limit=1, max_queued=100, target_ms=30, interval_ms=60,
                                             initial_service_ms=5), 0.03, check)
    assert sorted(admitted) == ["first", "second", "third"]


async def test_a_full_standing_line_is_newest_first_even_while_it_drains() -> None:
    """A line that turned an arrival away for want of room within the interval (overload) serves the
    newest first, however recently it served someone in time; otherwise it stays oldest first."""
    admission = Admission(limit=1, max_queued=100, target_ms=50, interval_ms=40, initial_service_ms=10)
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    waiters = []
    for _ in range(3):
        waiters.append(asyncio.ensure_future(holding(admission, release)))
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.04)
    assert admission.standing() and admission.waiting == 3
    admission._served_in_target_at = time.monotonic()  # as if a waiter had just been served in time
    assert admission.line_cap() == 5 and not admission.lifo()  # 1 slot x 50 ms / 10 ms: room for 5
    admission.service_ms = 20.0  # slower assemblies: the same line is now full ...
    assert admission.line_cap() == 3 and admission.full() and not admission.lifo()
    with pytest.raises(ServiceUnavailable) as refused:  # ... and the next arrival is turned away
        async with admission.admit():
            pass
    assert refused.value.details["reason"] == "queue_full" and admission.lifo()
    admission._turned_away_at -= 0.05  # a whole interval ago
    assert not admission.lifo()
    release.set()
    await asyncio.gather(holder, *waiters)
    assert admission.in_flight == 0 and admission.waiting == 0


async def test_service_time_is_measured_and_sets_retry_after() -> None:
    admission = Admission(limit=1, max_queued=1000, initial_service_ms=10)
    for _ in range(40):
        async with admission.admit():
            await asyncio.sleep(0.02)
    assert 15 <= admission.service_ms <= 40
    admission.service_ms = 5000.0  # a very slow service: the line drains in seconds
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    assert admission.retry_after_s() == 5
    release.set()
    await holder


async def test_a_slot_handed_to_a_cancelled_waiter_passes_on() -> None:
    admission = Admission(limit=1, max_queued=10)
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    a = asyncio.ensure_future(holding(admission, release))
    b = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    release.set()
    await asyncio.sleep(0)  # the holder leaves and hands its slot to ``a`` ...
    a.cancel()  # ... which is cancelled before it runs: ``b`` must get the slot
    with pytest.raises(asyncio.CancelledError):
        await a
    await asyncio.wait_for(asyncio.gather(holder, b), 1)
    assert admission.in_flight == 0 and admission.waiting == 0


async def test_no_limit_admits_everything_at_once() -> None:
    admission = Admission(limit=0, max_queued=0)
    async with admission.admit() as a, admission.admit() as b, admission.admit() as c:
        assert (a, b, c) == (0.0, 0.0, 0.0)


async def test_a_freed_slot_goes_to_the_next_org_in_turn() -> None:
    """Org B's backlog does not stand in front of org A's next assembly (round robin between orgs)."""
    admission = Admission(limit=1, max_queued=20)
    release = asyncio.Event()
    order: list[str] = []

    async def one(org: str, i: int) -> None:
        async with admission.admit(org=org):
            order.append(f"{org}{i}")
            await asyncio.sleep(0.005)

    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    tasks = [asyncio.ensure_future(one("b", i)) for i in range(5)]
    await asyncio.sleep(0)
    tasks += [asyncio.ensure_future(one("a", i)) for i in range(2)]
    await asyncio.sleep(0)
    assert admission.waiting == 7
    release.set()
    await asyncio.gather(holder, *tasks)
    assert order == ["b0", "a0", "b1", "a1", "b2", "b3", "b4"]
    assert admission.waiting == 0 and admission.in_flight == 0


async def test_one_org_cannot_fill_the_whole_line() -> None:
    admission = Admission(limit=1, max_queued=4)
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    waiters = [asyncio.ensure_future(holding_as(admission, release, "b")) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(ServiceUnavailable):  # B already holds half the line
        async with admission.admit(org="b"):
            pass
    waiters.append(asyncio.ensure_future(holding_as(admission, release, "a")))  # A still gets in line
    await asyncio.sleep(0)
    assert admission.waiting == 3
    release.set()
    await asyncio.gather(holder, *waiters)
    assert admission.waiting == 0 and admission.in_flight == 0


async def holding_as(admission: Admission, release: asyncio.Event, org: str) -> None:
    async with admission.admit(org=org):
        await release.wait()


async def test_a_refusal_is_held_but_never_past_the_callers_deadline() -> None:
    admission = Admission(limit=1, max_queued=0, hold_ms=150)
    release = asyncio.Event()
    holder = asyncio.ensure_future(holding(admission, release))
    await asyncio.sleep(0)
    for caller_left_ms, least, most in ((None, 140, 400), (60, 50, 140)):
        started = time.monotonic()
        with pytest.raises(ServiceUnavailable) as refused:
            async with admission.admit(caller_left_ms=caller_left_ms):
                pass
        took_ms = (time.monotonic() - started) * 1000
        assert refused.value.details["reason"] == "queue_full" and least <= took_ms < most
    release.set()
    await holder


async def test_requests_let_in_at_the_edge_hold_their_place_until_they_reach_the_line() -> None:
    # 1 slot + a line of 2: three requests let in together (their bodies still being read) fill it,
    # so the fourth is refused at the edge rather than parsed, authenticated and then refused.
    admission = Admission(limit=1, max_queued=2)
    release = asyncio.Event()

    async def let_in(reached: asyncio.Event, go: asyncio.Event) -> None:
        with admission.arrive():
            await go.wait()  # reading and parsing the body
            async with admission.admit():
                reached.set()
                await release.wait()

    go = [asyncio.Event() for _ in range(3)]
    reached = [asyncio.Event() for _ in range(3)]
    assert not admission.full()
    tasks = []
    for i in range(3):
        tasks.append(asyncio.ensure_future(let_in(reached[i], go[i])))
        await asyncio.sleep(0)
    assert admission.arriving == 3 and admission.in_flight == 0 and admission.full()
    go[0].set()
    await reached[0].wait()
    assert admission.arriving == 2 and admission.in_flight == 1 and admission.full()  # its place moved to the slot
    go[1].set()
    await asyncio.sleep(0.01)
    assert admission.arriving == 1 and admission.waiting == 1 and admission.full()
    tasks[2].cancel()  # a request that ends before the line (a 400, a client gone) gives its place back
    await asyncio.gather(tasks[2], return_exceptions=True)
    assert admission.arriving == 0 and not admission.full()
    release.set()
    await asyncio.gather(*tasks[:2])
    assert admission.in_flight == 0 and admission.waiting == 0 and admission.arriving == 0


async def test_a_place_taken_over_by_the_line_is_not_given_back_twice() -> None:
    admission = Admission(limit=1, max_queued=2)
    with admission.arrive() as ticket:
        async with admission.admit():
            assert admission.arriving == 0 and admission.in_flight == 1
        ticket.leave()
    assert admission.arriving == 0 and admission.in_flight == 0

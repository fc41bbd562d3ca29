"""How the assembly waits for its branches: own timeouts, late answers used for free, abandon vs cancel."""

from __future__ import annotations

import asyncio
import time

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from service.assembly.branches import BranchTask, BranchTimedOut, EarlyReads, SlowPath, settle
from service.assembly.hot import RedisCircuit


async def sleeper(ms: float, value: str = "v") -> str:
    await asyncio.sleep(ms / 1000)
    return value


async def test_an_overdue_branch_is_used_while_another_is_still_within_its_timeout() -> None:
    hot = BranchTask.start("hot", 20, lambda: sleeper(60, "hot"))
    cold = BranchTask.start("cold", 300, lambda: sleeper(120, "cold"))
    started = time.perf_counter()
    await settle((hot, cold))
    waited = (time.perf_counter() - started) * 1000
    assert hot.result().outcome == "ok" and hot.result().value == "hot"
    assert 55 <= hot.result().ms < 120 and "after its 20 ms timeout" in (hot.result().detail or "")
    assert cold.result().outcome == "ok" and cold.result().detail is None
    assert waited < 250  # no longer than the slowest branch that answered in time


async def test_a_branch_is_waited_for_alone_only_up_to_its_own_timeout() -> None:
    hot = BranchTask.start("hot", 30, lambda: sleeper(2000, "hot"))
    cold = BranchTask.start("cold", 300, lambda: sleeper(5, "cold"))
    started = time.perf_counter()
    await settle((hot, cold))
    waited = (time.perf_counter() - started) * 1000
    assert cold.result().outcome == "ok"
    run = hot.result()
    assert run.outcome == "timeout" and run.value is None and "within 30 ms" in (run.detail or "")
    assert 25 <= waited < 300 and 25 <= run.ms < 300
    # Abandoned, not cancelled: its own inner deadlines end it (see the module docstring) — even by
    # the orchestrator's clean-up, which cancels only branches that were never settled.
    hot.cancel()
    await asyncio.sleep(0)
    assert hot.task is not None and not hot.task.cancelled() and not hot.task.done()
    hot.task.cancel()


async def test_every_branch_overdue_ends_the_wait_at_the_latest_timeout() -> None:
    hot = BranchTask.start("hot", 20, lambda: sleeper(2000))
    cold = BranchTask.start("cold", 80, lambda: sleeper(2000))
    started = time.perf_counter()
    await settle((hot, cold))
    waited = (time.perf_counter() - started) * 1000
    assert [b.result().outcome for b in (hot, cold)] == ["timeout", "timeout"]
    assert 75 <= waited < 400
    for b in (hot, cold):
        assert b.task is not None and not b.task.done()
        b.task.cancel()


async def test_failures_and_inner_timeouts_are_recorded_and_redis_errors_open_the_circuit() -> None:
    circuit = RedisCircuit(retry_s=30)

    async def redis_down() -> str:
        raise RedisConnectionError("refused")

    async def gave_up() -> str:
        raise BranchTimedOut("lexical: timed out; semantic: timed out")

    hot = BranchTask.start("hot", 50, redis_down, circuit)
    cold = BranchTask.start("cold", 50, gave_up)
    skipped = BranchTask[str].skipped("directive", "disabled by the request")
    none_left = BranchTask.start("directive", 0, lambda: sleeper(1))
    await settle((hot, cold, skipped, none_left))
    assert hot.result().outcome == "error" and "refused" in (hot.result().detail or "")
    assert not circuit.available()
    assert cold.result().outcome == "timeout" and "lexical: timed out" in (cold.result().detail or "")
    assert skipped.result().outcome == "skipped" and skipped.result().detail == "disabled by the request"
    assert none_left.result().outcome == "skipped" and none_left.result().ms == 0.0


async def test_a_read_sent_while_the_request_waited_in_line_is_timed_from_the_assembly() -> None:
    early = EarlyReads()
    early.start("hot", lambda: sleeper(20, "hot"))
    await asyncio.sleep(0.06)  # in line for admission meanwhile; the read is done
    read = early.get("hot")
    assert read is not None
    hot = BranchTask.adopt("hot", 5, read)
    cold = BranchTask.start("cold", 200, lambda: sleeper(10, "cold"))
    await settle((hot, cold))
    run = hot.result()
    assert run.outcome == "ok" and run.value == "hot"
    # The assembly did not wait for it: 0 ms of its own 5, and the detail says where the time went.
    assert run.ms < 5 and "read while the request waited in line" in (run.detail or "")
    waited = float((run.detail or "").rsplit("(", 1)[1].split(" ms")[0])
    assert 55 <= waited < 1000
    early.drop()
    assert read.task.done() and not read.task.cancelled()


async def test_a_read_still_running_when_adopted_gets_the_branch_timeout_from_then() -> None:
    early = EarlyReads()
    early.start("hot", lambda: sleeper(2000, "hot"))
    await asyncio.sleep(0.03)
    read = early.get("hot")
    assert read is not None
    hot = BranchTask.adopt("hot", 40, read)
    started = time.perf_counter()
    await settle((hot,))
    waited = (time.perf_counter() - started) * 1000
    assert hot.result().outcome == "timeout" and 35 <= waited < 400
    assert BranchTask.adopt("hot", 0, read).result().outcome == "skipped"  # no time left: not taken over
    read.task.cancel()


async def test_reads_no_branch_took_are_cancelled_when_the_request_ends() -> None:
    # Refused in line (503), failed or gone before its assembly started: the reads it sent stop.
    early = EarlyReads()
    early.start("directive", lambda: sleeper(2000, "directive"))
    early.start("hot", lambda: sleeper(2000, "hot"))
    directive, hot = early.get("directive"), early.get("hot")
    assert directive is not None and hot is not None
    taken = BranchTask.adopt("directive", 1000, directive)
    early.drop()
    await asyncio.sleep(0)
    assert hot.task.cancelled()
    assert not directive.task.done()  # a branch owns it: settle() decides (abandon, not cancel)
    taken.cancel()
    await asyncio.sleep(0)
    assert directive.task.cancelled()


async def test_the_request_going_away_cancels_its_branches() -> None:
    hot = BranchTask.start("hot", 1000, lambda: sleeper(2000))
    cold = BranchTask.start("cold", 1000, lambda: sleeper(2000))
    waiter = asyncio.ensure_future(settle((hot, cold)))
    await asyncio.sleep(0.02)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.sleep(0)
    assert hot.task is not None and cold.task is not None
    assert hot.task.cancelled() and cold.task.cancelled()


async def test_settle_leaves_no_reference_cycles() -> None:
    # Cyclic garbage from every assembly fills the old generation, whose full collections stopped the
    # service's event loop for ~100 ms every few seconds under load (a closure that re-armed a timer
    # with itself did exactly that).
    import gc

    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            branches = (BranchTask.start("directive", 50, lambda: sleeper(1)),
                        BranchTask.start("hot", 50, lambda: sleeper(3)),
                        BranchTask.start("cold", 8, lambda: sleeper(30)))  # the timer ends the wait
            await settle(branches)
            assert [b.result().outcome for b in branches] == ["ok", "ok", "timeout"]
        del branches
        await asyncio.sleep(0.05)  # the abandoned branches finish
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [o for o in gc.garbage if type(o).__module__ == "service.assembly.branches"]
        assert ours == [], f"{len(ours)} of settle's objects in reference cycles"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_a_read_that_takes_its_slow_path_is_waited_for_up_to_its_slow_timeout() -> None:
    """A hot set that missed Redis and is read from Postgres (its slow path) gets the wall, not the
    cache read's short timeout; a read that stays on the cache path keeps the short one."""
    async def miss(slow: SlowPath, ms: float) -> str:
        await asyncio.sleep(0.002)  # the cache answered: not there
        slow.take()
        return await sleeper(ms, "from postgres")

    early = EarlyReads()
    slow = SlowPath()
    early.start("hot", lambda: miss(slow, 60), slow=slow)
    hot = BranchTask.adopt("hot", 15, early.reads["hot"], slow_timeout_ms=200)
    cold = BranchTask.start("cold", 200, lambda: sleeper(5, "cold"))
    await settle((hot, cold))
    run = hot.result()
    assert run.outcome == "ok" and run.value == "from postgres" and 55 <= run.ms < 200
    assert "read from Postgres" in (run.detail or "") and "up to 200" in (run.detail or "")

    early = EarlyReads()
    stuck = SlowPath()
    early.start("hot", lambda: sleeper(2000), slow=stuck)  # a cache read that never answers
    hot = BranchTask.adopt("hot", 15, early.reads["hot"], slow_timeout_ms=200)
    cold = BranchTask.start("cold", 200, lambda: sleeper(5, "cold"))
    started = time.perf_counter()
    await settle((hot, cold))
    assert hot.result().outcome == "timeout" and (time.perf_counter() - started) * 1000 < 150
    early.drop()
    hot_task = early.reads["hot"].task
    hot_task.cancel()

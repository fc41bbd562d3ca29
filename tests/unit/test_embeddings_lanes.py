"""Embedding lanes: orgs take turns, bulk sub-batches wait for query embeddings, nothing leaks."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast
from uuid import UUID, uuid4

import numpy as np
import numpy.typing as npt
import pytest

from service.db import Database
from service.embeddings.lanes import BulkCapable, EmbeddingLanes, FairGate
from service.embeddings.local import QUERY_THREADS
from service.retrieval import RetrievalEngine
from service.settings import EmbeddingSettings, RetrievalSettings


async def test_waiters_are_served_one_org_at_a_time_in_turn() -> None:
    gate = FairGate(1)
    order: list[str] = []
    release = asyncio.Event()

    async def one(org: str, name: str) -> None:
        async with gate.hold(org):
            order.append(name)
            await release.wait()

    holder = asyncio.ensure_future(one("a", "a0"))
    await asyncio.sleep(0)
    tasks = [asyncio.ensure_future(one("a", f"a{i}")) for i in range(1, 4)]  # org a queues three first
    await asyncio.sleep(0)
    tasks += [asyncio.ensure_future(one("b", "b1")), asyncio.ensure_future(one("c", "c1"))]
    await asyncio.sleep(0)
    assert gate.load("a") == 4 and gate.load() == 6
    release.set()
    await asyncio.gather(holder, *tasks)
    # b and c are served between a's, not after all of them.
    assert order == ["a0", "b1", "a1", "c1", "a2", "a3"]
    assert gate.active == 0 and gate.load() == 0


async def test_a_cancelled_waiter_leaves_and_a_handed_turn_passes_on() -> None:
    gate = FairGate(1)
    release = asyncio.Event()

    async def hold(org: str) -> None:
        async with gate.hold(org):
            await release.wait()

    holder = asyncio.ensure_future(hold("a"))
    await asyncio.sleep(0)
    gone = asyncio.ensure_future(hold("b"))
    handed = asyncio.ensure_future(hold("c"))
    last = asyncio.ensure_future(hold("d"))
    await asyncio.sleep(0)
    gone.cancel()  # waiting: just leaves
    with pytest.raises(asyncio.CancelledError):
        await gone
    release.set()
    await asyncio.sleep(0)  # the holder hands its turn to c ...
    handed.cancel()  # ... cancelled before it runs: d gets it
    with pytest.raises(asyncio.CancelledError):
        await handed
    await asyncio.wait_for(asyncio.gather(holder, last), 1)
    assert gate.active == 0 and gate.load() == 0 and await gate.wait_idle(0)


class _Recorder:
    """An embedder that records which lane ran what, and holds query calls until told."""

    name = "recorder"
    dim = 4

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.query_release = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(f"query:{texts[0]}")
        await self.query_release.wait()
        return np.ones((len(texts), self.dim), dtype=np.float32)

    async def embed_bulk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(f"bulk:{texts[0]}")
        await asyncio.sleep(0.001)
        return np.full((len(texts), self.dim), float(len(self.calls)), dtype=np.float32)

    async def aclose(self) -> None:
        pass


async def test_bulk_is_cut_into_turns_that_wait_for_queries_and_alternate_between_orgs() -> None:
    embedder = _Recorder()
    assert isinstance(embedder, BulkCapable)
    lanes = EmbeddingLanes(embedder, EmbeddingSettings(bulk_batch=2, bulk_yield_ms=5000))
    a, b = uuid4(), uuid4()
    query = asyncio.ensure_future(lanes.embed_query(a, ["q"]))
    await asyncio.sleep(0)
    bulk_a = asyncio.ensure_future(lanes.embed_bulk(a, [f"a{i}" for i in range(6)]))
    bulk_b = asyncio.ensure_future(lanes.embed_bulk(b, [f"b{i}" for i in range(4)]))
    await asyncio.sleep(0.05)
    assert embedder.calls == ["query:q"]  # the bulk turns wait for the query embedding
    embedder.query_release.set()
    out_a, out_b = await asyncio.gather(bulk_a, bulk_b)
    await query
    assert embedder.calls == ["query:q", "bulk:a0", "bulk:b0", "bulk:a2", "bulk:b2", "bulk:a4"]
    assert out_a.shape == (6, 4) and out_b.shape == (4, 4)
    assert out_a[0, 0] == out_a[1, 0] == 2.0 and out_b[3, 0] == 5.0  # rows in input order per turn


async def test_a_bulk_turn_waits_for_queries_at_most_the_yield_time() -> None:
    embedder = _Recorder()
    lanes = EmbeddingLanes(embedder, EmbeddingSettings(bulk_batch=8, bulk_yield_ms=30))
    org: UUID = uuid4()
    query = asyncio.ensure_future(lanes.embed_query(org, ["stuck"]))
    await asyncio.sleep(0)
    out = await asyncio.wait_for(lanes.embed_bulk(org, ["x"]), 1)  # the query never ends: bulk goes on
    assert out.shape == (1, 4) and embedder.calls == ["query:stuck", "bulk:x"]
    embedder.query_release.set()
    await query


async def test_the_query_embedder_counts_as_busy_per_org() -> None:
    embedder = _Recorder()
    lanes = EmbeddingLanes(embedder, EmbeddingSettings(query_concurrency=2))
    engine = RetrievalEngine(cast(Database, None), embedder, RetrievalSettings(embedder_max_in_flight=2),
                             max_limit=10, lanes=lanes)
    engine.queries.latency.observe(10_000.0)  # recent embeddings were slow: a full lane is then busy
    a, b = uuid4(), uuid4()
    calls = [asyncio.ensure_future(lanes.embed_query(a, [f"long query {i}"])) for i in range(2)]
    await asyncio.sleep(0)
    assert engine.embedder_busy(a)  # org a holds both slots ...
    assert not engine.embedder_busy(b)  # ... but org b, with none in flight, still gets one
    calls.append(asyncio.ensure_future(lanes.embed_query(b, ["short"])))
    await asyncio.sleep(0)
    assert engine.embedder_busy(b)  # now b has one while the lane is full
    # A lane of two slots, one org at most one of them: b's query runs beside a's first at once, not
    # behind all of a's.
    assert embedder.calls == ["query:long query 0", "query:short"]
    embedder.query_release.set()
    await asyncio.gather(*calls)
    assert embedder.calls == ["query:long query 0", "query:short", "query:long query 1"]
    assert not engine.embedder_busy(a) and not engine.embedder_busy(b)


async def test_the_local_lane_runs_two_of_one_orgs_queries_and_keeps_a_third_slot() -> None:
    embedder = _Recorder()
    lanes = EmbeddingLanes(embedder, EmbeddingSettings())
    assert (lanes.query.capacity, lanes.query.per_key) == (QUERY_THREADS, QUERY_THREADS - 1) == (3, 2)
    a, b = uuid4(), uuid4()
    calls = [asyncio.ensure_future(lanes.embed_query(a, [f"a{i}"])) for i in range(3)]
    await asyncio.sleep(0)
    calls.append(asyncio.ensure_future(lanes.embed_query(b, ["b"])))
    await asyncio.sleep(0)
    assert embedder.calls == ["query:a0", "query:a1", "query:b"]  # a's third waits; b's does not
    embedder.query_release.set()
    await asyncio.gather(*calls)
    assert embedder.calls == ["query:a0", "query:a1", "query:b", "query:a2"]


async def test_no_org_holds_every_slot() -> None:
    """Org a's long queries hold at most ``per_key`` of the slots: org b's query starts at once beside
    them instead of waiting; a's next one waits for one of a's own, not for b's."""
    gate = FairGate(2, per_key=1)
    release_a = asyncio.Event()
    started: list[str] = []

    async def one(org: str, name: str, release: asyncio.Event) -> None:
        async with gate.hold(org):
            started.append(name)
            await release.wait()

    a1 = asyncio.ensure_future(one("a", "a1", release_a))
    a2 = asyncio.ensure_future(one("a", "a2", release_a))
    await asyncio.sleep(0)
    assert started == ["a1"] and gate.active == 1  # a2 waits although a slot is free
    b = asyncio.ensure_future(one("b", "b1", asyncio.Event()))
    await asyncio.sleep(0)
    assert started == ["a1", "b1"] and gate.active == 2
    release_a.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert started == ["a1", "b1", "a2"]
    await asyncio.wait_for(asyncio.gather(a1, a2), 1)
    b.cancel()
    with pytest.raises(asyncio.CancelledError):
        await b
    assert gate.active == 0 and gate.load() == 0


class _Starved(_Recorder):
    """A bulk thread that gets no CPU until told (a foreground keeping the cores busy); the query
    lane runs at once. Each row's first value says which lane embedded it (1 bulk, 2 query)."""

    def __init__(self) -> None:
        super().__init__()
        self.query_release.set()
        self.bulk_release = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(f"query:{texts[0]}")
        await asyncio.sleep(0.002)
        return np.full((len(texts), self.dim), 2.0, dtype=np.float32)

    async def embed_bulk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(f"bulk:{','.join(texts)}")
        await self.bulk_release.wait()
        return np.full((len(texts), self.dim), 1.0, dtype=np.float32)


async def test_a_starved_bulk_thread_gets_a_floor_on_the_query_lane_at_most_its_share() -> None:
    embedder = _Starved()
    lanes = EmbeddingLanes(embedder, EmbeddingSettings(bulk_batch=16, bulk_min_share=0.5, bulk_starved_ms=30))
    org = uuid4()
    loop = asyncio.get_running_loop()
    started = loop.time()
    write = asyncio.ensure_future(lanes.embed_bulk(org, [f"t{i}" for i in range(10)]))
    await asyncio.sleep(0.015)
    assert embedder.calls == ["bulk:t0,t1,t2,t3"]  # a small piece on the low-priority thread first
    # The bulk thread never gets the CPU: after 30 ms the floor takes the texts no piece has taken
    # (from the end), then the starved piece's own, one at a time, and the write completes.
    out = await asyncio.wait_for(write, 2)
    took = loop.time() - started
    assert embedder.calls == ["bulk:t0,t1,t2,t3", *(f"query:t{i}" for i in (9, 8, 7, 6, 5, 4, 0, 1, 2, 3))]
    assert (out[:, 0] == 2.0).all() and out.shape == (10, 4)
    # Half the query lane's time at most: ten texts of ~2 ms, each but the last followed by as long a pause.
    assert took >= 0.03 + 19 * 0.002 * 0.9
    # Nothing leaks: the gates are free, and a query goes straight through.
    assert lanes.query.load() == 0 and lanes.bulk.load() == 0
    assert (await asyncio.wait_for(lanes.embed_query(org, ["q"]), 1)).shape == (1, 4)
    embedder.bulk_release.set()


async def test_the_floor_stays_off_while_the_bulk_thread_keeps_up_and_when_disabled() -> None:
    embedder = _Starved()
    lanes = EmbeddingLanes(embedder, EmbeddingSettings(bulk_batch=16, bulk_min_share=0.5, bulk_starved_ms=30))
    embedder.bulk_release.set()  # the bulk thread gets its CPU
    out = await lanes.embed_bulk(uuid4(), [f"t{i}" for i in range(10)])
    assert embedder.calls == ["bulk:t0,t1,t2,t3", "bulk:t4,t5,t6,t7", "bulk:t8,t9"]
    assert (out[:, 0] == 1.0).all()
    off = _Starved()
    no_floor = EmbeddingLanes(off, EmbeddingSettings(bulk_batch=16, bulk_min_share=0.0, bulk_starved_ms=1))
    write = asyncio.ensure_future(no_floor.embed_bulk(uuid4(), [f"t{i}" for i in range(10)]))
    await asyncio.sleep(0.05)
    assert off.calls == ["bulk:t0,t1,t2,t3,t4,t5,t6,t7,t8,t9"]  # no floor: one call, waiting for the cores
    off.bulk_release.set()
    assert (await write).shape == (10, 4)

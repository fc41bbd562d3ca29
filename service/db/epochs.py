"""Per-org cache epochs: which Redis entries (directive envelopes, hot sets) an instance may trust.

A directive PUT or a memory write commits to Postgres and then refreshes or invalidates Redis. If
Redis cannot be reached then and later comes back with its old data, the old entry would be served
until its TTL (an hour for directives) by every instance. So a writer whose Redis step failed bumps
its org's epoch in Postgres (``cache_epochs``, migration 0007); every entry is stamped with the
epoch it was built under, read *before* the Postgres read or write it caches; an entry whose stamp
is not the org's current epoch is a miss, rebuilt from Postgres and stamped anew.

Cost on the read path: an instance keeps each org's epoch in memory and re-reads it from Postgres
once it is ``check_s`` old — in the background from half that age on, so an org in steady use never
waits for it; an idle org's first read after ``check_s`` waits one small query (bounded by
``timeout_s``). The bound this gives: once Redis answers again, an entry that misses a write is
served at most ``check_s`` (plus one epoch read, if Postgres is slow) after the writer recorded the
bump; the writer's own instance never serves it. If Postgres cannot be read, the last known epoch
is used and requests do not wait for the read in flight (nothing can be committed there meanwhile
by this instance either); if the bump itself cannot be written, the writer's instance trusts no
cached entry of the org and retries the bump in the background until it lands.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar
from uuid import UUID

import structlog
from prometheus_client import Counter

from service.db.tenant import Database

log = structlog.get_logger(__name__)
T = TypeVar("T")

EPOCH_READS = Counter("pgcontext_cache_epoch_reads", "Reads of an org's cache epoch from Postgres, by outcome",
                      ["outcome"])
EPOCH_BUMPS = Counter("pgcontext_cache_epoch_bumps",
                      "Cache epochs bumped after a failed Redis write or invalidation, by outcome", ["outcome"])

MAX_ORGS = 10_000
"""Epochs kept in memory; past it, the oldest readings are dropped (they are simply read again)."""


class CacheEpochs:
    def __init__(self, db: Database, *, check_s: float = 1.0, timeout_s: float = 0.5,
                 retry_s: float = 1.0) -> None:
        self.db = db
        self.check_s = check_s
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._known: dict[UUID, tuple[int, float]] = {}
        """org -> (epoch, time.monotonic() of the reading)."""
        self._reads: dict[UUID, asyncio.Task[int]] = {}
        self._unrecorded: dict[UUID, asyncio.Task[None]] = {}
        """Orgs whose failed cache write is not yet recorded in Postgres (the bump is being retried)."""

    def fresh(self, org_id: UUID) -> bool:
        """Whether :meth:`current` answers from memory now, without waiting for Postgres."""
        if org_id in self._unrecorded:
            return True
        known = self._known.get(org_id)
        return known is not None and (time.monotonic() - known[1] < self.check_s or org_id in self._reads)

    async def current(self, org_id: UUID) -> int | None:
        """The org's epoch, as read at most ``check_s`` ago (see the module docstring); None: trust
        no cached entry of the org (a failed cache write is not recorded yet, or the epoch has never
        been read and cannot be)."""
        if org_id in self._unrecorded:
            return None
        known = self._known.get(org_id)
        if known is not None:
            age = time.monotonic() - known[1]
            if age < self.check_s / 2:
                return known[0]
            reading = org_id in self._reads
            self._read(org_id)  # refresh ahead: nobody waits for it
            if age < self.check_s or reading:
                # Fresh enough, or a read is already under way and has not answered (Postgres slow
                # or down): requests do not pile up behind it, the last reading stands meanwhile.
                return known[0]
        read = self._read(org_id)
        done, _ = await asyncio.wait({read}, timeout=self.timeout_s)
        if done and not read.cancelled() and read.exception() is None:
            return read.result()
        log.warning("cache_epoch_unreadable", org_id=str(org_id), known=None if known is None else known[0])
        return None if known is None else known[0]

    async def along(self, org_id: UUID, read: Awaitable[T]) -> tuple[int | None, T]:
        """The org's epoch (:meth:`current`) and ``read``'s result. When the epoch answers from memory,
        one after the other: no task, so no extra trip through the event loop, which behind a busy loop
        cost a cache read ~12 ms at the median. Otherwise together: an org's first read after a start
        waits for its epoch from Postgres, not for that and then the cache."""
        if self.fresh(org_id):
            return await self.current(org_id), await read
        epoch, value = await asyncio.gather(self.current(org_id), read)
        return epoch, value

    def _read(self, org_id: UUID) -> asyncio.Task[int]:
        read = self._reads.get(org_id)
        if read is None:
            read = asyncio.ensure_future(self._fetch(org_id))
            self._reads[org_id] = read
            read.add_done_callback(lambda task: self._read_done(org_id, task))
        return read

    async def _fetch(self, org_id: UUID) -> int:
        timeout_ms = max(1, int(self.timeout_s * 1000))
        async with self.db.tenant(org_id, timeout_ms=timeout_ms, readonly=True) as tx:
            return int(await tx.fetchval("cache.epoch", org_id))

    def _read_done(self, org_id: UUID, task: asyncio.Task[int]) -> None:
        if self._reads.get(org_id) is task:
            del self._reads[org_id]
        if task.cancelled() or task.exception() is not None:
            EPOCH_READS.labels("failed").inc()
            return
        EPOCH_READS.labels("ok").inc()
        self._remember(org_id, task.result())

    def _remember(self, org_id: UUID, epoch: int) -> None:
        previous = self._known.get(org_id)
        if previous is not None and previous[0] > epoch:
            epoch = previous[0]  # epochs only grow: a read that started before a bump must not undo it
        if len(self._known) >= MAX_ORGS and org_id not in self._known:
            oldest = sorted(self._known.items(), key=lambda item: item[1][1])[: MAX_ORGS // 10]
            for stale, _ in oldest:
                del self._known[stale]
        self._known[org_id] = (epoch, time.monotonic())

    async def bump(self, org_id: UUID) -> None:
        """A Redis write or invalidation of the org failed after its Postgres commit: record it, so no
        instance trusts the org's older cached entries. Never raises; retried in the background."""
        if org_id in self._unrecorded:
            return  # already being retried: that bump covers this failure too
        try:
            await self._record(org_id)
        except Exception as exc:
            EPOCH_BUMPS.labels("failed").inc()
            log.warning("cache_epoch_bump_failed", org_id=str(org_id), error=repr(exc)[:300])
            retry = asyncio.ensure_future(self._retry(org_id))
            self._unrecorded[org_id] = retry
            retry.add_done_callback(lambda _: self._unrecorded.pop(org_id, None))

    async def _record(self, org_id: UUID) -> None:
        async with self.db.tenant(org_id) as tx:
            epoch = int(await tx.fetchval("cache.bump_epoch", org_id))
        self._remember(org_id, epoch)
        EPOCH_BUMPS.labels("ok").inc()
        log.info("cache_epoch_bumped", org_id=str(org_id), epoch=epoch)

    async def _retry(self, org_id: UUID) -> None:
        while True:
            await asyncio.sleep(self.retry_s)
            try:
                await self._record(org_id)
                return
            except Exception as exc:
                EPOCH_BUMPS.labels("failed").inc()
                log.warning("cache_epoch_bump_failed", org_id=str(org_id), error=repr(exc)[:300])

    async def aclose(self) -> None:
        tasks = [*self._reads.values(), *self._unrecorded.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

"""What callers and assemblies teach us about memories: feedback (usefulness) and access statistics.

**Feedback.** ``usefulness`` lives in [-1, 1] (0 = no signal). Each helpful / unhelpful report
moves it toward +1 / -1 by an exponential moving average with weight ``alpha``
(``u <- (1 - alpha) * u + alpha * target``), so it stays bounded, recent feedback counts most and
old feedback decays geometrically. Several reports for one id in one request are applied in
order, in closed form (one UPDATE per request). Ids that are not the caller org's memories (absent,
or another org's: row-level security hides them) come back in ``not_found`` — both look the same.

**Access statistics.** Memories packed into a context get ``access_count`` + 1 and
``last_accessed_at`` = now, but not on the request path: :class:`AccessRecorder` aggregates in
process and writes one batched UPDATE per org every ``access_flush_s`` seconds. A row update per
packed memory per request would cost Postgres more than the assembly itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from datetime import UTC, datetime
from uuid import UUID

import structlog

from service.assembly.types import FeedbackIn, FeedbackOut, FeedbackUpdated
from service.db import Database
from service.errors import BadRequest
from service.memories import idempotency
from service.runtime import Services

log = structlog.get_logger(__name__)

MAX_FEEDBACK_ITEMS = 256
MAX_PENDING_ACCESSES = 100_000
"""Distinct (org, memory) pairs held between flushes; beyond it new accesses are counted as lost."""


def feedback_events(body: FeedbackIn) -> list[tuple[UUID, bool]]:
    """(id, helpful) in request order, from either request form."""
    if (body.items is None) == (body.memory_ids is None):
        raise BadRequest("send either items or memory_ids (with helpful)", code="validation_error")
    if body.items is not None:
        if body.helpful is not None:
            raise BadRequest("helpful goes inside each item when items are sent", code="validation_error")
        events = [(item.id, item.helpful) for item in body.items]
    else:
        assert body.memory_ids is not None
        if body.helpful is None:
            raise BadRequest("memory_ids needs helpful: true or false", code="validation_error")
        events = [(ident, body.helpful) for ident in body.memory_ids]
    if not events:
        raise BadRequest("no feedback given", code="validation_error")
    if len(events) > MAX_FEEDBACK_ITEMS:
        raise BadRequest(f"at most {MAX_FEEDBACK_ITEMS} feedback items per request", code="validation_error")
    return events


def ema_terms(targets: list[float], alpha: float) -> tuple[float, float]:
    """(decay, add) such that applying the EMA once per target equals ``decay * u + add``."""
    decay, add = 1.0, 0.0
    for target in targets:
        decay *= 1.0 - alpha
        add = (1.0 - alpha) * add + alpha * target
    return decay, add


async def apply_feedback(services: Services, org_id: UUID, body: FeedbackIn, alpha: float,
                         idempotency_key: str | None = None) -> tuple[FeedbackOut, bool]:
    """Move the reported memories' usefulness; returns (the answer, replayed: the first answer under
    ``idempotency_key``, nothing moved again)."""
    idempotency.check_key(idempotency_key)
    key = None
    if idempotency_key is not None:
        key = idempotency_key, idempotency.request_hash(body, "memories/feedback")
        first = await idempotency.earlier(services, org_id, *key, FeedbackOut)
        if first is not None:
            return first, True
    per_id: dict[UUID, list[float]] = {}
    for ident, helpful in feedback_events(body):
        per_id.setdefault(ident, []).append(1.0 if helpful else -1.0)
    ids = list(per_id)
    terms = [ema_terms(per_id[i], alpha) for i in ids]
    async with services.db.tenant(org_id) as tx:
        if key is not None:
            first = await idempotency.claim(tx, *key, FeedbackOut)
            if first is not None:
                return first, True
        rows = await tx.fetch("assembly.feedback", org_id, ids, [t[0] for t in terms], [t[1] for t in terms],
                              [len(per_id[i]) for i in ids])
        found = {r["id"] for r in rows}
        out = FeedbackOut(
            updated=[FeedbackUpdated(id=r["id"], usefulness=round(float(r["usefulness"]), 6),
                                     feedback_count=r["feedback_count"]) for r in rows],
            not_found=[i for i in ids if i not in found],
        )
        if key is not None:
            await idempotency.remember(tx, key[0], out)
    if rows:
        # Hot sets cache usefulness: the agents whose memories changed get fresh ones.
        await services.memories_changed(org_id, {r["agent_id"] for r in rows})
    return out, False


class AccessRecorder:
    """Batches access statistics in process; a background task writes them every ``interval_s``."""

    def __init__(self, db: Database, interval_s: float) -> None:
        self.db = db
        self.interval_s = interval_s
        self._pending: dict[UUID, dict[UUID, tuple[int, datetime]]] = defaultdict(dict)
        self._size = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.lost = 0

    def record(self, org_id: UUID, memory_ids: list[UUID]) -> None:
        """Note one access of each id (cheap, synchronous; never raises)."""
        if not memory_ids:
            return
        now = datetime.now(UTC)
        org = self._pending[org_id]
        for ident in memory_ids:
            seen = org.get(ident)
            if seen is None:
                if self._size >= MAX_PENDING_ACCESSES:
                    self.lost += 1
                    continue
                self._size += 1
                org[ident] = (1, now)
            else:
                org[ident] = (seen[0] + 1, now)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        # Stopping ends the wait early, never a flush half-way: what was swapped out gets written.
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            await self.flush()

    async def flush(self) -> None:
        pending, self._pending, self._size = self._pending, defaultdict(dict), 0
        for org_id, items in pending.items():
            # Sorted: flushes of several instances lock the same rows in the same order (no deadlock).
            ids = sorted(items)
            try:
                async with self.db.tenant(org_id) as tx:
                    await tx.execute("assembly.record_access", org_id, ids, [items[i][0] for i in ids],
                                     [items[i][1] for i in ids])
            except Exception as exc:  # statistics are best effort: never let them kill the flusher
                log.warning("access_stats_flush_failed", org_id=str(org_id), rows=len(ids), error=repr(exc)[:200])

    async def aclose(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        await self.flush()

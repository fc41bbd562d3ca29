"""Optional model consolidation: a worker that decides queued cases after their writes committed.

A write whose text came close to a current memory without the rules merging it (or that reads like
an update: "now", "no longer") queues a job in the same transaction as the write (``consolidation_jobs``)
-- the write itself never waits for a model. Each service process runs one worker: it asks Postgres
which orgs have due jobs, claims a few per org (``FOR UPDATE SKIP LOCKED``: instances take disjoint
jobs; a claim holds a lease), asks the model outside any transaction, then applies the decision in
a transaction that first checks the claim is still its own (a job is decided once, however many
workers or retries). A failed call or decision is retried with exponential backoff, then marked
``failed``; the memory stays as written. Every decision is a ``consolidated`` event in the history;
merges and supersessions can be undone like a rule's merge.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from uuid import UUID

import structlog

from service.db import TenantTx
from service.memories.facts import dedup
from service.memories.facts.history import Events
from service.memories.facts.model import Candidate, ChatModel, Verdict
from service.memories.facts.patch import as_item
from service.memories.facts.write import merge_into, scope_key
from service.runtime import Services

log = structlog.get_logger(__name__)
CLAIM = 4
ORGS_PER_ROUND = 50


class Consolidator:
    def __init__(self, services: Services, model: ChatModel) -> None:
        self.services = services
        self.model = model
        self.settings = services.settings.facts
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="consolidation")

    def wake(self) -> None:
        """A write just queued a job: look now, not at the next poll."""
        self._wake.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.model.aclose()

    async def _run(self) -> None:
        while True:
            try:
                busy = await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away, say: try again later
                log.warning("consolidation_round_failed", error=repr(exc)[:300])
                busy = 0
            if not busy:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.settings.consolidation_poll_s)

    async def run_once(self) -> int:
        """One round over the orgs with due jobs; returns how many jobs it decided or retried."""
        done = 0
        for org_id in await self.services.db.due_consolidation_orgs(ORGS_PER_ROUND):
            async with self.services.db.tenant(org_id) as tx:
                jobs = await tx.fetch("facts.claim_jobs", org_id, CLAIM, self.settings.consolidation_lease_s)
            for job in jobs:
                await self._decide(org_id, job)
                done += 1
        return done

    async def _decide(self, org_id: UUID, job: Any) -> None:
        try:
            candidates = [UUID(c["id"]) for c in job["candidates"]]
            async with self.services.db.tenant(org_id, readonly=True) as tx:
                found = await tx.fetch("facts.job_memories", org_id, [job["memory_id"], *candidates])
            rows = {r["id"]: r for r in found}
            new = rows.get(job["memory_id"])
            shown = [rows[c] for c in candidates if c in rows and rows[c]["superseded_by"] is None]
            if new is None or new["superseded_by"] is not None or not shown:
                verdict = Verdict(decision="nothing", reason="the memory or its candidates changed meanwhile")
            else:
                verdict = await self.model.decide(new["text"], new["occurred_at"].isoformat(), [
                    Candidate(id=r["id"], text=r["text"], occurred_at=r["occurred_at"].isoformat()) for r in shown])
            touched = await self._apply(org_id, job, verdict)
        except Exception as exc:  # ModelError, or the database: retried later
            delay = self.settings.consolidation_retry_s * 2 ** (job["attempts"] - 1)
            async with self.services.db.tenant(org_id) as tx:
                await tx.execute("facts.retry_job", org_id, job["id"], delay, self.settings.consolidation_max_attempts,
                                 repr(exc), job["attempts"])
            log.warning("consolidation_failed", job=str(job["id"]), attempt=job["attempts"], error=repr(exc)[:300])
            return
        if touched:
            await self.services.memories_changed(org_id, touched)

    async def _apply(self, org_id: UUID, job: Any, verdict: Verdict) -> set[str | None]:
        """Apply ``verdict`` if the claim is still this worker's; returns the agents whose memories changed."""
        async with self.services.db.tenant(org_id) as tx:
            # the scopes of its memories first (sorted), then rows, as every fact path: no cycle with writes
            involved = [job["memory_id"], *([verdict.target] if verdict.target else [])]
            scopes = {scope_key(r["agent_id"]) for r in await tx.fetch("facts.job_memories", org_id, involved)}
            if scopes:
                await tx.fetchval("facts.lock_scopes", str(org_id), sorted(scopes))
            if await tx.fetchrow("facts.job_for_update", org_id, job["id"], job["attempts"]) is None:
                return set()  # decided by another worker, or reclaimed after this lease ran out
            touched, applied = await _apply_in(tx, job["memory_id"], verdict, job["candidates"])
            decision = {"decision": verdict.decision, "target": verdict.target, "reason": verdict.reason,
                        "applied": applied}
            await tx.execute("facts.finish_job", org_id, job["id"], {k: (str(v) if isinstance(v, UUID) else v)
                                                                       for k, v in decision.items()})
        return touched


async def _apply_in(tx: TenantTx, memory_id: UUID, verdict: Verdict,
                    candidates: list[dict[str, Any]]) -> tuple[set[str | None], bool]:
    events = Events()
    scores = {c["id"]: c for c in candidates}
    rows = {r["id"]: r for r in await tx.fetch("facts.job_memories", tx.org_id,
                                               [memory_id, *([verdict.target] if verdict.target else [])])}
    new, target = rows.get(memory_id), rows.get(verdict.target) if verdict.target else None
    common: dict[str, Any] = {"decision": verdict.decision, "reason": verdict.reason, "decided_by": "model",
                              "candidates": candidates}
    # Under the scope locks: what the model was shown may have changed since (deleted, or retired by a write).
    if new is None or new["superseded_by"] is not None or (
            verdict.target is not None and (target is None or target["superseded_by"] is not None)):
        events.add(memory_id, None if new is None else new["agent_id"], "consolidated", related=verdict.target,
                   **common, applied=False, note="the memories changed before the decision")
        await events.record(tx)
        return set(), False
    if verdict.decision == "merge" and target is not None:
        full = await tx.fetchrow("memories.get", tx.org_id, memory_id)
        assert full is not None
        await tx.execute("memories.delete", tx.org_id, memory_id)
        score = scores.get(str(target["id"]), {})
        found = dedup.Match(cosine=float(score.get("cosine", 0.0)), lexical=float(score.get("lexical", 0.0)),
                            reason="model", target=target["id"])
        await merge_into(tx, target["id"], as_item(full), memory_id, full["occurred_at"], found, events,
                         decided_by="model")
        last = events.rows[-1]  # the merge, recorded as the model's decision on the kept memory
        events.rows[-1] = (last[0], last[1], "consolidated", last[3], last[4], {**last[5], **common})
        events.add(memory_id, new["agent_id"], "merged", related=target["id"], into=target["id"], decided_by="model")
        await events.record(tx)
        return {new["agent_id"], target["agent_id"]}, True
    if verdict.decision == "supersede" and target is not None:
        if target["occurred_at"] > new["occurred_at"]:
            events.add(memory_id, new["agent_id"], "consolidated", related=target["id"], **common, applied=False,
                       note="the target happened after this memory: an older fact does not retire a newer one")
            await events.record(tx)
            return set(), False
        rows_retired = await tx.fetch("facts.retire", tx.org_id, [target["id"]], memory_id, new["occurred_at"])
        for row in rows_retired:
            events.add(row["id"], row["agent_id"], "superseded", related=memory_id, valid_until=row["valid_until"],
                       reason="model")
        events.add(memory_id, new["agent_id"], "consolidated", related=target["id"], **common,
                   retired=[str(target["id"])], applied=True,
                   retired_until={str(r["id"]): r["previous_valid_until"] for r in rows_retired})
        await events.record(tx)
        return {new["agent_id"], target["agent_id"]}, True
    events.add(memory_id, new["agent_id"], "consolidated", related=verdict.target, **common, applied=False)
    await events.record(tx)
    return set(), False


def start_consolidation(services: Services) -> Consolidator | None:
    """The worker, when a model endpoint is configured (``PGCONTEXT_CONSOLIDATION_API_BASE``); woken by
    every committed memory write, so a queued job is looked at at once."""
    if not (services.settings.facts.consolidation_enabled and services.settings.facts.consolidation_worker):
        return None
    worker = Consolidator(services, ChatModel(services.settings.facts))

    async def wake(_org: UUID, _agents: set[str | None]) -> None:
        worker.wake()

    services.memory_hooks.append(wake)
    worker.start()
    return worker

"""Per-org partial HNSW indexes: create them for big orgs, drop them for orgs that shrank (``pgcontext maintain``).

Why (measured in ``benchmarks/search_latency.py``, reasoning in ``docs/retrieval.md``): one global HNSW
graph plus an ``org_id`` filter has to walk past every other org's vectors; for an org holding 10% of
the table that costs tens of ms and recall even with iterative scans. A partial index
``... USING hnsw (embedding vector_cosine_ops) WHERE org_id = '<org>'`` is a graph of that org only:
the service's unchanged semantic query (``org_id = $1`` with ``plan_cache_mode = force_custom_plan``,
so the parameter is a constant the planner can prove the predicate from) walks it with no filter
loss. Small orgs do not need one: a few thousand exact distances are cheap, and the global graph
with iterative scan covers the middle.

Run by the owner role (DDL), outside transactions (``CREATE/DROP INDEX CONCURRENTLY`` so writers are
never blocked), periodically or after bulk imports. Idempotent: a second run does nothing; runs started
together (cron on every instance) take turns.

* create when an org has at least ``threshold`` memories (counted from the sharded BM25 counters,
  not a scan of ``memories``);
* drop when it falls below ``threshold * drop_ratio`` (hysteresis: an org hovering at the threshold
  does not get its index built and dropped on alternate runs);
* an INVALID index (a concurrent build that failed or was cancelled) is dropped and built again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

import asyncpg
import structlog

from service.db.queries import query

log = structlog.get_logger(__name__)

DEFAULT_THRESHOLD = 10_000
"""Memories above which an org gets its own HNSW graph (see docs/retrieval.md for the measurement)."""
DEFAULT_DROP_RATIO = 0.5
INDEX_PREFIX = "memories_hnsw_org_"
LOCK_POLL_S = 0.5


@dataclass(frozen=True, slots=True)
class Action:
    kind: Literal["create", "drop"]
    index: str
    org_id: UUID | None
    rows: int
    reason: str

    def __str__(self) -> str:
        return f"{self.kind} {self.index} ({self.reason})"


def index_name(org_id: UUID) -> str:
    """``memories_hnsw_org_<32 hex digits>``: 50 characters, under the 63-byte identifier limit."""
    return INDEX_PREFIX + org_id.hex


def org_of(index: str) -> UUID | None:
    try:
        return UUID(hex=index.removeprefix(INDEX_PREFIX)) if index.startswith(INDEX_PREFIX) else None
    except ValueError:
        return None


async def plan(conn: asyncpg.Connection, *, threshold: int = DEFAULT_THRESHOLD,
               drop_ratio: float = DEFAULT_DROP_RATIO) -> list[Action]:
    """What a run would do: drops first (invalid or shrunk), then creates, biggest org first."""
    if threshold < 1 or not 0 <= drop_ratio <= 1:
        raise ValueError("threshold must be >= 1 and drop_ratio within [0, 1]")
    keep_at = int(threshold * drop_ratio)
    sizes = {UUID(str(r["org_id"])): int(r["n"]) for r in await conn.fetch(query("maintenance.org_sizes"),
                                                                            min(keep_at, threshold))}
    existing = {r["index"]: bool(r["valid"]) for r in await conn.fetch(query("maintenance.partial_indexes"))}
    actions: list[Action] = []
    have: set[UUID] = set()
    for index, valid in existing.items():
        org = org_of(index)
        rows = sizes.get(org, 0) if org is not None else 0
        if org is None:
            continue  # not ours (a hand-made index that happens to share the prefix): leave it alone
        if not valid:
            actions.append(Action("drop", index, org, rows, "invalid (a concurrent build failed)"))
        elif rows < keep_at:
            actions.append(Action("drop", index, org, rows, f"{rows} rows < {keep_at}"))
        else:
            have.add(org)
    for org, rows in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if rows >= threshold and org not in have:
            actions.append(Action("create", index_name(org), org, rows, f"{rows} rows >= {threshold}"))
    return actions


async def apply(conn: asyncpg.Connection, actions: list[Action], *,
                maintenance_work_mem: str | None = None) -> None:
    """Run ``actions`` one by one (each ``CONCURRENTLY``, so ``conn`` must not be in a transaction)."""
    if maintenance_work_mem:
        # An HNSW build is several times faster when the graph fits in maintenance_work_mem.
        await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", maintenance_work_mem)
    for action in actions:
        name = "maintenance.drop_partial_hnsw" if action.kind == "drop" else "maintenance.create_partial_hnsw"
        args = (action.index,) if action.kind == "drop" else (action.index, action.org_id)
        ddl = await conn.fetchval(query(name), *args)
        started = time.perf_counter()
        await conn.execute(ddl)
        log.info("partial_hnsw", action=action.kind, index=action.index, rows=action.rows,
                 ms=round((time.perf_counter() - started) * 1000))


async def maintain(conn: asyncpg.Connection, *, threshold: int = DEFAULT_THRESHOLD,
                   drop_ratio: float = DEFAULT_DROP_RATIO, dry_run: bool = False,
                   maintenance_work_mem: str | None = None) -> list[Action]:
    """Plan and (unless ``dry_run``) apply; returns the actions. Runs take turns (a session advisory
    lock): a run that waited plans from what the previous one left, so it finds nothing to redo."""
    while not await conn.fetchval(query("maintenance.lock")):  # noqa: ASYNC110  # another process holds it
        await asyncio.sleep(LOCK_POLL_S)
    try:
        actions = await plan(conn, threshold=threshold, drop_ratio=drop_ratio)
        if not dry_run:
            await apply(conn, actions, maintenance_work_mem=maintenance_work_mem)
    finally:
        await conn.execute(query("maintenance.unlock"))
    return actions

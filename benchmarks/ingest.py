"""Ingest (write path) throughput: memories/s for batched writes, and where the time goes.

    python benchmarks/ingest.py [--n 5000] [--batch 64] [--corpus ../shared/data/scifact/corpus.jsonl]
                                [--dedup] [--keyed]

Writes N short realistic memories (the first sentence of each SciFact abstract) through the
service's own write path — ``service.memories.write.create`` on a ``Services`` built by
``service.app.build_services``, the local embedder, batches of 64 — and reports memories/s, batch
latency p50/p95/p99 and the share of each batch spent embedding vs in the Postgres transaction
(measured by timing proxies around ``services.embedder.embed`` and ``services.db.tenant``).

Baselines in the same run, on the same batches:
  * ``embed only``: ``services.embedder.embed`` alone (the model's ceiling);
  * ``write path, vectors given``: the same request bodies with precomputed embeddings (no model);
  * ``postgres insert only``: ``repo.insert_batch`` inside an org-scoped transaction (pure Postgres).

``--dedup``: the server-embedded path with duplicate detection off and on, alternating. ``--keyed``: the
vectors-given path with a ``key`` on every memory, and the share of its expired-value purge.

With no PGCONTEXT_DATABASE_URL / DATABASE_URL it starts embedded Postgres and Redis in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import asyncpg
import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import percentile, servers
from service.app import build_services, close_services
from service.auth import admin
from service.cli.servers import prepare_database
from service.db import Database, TenantTx
from service.embeddings import Embedder
from service.embeddings.lanes import BulkCapable, EmbeddingLanes
from service.logs import configure as configure_logs
from service.memories import repo, write
from service.memories.facts import write as facts_write
from service.memories.types import MemoryIn
from service.runtime import Endpoints, Services
from service.settings import load_settings

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "corpus.jsonl"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


def load_texts(corpus: Path, n: int) -> list[str]:
    """First sentences of abstracts (falling back to titles), 20-400 characters, cycled up to n."""
    texts: list[str] = []
    with corpus.open() as f:
        for line in f:
            doc = json.loads(line)
            first = _SENTENCE_END.split(doc.get("text") or "", maxsplit=1)[0].strip()
            text = first if 20 <= len(first) <= 400 else (doc.get("title") or "").strip()
            if text:
                texts.append(text[:400])
    if not texts:
        raise SystemExit(f"no texts in {corpus}")
    return [texts[i % len(texts)] for i in range(n)]


class TimingEmbedder:
    """Delegates to the real embedder and adds up the time spent in ``embed``."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.seconds = 0.0

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self._timed(self.inner.embed(texts))

    async def _timed(self, work: Awaitable[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        started = time.perf_counter()
        try:
            return await work
        finally:
            self.seconds += time.perf_counter() - started

    @property
    def query_threads(self) -> int:
        """The inner embedder's query threads (the query lane's width, ``EmbeddingLanes``)."""
        return int(getattr(self.inner, "query_threads", 0))

    async def aclose(self) -> None:
        await self.inner.aclose()


class TimingBulkEmbedder(TimingEmbedder):
    """A :class:`TimingEmbedder` for a provider with a bulk path (``BulkCapable``: the local model),
    which is what the write path's lane calls; its time is added up too."""

    async def embed_bulk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return await self._timed(cast(BulkCapable, self.inner).embed_bulk(texts))


class TimingDatabase(Database):
    """The real Database; ``tenant`` transactions (acquire, statements, commit) are timed."""

    def __init__(self, inner: Database) -> None:
        self.__dict__.update(inner.__dict__)
        self.seconds = 0.0

    @contextlib.asynccontextmanager
    async def tenant(self, org_id: UUID, *, timeout_ms: int | None = None, readonly: bool = False,
                     settings: Mapping[str, str] | None = None) -> AsyncIterator[TenantTx]:
        started = time.perf_counter()
        try:
            async with super().tenant(org_id, timeout_ms=timeout_ms, readonly=readonly, settings=settings) as tx:
                yield tx
        finally:
            self.seconds += time.perf_counter() - started


@dataclass
class Run:
    name: str
    count: int = 0
    batch_s: list[float] = field(default_factory=list)
    embed_s: float = 0.0
    db_s: float = 0.0
    purge_s: float = 0.0

    @property
    def total_s(self) -> float:
        return sum(self.batch_s)

    def row(self) -> str:
        total = self.total_s
        ms = [s * 1000 for s in self.batch_s]

        def share(part: float) -> str:
            return f"{100 * part / total:5.1f}%" if total else "-"

        return (f"{self.name:<28} {self.count:>7} {self.count / total:>10.1f} {percentile(ms, 50):>8.1f} "
                f"{percentile(ms, 95):>8.1f} {percentile(ms, 99):>8.1f} {share(self.embed_s):>7} "
                f"{share(self.db_s):>7} {share(max(total - self.embed_s - self.db_s, 0.0)):>7}")


HEADER = (f"{'run':<28} {'rows':>7} {'mem/s':>10} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'embed':>7} "
          f"{'pg tx':>7} {'other':>7}")


async def timed_batches(name: str, batches: list[list[str]], step: Callable[[list[str]], Any]) -> Run:
    run = Run(name)
    for batch in batches:
        started = time.perf_counter()
        await step(batch)
        run.batch_s.append(time.perf_counter() - started)
        run.count += len(batch)
    return run


async def new_org(owner_dsn: str, name: str) -> UUID:
    conn = await asyncpg.connect(owner_dsn)
    try:
        return await admin.create_org(conn, name)
    finally:
        await conn.close()


def body_of(texts: list[str], vectors: npt.NDArray[np.float32] | None = None,
            on_duplicate: str | None = None, keyed: bool = False) -> bytes:
    items: list[dict[str, Any]] = []
    for i, text in enumerate(texts):
        item: dict[str, Any] = {"text": text, "agent_id": "bench-agent", "kind": "fact",
                                "metadata": {"source": "scifact", "n": i}}
        if keyed:  # key i of every batch: each batch's values supersede the batch before's
            item["key"] = f"bench.key{i}"
        if vectors is not None:
            item["embedding"] = vectors[i].tolist()
        items.append(item)
    return json.dumps({"memories": items, **({"on_duplicate": on_duplicate} if on_duplicate else {})}).encode()


async def bench(args: argparse.Namespace, owner_dsn: str, app_dsn: str, redis_url: str) -> None:
    settings = load_settings()
    texts = load_texts(args.corpus, args.n)
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]

    started = time.perf_counter()
    services: Services = await build_services(settings, Endpoints(owner_dsn, app_dsn, redis_url), None)
    build_s = time.perf_counter() - started
    embedder = (TimingBulkEmbedder if isinstance(services.embedder, BulkCapable) else TimingEmbedder)(
        services.embedder)
    db = TimingDatabase(services.db)
    services.embedder, services.db = embedder, db
    # Writes embed through the app's lanes (service.memories.write), built over the real embedder:
    # new lanes over the proxy, so that the write path's embedding is timed.
    services.extras["embedding_lanes"] = EmbeddingLanes(embedder, settings.embedding)
    try:
        await embedder.inner.embed(batches[0])  # warm-up: first-call allocations, not steady state
        print(f"embedder {embedder.name} ready in {build_s:.1f}s; {len(texts)} texts in {len(batches)} batches "
              f"of {args.batch}; mean text {sum(map(len, texts)) / len(texts):.0f} chars", flush=True)

        # 1. The write path as a request would run it: parse, validate, embed server-side, insert.
        org = await new_org(owner_dsn, "bench-write-path")
        embedder.seconds = db.seconds = 0.0
        full = await timed_batches("write path (server embeds)", batches,
                                   lambda b: write.create(services, org, body_of(b), None))
        full.embed_s, full.db_s = embedder.seconds, db.seconds
        dedup_runs = await dedup_pair(args, services, embedder, db, owner_dsn, batches) if args.dedup else []

        # 2. The model alone, on the same batches; keeps the vectors for the baselines.
        vectors: list[npt.NDArray[np.float32]] = []

        async def embed_only(batch: list[str]) -> None:
            vectors.append(await embedder.inner.embed(batch))

        model = await timed_batches("embed only (model)", batches, embed_only)
        model.embed_s = model.total_s

        # 3. The same write path with the vectors in the request (no model): parse + Postgres.
        org = await new_org(owner_dsn, "bench-vectors-given")
        bodies = iter([body_of(b, v) for b, v in zip(batches, vectors, strict=True)])
        embedder.seconds = db.seconds = 0.0
        given = await timed_batches("write path (vectors given)", batches,
                                    lambda _b: write.create(services, org, next(bodies), None))
        given.embed_s, given.db_s = embedder.seconds, db.seconds

        keyed = await keyed_runs(services, db, owner_dsn, batches, vectors) if args.keyed else []

        # 4. Pure Postgres: the batch insert in an org-scoped transaction, nothing else.
        org = await new_org(owner_dsn, "bench-postgres-only")
        items = iter([([MemoryIn(text=t, agent_id="bench-agent", metadata={"source": "scifact", "n": i})
                        for i, t in enumerate(b)], v) for b, v in zip(batches, vectors, strict=True)])

        async def insert_only(_batch: list[str]) -> None:
            rows, vecs = next(items)
            async with db.tenant(org) as tx:
                ids = [r["id"] for r in await tx.fetch("facts.new_ids", len(rows))]
                await repo.insert_batch(tx, rows, vecs, ids, [None] * len(rows), [None] * len(rows))

        db.seconds = 0.0
        pg = await timed_batches("postgres insert only", batches, insert_only)
        pg.db_s = db.seconds

        print()
        print(HEADER)
        for run in (full, *dedup_runs, model, given, *keyed, pg):
            print(run.row())
        print()
        for run in keyed:
            print(f"{run.name}: the expired-value purge took {100 * run.purge_s / run.total_s:.1f}% of its "
                  f"batches' time ({1000 * run.purge_s / run.count:.3f} ms per keyed memory); "
                  f"{run.count / run.total_s / (given.count / given.total_s):.0%} of the unkeyed rate")
        if dedup_runs:
            off = [r for r in dedup_runs if "dedup off" in r.name]
            on = [r for r in dedup_runs if "dedup on" in r.name]
            rate_off = sum(r.count / r.total_s for r in off) / len(off)
            rate_on = sum(r.count / r.total_s for r in on) / len(on)
            print(f"dedup on vs off (same run, {len(off)} of each, alternating): {rate_on:.0f} vs {rate_off:.0f} "
                  f"memories/s = {100 * rate_on / rate_off:.0f}% of off")
        print(f"write path vs postgres-only: {full.total_s / pg.total_s:.1f}x the time; "
              f"embedding is {100 * full.embed_s / full.total_s:.0f}% of a server-embedded batch")
        conn = await asyncpg.connect(owner_dsn)
        try:
            rows = await conn.fetchval("SELECT count(*) FROM memories")
            head = await conn.fetchval("SELECT version_num FROM alembic_version")
            server = await conn.fetchval("SHOW server_version")
            pgvector = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        finally:
            await conn.close()
        print(f"rows in memories: {rows}; schema head {head}; PostgreSQL {server}, pgvector {pgvector}; "
              f"Python {platform.python_version()}")
    finally:
        await close_services(services, close_embedder=True)  # the proxies close what they wrap


async def dedup_pair(args: argparse.Namespace, services: Services, embedder: Any, db: Any, owner_dsn: str,
                     batches: list[list[str]]) -> list[Any]:
    """The server-embedded write path with duplicate detection off, on, on, off (fresh orgs each)."""
    runs = []
    for n, policy in enumerate(("keep", "merge", "merge", "keep")):
        org = await new_org(owner_dsn, f"bench-dedup-{policy}-{n}")
        embedder.seconds = db.seconds = 0.0
        label = f"write path, dedup {'off' if policy == 'keep' else 'on'} ({n + 1})"

        def step(batch: list[str], policy: str = policy, org: UUID = org) -> Awaitable[Any]:
            return write.create(services, org, body_of(batch, None, policy), None)

        run = await timed_batches(label, batches, step)
        run.embed_s, run.db_s = embedder.seconds, db.seconds
        runs.append(run)
    return runs


async def keyed_runs(services: Services, db: Any, owner_dsn: str, batches: list[list[str]],
                     vectors: list[npt.NDArray[np.float32]]) -> list[Run]:
    """The vectors-given write path with a key on every memory (each batch superseding the one before),
    twice into fresh orgs; the time in the keyed write's expired-value purge is added up apart."""
    purge = facts_write.purge_expired_values
    spent = [0.0]

    async def timed_purge(tx: TenantTx, keys: Any) -> None:
        started = time.perf_counter()
        try:
            await purge(tx, keys)
        finally:
            spent[0] += time.perf_counter() - started

    runs = []
    facts_write.purge_expired_values = timed_purge  # the same work, timed
    try:
        for n in range(2):
            org = await new_org(owner_dsn, f"bench-keyed-{n}")
            bodies = iter([body_of(b, v, keyed=True) for b, v in zip(batches, vectors, strict=True)])
            db.seconds, spent[0] = 0.0, 0.0

            def step(_batch: list[str], bodies: Iterator[bytes] = bodies, org: UUID = org) -> Awaitable[Any]:
                return write.create(services, org, next(bodies), None)

            run = await timed_batches(f"keyed, vectors given ({n + 1})", batches, step)
            run.db_s, run.purge_s = db.seconds, spent[0]
            runs.append(run)
    finally:
        facts_write.purge_expired_values = purge
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=5000, help="memories to write per run (default 5000)")
    parser.add_argument("--batch", type=int, default=64, help="memories per request (default 64)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="a BEIR corpus.jsonl")
    parser.add_argument("--dedup", action="store_true",
                        help="also write the batches with duplicate detection off (on_duplicate=keep) and on "
                             "(merge), alternating, two runs of each into fresh orgs, and compare throughput")
    parser.add_argument("--keyed", action="store_true",
                        help="also write the batches with vectors given and a key on every memory, and report "
                             "the share of time in the keyed write's purge of expired values")
    args = parser.parse_args()
    configure_logs("warning")
    settings = load_settings()
    with servers(settings) as (owner_dsn, redis_url):
        app_dsn = prepare_database(settings, owner_dsn)
        asyncio.run(bench(args, owner_dsn, app_dsn, redis_url))


if __name__ == "__main__":
    main()

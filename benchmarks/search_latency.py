"""Search latency at scale: 1,000,000 memories, one org of 100,000 and ~1,000 small orgs.

    python benchmarks/search_latency.py [--rows 1000000] [--big-org-rows 100000] [--rebuild]
                                        [--queries 200] [--common-queries 60] [--skip-maintain]

**Build** (once; cached in a dedicated embedded Postgres under ``.pgcontext/bench-latency/``; every
finished step is recorded in the table ``bench_latency_build`` so an interrupted build resumes, and a
finished one is reused as long as ``--rows``/``--big-org-rows`` match; ``--rebuild`` starts over):

* texts: 2-3 SciFact sentences (10-22 words each, from a pool of 12,000) per memory;
* vectors: the pool's sentences embedded once with the service's own embedder (cached as ``.npy``);
  each memory's vector is the normalised mean of its sentences' vectors, so the vector space is
  the real model's, and a memory is near the memories that share its sentences;
* loaded with binary COPY as the owner (bypassing the HTTP write path) with the postings trigger and
  the secondary indexes off; postings, document frequencies and org statistics are then produced by
  calling ``memory_lex_add`` -- the very function the statement-level trigger calls -- over the
  loaded rows in batches, and the indexes are recreated from the migration's own definitions (read
  from ``pg_indexes`` before they were dropped, compared after). A sample is verified against a
  recomputation from the ``tsv`` column;
* then ``pgcontext maintain``'s logic (:mod:`service.retrieval.maintenance`) creates the per-org
  partial HNSW indexes for orgs above the threshold.

**Measure** through :class:`service.retrieval.RetrievalEngine` on a pool of ``pgcontext_app`` (RLS,
``force_custom_plan``), each strategy (lexical, semantic, hybrid, hybrid with RRF, lexical_first, auto) over SciFact
claims and over queries made of the corpus's most frequent words, for the big org and for random
small orgs. Strategies run round-robin per query, so drift on a shared machine hits all of them.
Query embeddings are computed once before timing (the engine's LRU) and their cost is reported on
its own line. Baselines from the same run: an org-scoped ``SELECT 1`` transaction through the same
pool, and exact (index-free) vector search on each org class; semantic recall@10 vs exact on a
sample; and ``EXPLAIN (ANALYZE)`` of the 6th execution of the service's semantic query.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import asyncpg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cached_embeddings, percentile
from benchmarks.search_latency_build import SCIFACT, build, sentence_pool
from service.db import Database, create_pool
from service.embedded.postgres import EmbeddedPostgres
from service.logs import configure as configure_logs
from service.retrieval import RetrievalEngine, maintenance
from service.retrieval.branches import semantic_args
from service.retrieval.types import SearchFilters, SearchRequest, SearchTuning
from service.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".pgcontext" / "bench-latency"
STRATEGIES = ("lexical", "semantic", "hybrid", "hybrid_rrf", "lexical_first", "auto")
"""``hybrid`` fuses with the default (``auto``: z-scores); ``hybrid_rrf`` with RRF, so the same run
compares the two."""


def request(name: str, text: str, limit: int) -> SearchRequest:
    if name == "hybrid_rrf":
        return SearchRequest(query=text, strategy="hybrid", limit=limit, tuning=SearchTuning(fusion="rrf"))
    return SearchRequest(query=text, strategy=name, limit=limit)  # type: ignore[arg-type]


_WORD = re.compile(r"[A-Za-z][a-z]+")


# -- measure ---------------------------------------------------------------------------------------


@dataclass
class QuerySet:
    label: str
    org_class: str
    items: list[tuple[UUID, str, str]]  # (org, query kind, text)


def claim_queries() -> list[str]:
    with (SCIFACT / "queries.jsonl").open() as f:
        return [json.loads(line)["text"] for line in f]


def common_word_queries(sentences: list[str], n: int, seed: int) -> list[str]:
    """Queries of 4-8 of the corpus's 40 most frequent content words (plus filler stopwords)."""
    stop = {"the", "and", "with", "that", "for", "were", "was", "this", "from", "are", "these", "which", "have",
            "has", "been", "not", "than", "our", "its", "their", "between", "during", "both", "also", "but"}
    df: dict[str, int] = {}
    for s in sentences:
        for w in {w.lower() for w in _WORD.findall(s)}:
            if len(w) > 2 and w not in stop:
                df[w] = df.get(w, 0) + 1
    top = [w for w, _ in sorted(df.items(), key=lambda kv: -kv[1])[:40]]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = list(rng.choice(top, size=int(rng.integers(4, 9)), replace=False))
        out.append(" ".join(f"the {w}" if i % 3 == 0 else str(w) for i, w in enumerate(words)))
    return out


def summarise(label: str, values: list[float], wall_s: float) -> str:
    return (f"{label:<32} n={len(values):>4}  p50={percentile(values, 50):7.2f}  p95={percentile(values, 95):7.2f}  "
            f"p99={percentile(values, 99):7.2f}  max={max(values):7.2f} ms  {len(values) / wall_s:6.1f} q/s")


async def measure(owner_dsn: str, app_dsn: str, args: argparse.Namespace, settings: Settings) -> None:
    from pgvector import Vector
    from pgvector.asyncpg import register_vector

    from service.embeddings import build_embedder

    owner = await asyncpg.connect(owner_dsn, server_settings={"plan_cache_mode": "force_custom_plan", "jit": "off"})
    await register_vector(owner)
    orgs = await owner.fetch("SELECT o.id, o.name, s.n FROM orgs o JOIN (SELECT org_id, sum(n_docs) AS n "
                             "FROM memory_lex_stats GROUP BY 1) s ON s.org_id = o.id WHERE o.name LIKE 'latency-%' "
                             "ORDER BY o.name")
    big = orgs[0]["id"]
    small = [r["id"] for r in orgs[1:]]
    print(f"# orgs: big {orgs[0]['n']} rows; {len(small)} small orgs of ~{orgs[1]['n']} rows", flush=True)
    partial = await owner.fetch("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'memories_hnsw_org_%'")
    print(f"# partial HNSW indexes: {[r['indexname'] for r in partial]}", flush=True)

    rng = np.random.default_rng(5)
    claims = claim_queries()
    rng.shuffle(claims)
    sentences = sentence_pool()
    common = common_word_queries(sentences, 2 * args.common_queries, seed=3)
    nq, nc = args.queries, args.common_queries
    sets = [
        QuerySet("big", "big", [(big, "claim", q) for q in claims[:nq]] + [(big, "common", q) for q in common[:nc]]),
        QuerySet("small", "small",
                 [(small[int(rng.integers(len(small)))], "claim", q) for q in claims[nq:2 * nq]]
                 + [(small[int(rng.integers(len(small)))], "common", q) for q in common[nc:2 * nc]]),
    ]

    embedder = await asyncio.to_thread(build_embedder, settings.embedding, settings.data_dir)
    pool = await create_pool(app_dsn, min_size=4, max_size=8)
    db = Database(pool, statement_timeout_ms=settings.database.statement_timeout_ms)
    retrieval = settings.retrieval
    if args.postings_per_term:
        import dataclasses

        retrieval = dataclasses.replace(retrieval, postings_per_term=args.postings_per_term)
    print(f"# retrieval settings: postings_per_term={retrieval.postings_per_term} ef_search={retrieval.ef_search} "
          f"limit={args.limit}", flush=True)
    engine = RetrievalEngine(db, embedder, retrieval, max_limit=settings.limits.max_page_size)

    # Query embeddings once (the engine's LRU), timed on their own.
    embed_ms = []
    for qs in sets:
        for org, _kind, text in qs.items:
            t = time.perf_counter()
            await engine.embed_query(org, text)
            embed_ms.append((time.perf_counter() - t) * 1000)
    print(summarise("query embedding (model, once)", embed_ms, sum(embed_ms) / 1000), flush=True)

    # Warm-up: one pass of every strategy over a few queries of each class (plans, buffers).
    for qs in sets:
        for org, _k, text in qs.items[:20]:
            for s in STRATEGIES:
                await engine.search(org, request(s, text, args.limit))

    lines: list[str] = []
    for qs in sets:
        times: dict[tuple[str, str], list[float]] = {}
        used: dict[str, dict[str, int]] = {s: {} for s in STRATEGIES}
        walls: dict[str, float] = dict.fromkeys(STRATEGIES, 0.0)
        base: list[float] = []
        for i, (org, kind, text) in enumerate(qs.items):
            t = time.perf_counter()
            async with db.tenant(org, readonly=True) as tx:
                await tx.conn.fetchval("SELECT 1")
            base.append((time.perf_counter() - t) * 1000)
            order = STRATEGIES[i % len(STRATEGIES):] + STRATEGIES[:i % len(STRATEGIES)]
            for s in order:
                t = time.perf_counter()
                r = await engine.search(org, request(s, text, args.limit))
                ms = (time.perf_counter() - t) * 1000
                walls[s] += ms / 1000
                times.setdefault((s, "all"), []).append(ms)
                times.setdefault((s, kind), []).append(ms)
                used[s][r.strategy] = used[s].get(r.strategy, 0) + 1
                if r.fallback_reason:
                    used[s]["fallback"] = used[s].get("fallback", 0) + 1
        lines.append(f"## {qs.label} org(s): {len(qs.items)} queries "
                     f"({sum(k == 'claim' for _o, k, _t in qs.items)} claims, "
                     f"{sum(k == 'common' for _o, k, _t in qs.items)} common-word)")
        lines.append(summarise("baseline: org tx + SELECT 1", base, sum(base) / 1000))
        for s in STRATEGIES:
            for kind in ("all", "claim", "common"):
                v = times[(s, kind)]
                lines.append(summarise(f"{s} [{kind}]", v, walls[s] * len(v) / len(times[(s, 'all')])))
            lines.append(f"    used: {used[s]}")
        print("\n".join(lines[-(2 + 4 * len(STRATEGIES)):]), flush=True)

    # Throughput with several searches in flight (the pool has 8 connections; hybrid takes two).
    for qs in sets:
        for s in ("lexical", "semantic", "hybrid"):
            items = list(qs.items)
            t = time.perf_counter()

            async def client(items: list[tuple[UUID, str, str]] = items, s: str = s) -> None:
                while items:
                    org, _k, text = items.pop()
                    await engine.search(org, SearchRequest(query=text, strategy=s, limit=args.limit))  # type: ignore[arg-type]

            await asyncio.gather(*(client() for _ in range(args.concurrency)))
            print(f"throughput {qs.label} {s}, {args.concurrency} concurrent: "
                  f"{len(qs.items) / (time.perf_counter() - t):.1f} q/s", flush=True)

    # Exact vector search baseline and semantic recall@10 vs exact.
    exact_sql = ("SELECT id FROM memories WHERE org_id = $1 AND embedding IS NOT NULL "
                 "ORDER BY (embedding <=> $2) + 0, id LIMIT $3")
    for qs in sets:
        recalls, exact_ms = [], []
        for org, _k, text in qs.items[: args.recall_sample]:
            vec = await engine.embed_query(org, text)
            t = time.perf_counter()
            truth = [r["id"] for r in await owner.fetch(exact_sql, org, Vector(vec), args.limit)]
            exact_ms.append((time.perf_counter() - t) * 1000)
            got = await engine.search(org, SearchRequest(query=text, strategy="semantic", limit=args.limit))
            recalls.append(len({r.id for r in got.results} & set(truth)) / max(len(truth), 1))
        print(summarise(f"baseline: exact vector search ({qs.label})", exact_ms, sum(exact_ms) / 1000), flush=True)
        print(f"semantic recall@{args.limit} vs exact ({qs.label}, {len(recalls)} queries): "
              f"mean {np.mean(recalls):.3f}, min {np.min(recalls):.2f}", flush=True)
        if qs.org_class == "big" and partial:
            # The same query on the global graph only: drop the org's partial index inside a
            # transaction that is rolled back (raw SQL, as the owner, same settings as the branch).
            from service.db.queries import query as named

            ms_global, rec_global = [], []
            tr = owner.transaction()
            await tr.start()
            try:
                for r in partial:
                    await owner.execute(f'DROP INDEX "{r["indexname"]}"')
                await owner.execute("SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = 100")
                for org, _k, text in qs.items[: args.recall_sample]:
                    vec = await engine.embed_query(org, text)
                    truth_ids = {r["id"] for r in await owner.fetch(exact_sql, org, Vector(vec), args.limit)}
                    t = time.perf_counter()
                    got = await owner.fetch(named("retrieval.semantic_hnsw"), org, Vector(vec), args.limit,
                                            *semantic_args(SearchFilters(), None))
                    ms_global.append((time.perf_counter() - t) * 1000)
                    rec_global.append(len({r["id"] for r in got} & truth_ids) / max(len(truth_ids), 1))
            finally:
                await tr.rollback()
            print(summarise("without partial index: global HNSW + org filter (raw SQL)", ms_global,
                            sum(ms_global) / 1000), flush=True)
            print(f"  its recall@{args.limit} vs exact: mean {np.mean(rec_global):.3f}, min {np.min(rec_global):.2f}",
                  flush=True)

    # The 6th execution of the service's semantic query, as pgcontext_app: which index does it use?
    from service.db.queries import query as named

    async with pool.acquire() as conn:
        for qs in sets:
            org, _k, text = qs.items[0]
            literal = "[" + ",".join(f"{x:.6f}" for x in await engine.embed_query(org, text)) + "]"
            async with conn.transaction(readonly=True):
                await conn.execute("SELECT set_config('pgcontext.org_id', $1, true)", str(org))
                await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = 100")
                await conn.execute(f"PREPARE sem AS {named('retrieval.semantic_hnsw')}")
                # no filters: every further argument is a NULL or a boolean
                rest = ", ".join("NULL" if a is None else str(a).lower() for a in semantic_args(SearchFilters(), None))
                call = f"EXECUTE sem('{org}', '{literal}', {args.limit}, {rest})"
                for _ in range(5):
                    await conn.execute(call)
                plan = [r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS) {call}")]
                await conn.execute("DEALLOCATE sem")
            print(f"# EXPLAIN (ANALYZE), 6th execution, {qs.label} org:", flush=True)
            for line in plan:
                if any(w in line for w in ("Scan", "Sort", "Limit", "Execution", "Planning Time", "Index Cond")):
                    print(f"#   {line[:150]}", flush=True)

    print(f"# load average: {os.getloadavg()}", flush=True)
    await pool.close()
    await owner.close()
    await embedder.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--big-org-rows", type=int, default=100_000)
    parser.add_argument("--rebuild", action="store_true", help="drop the cached database and build it again")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--skip-maintain", action="store_true", help="do not create per-org partial HNSW indexes")
    parser.add_argument("--threshold", type=int, default=maintenance.DEFAULT_THRESHOLD,
                        help="rows above which an org gets its own partial HNSW index")
    parser.add_argument("--queries", type=int, default=200, help="claim queries per org class")
    parser.add_argument("--common-queries", type=int, default=60, help="common-word queries per org class")
    parser.add_argument("--recall-sample", type=int, default=50)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4, help="in-flight searches for the throughput run")
    parser.add_argument("--shared-buffers", default="2GB")
    parser.add_argument("--postings-per-term", type=int, default=None,
                        help="override PGCONTEXT_RETRIEVAL_POSTINGS_PER_TERM for the measurement")
    parser.add_argument("--home", type=Path, default=HOME)
    args = parser.parse_args()
    configure_logs("warning")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    settings = load_settings()
    home = args.home
    if args.rebuild and (home / "postgres").exists():
        import shutil

        shutil.rmtree(home / "postgres")
    pg = EmbeddedPostgres(home / "postgres", shared_buffers=args.shared_buffers).start()
    try:
        from service.cli.servers import prepare_database

        owner_dsn = pg.dsn()
        app_dsn = prepare_database(settings, owner_dsn)
        print(f"# {time.strftime('%Y-%m-%d %H:%M')}  rows={args.rows} big={args.big_org_rows}  "
              f"load average {os.getloadavg()}", flush=True)
        sentences = sentence_pool()
        vectors = cached_embeddings(settings, sentences, HOME, "sentences")  # cached after the first run
        asyncio.run(build(owner_dsn, args, sentences, vectors))
        if not args.build_only:
            asyncio.run(measure(owner_dsn, app_dsn, args, settings))
    finally:
        pg.stop()


if __name__ == "__main__":
    main()

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import cached_embeddings, percentile
from service.db import Database, create_pool
from service.embedded import EmbeddedPostgres
from service.logs import configure as configure_logs
from service.retrieval import RetrievalEngine, maintenance
from service.retrieval.filters import filter_args
from service.retrieval.types import SearchFilters, SearchRequest, SearchTuning
from service.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".pgcontext" / "bench-latency"
SCIFACT = Path(os.environ.get("PGCONTEXT_SCIFACT", "/work/shared/data/scifact"))
POOL_SENTENCES = 12_000
SMALL_ORGS = 1000
COPY_BATCH = 25_000
STRATEGIES = ("lexical", "semantic", "hybrid", "hybrid_rrf", "lexical_first", "auto")
"""``hybrid`` fuses with the default (``auto``: z-scores); ``hybrid_rrf`` with RRF, the default before
issue 12, so the same run compares the two."""


def request(name: str, text: str, limit: int) -> SearchRequest:
    if name == "hybrid_rrf":
        return SearchRequest(query=text, strategy="hybrid", limit=limit, tuning=SearchTuning(fusion="rrf"))
    return SearchRequest(query=text, strategy=name, limit=limit)  # type: ignore[arg-type]
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
_WORD = re.compile(r"[A-Za-z][a-z]+")


# -- corpus and vectors ----------------------------------------------------------------------------


def sentence_pool(n: int = POOL_SENTENCES) -> list[str]:
    """``n`` distinct SciFact sentences of 10-22 words, in corpus order (deterministic)."""
    out: list[str] = []
    seen: set[str] = set()
    with (SCIFACT / "corpus.jsonl").open() as f:
        for line in f:
            for s in _SENTENCE_END.split(json.loads(line).get("text") or ""):
                s = s.strip()
                if 10 <= len(s.split()) <= 22 and s not in seen:
                    seen.add(s)
                    out.append(s)
    if len(out) < n:
        raise SystemExit(f"only {len(out)} suitable sentences in {SCIFACT}")
    rng = np.random.default_rng(11)
    return [out[i] for i in sorted(rng.choice(len(out), n, replace=False))]


def org_sizes(rows: int, big: int) -> list[int]:
    """Rows per org: org 0 is the big one, the rest share ``rows - big`` as evenly as possible."""
    rest = rows - big
    n_small = max(1, min(SMALL_ORGS, rest // 10))
    base, extra = divmod(rest, n_small)
    return [big] + [base + (1 if i < extra else 0) for i in range(n_small)]


def row_batches(sizes: list[int], vectors: npt.NDArray[np.float32], sentences: list[str],
                batch: int) -> Iterator[tuple[int, list[str], npt.NDArray[np.float32]]]:
    """(org index, texts, vectors) batches: 2 (70%) or 3 (30%) pool sentences per memory."""
    rng = np.random.default_rng(1234)
    n_pool = len(sentences)
    for org, size in enumerate(sizes):
        for start in range(0, size, batch):
            n = min(batch, size - start)
            picks = rng.integers(0, n_pool, size=(n, 3))
            three = rng.random(n) < 0.3
            summed = vectors[picks[:, 0]] + vectors[picks[:, 1]] + np.where(three[:, None], vectors[picks[:, 2]], 0)
            summed /= np.linalg.norm(summed, axis=1, keepdims=True)
            texts = [" ".join(sentences[j] for j in (p if t else p[:2])) for p, t in zip(picks, three, strict=True)]
            yield org, texts, summed.astype(np.float32)


# -- build -----------------------------------------------------------------------------------------

MARKER = """CREATE TABLE IF NOT EXISTS bench_latency_build (
    step text PRIMARY KEY, info jsonb NOT NULL DEFAULT '{}', seconds float8, done_at timestamptz DEFAULT now())"""


async def done_steps(conn: asyncpg.Connection) -> dict[str, Any]:
    await conn.execute(MARKER)
    return {r["step"]: json.loads(r["info"]) if isinstance(r["info"], str) else r["info"]
            for r in await conn.fetch("SELECT step, info FROM bench_latency_build")}


async def mark(conn: asyncpg.Connection, step: str, started: float, info: dict[str, Any] | None = None) -> None:
    seconds = time.perf_counter() - started
    await conn.execute("INSERT INTO bench_latency_build (step, info, seconds) VALUES ($1, $2::jsonb, $3) "
                       "ON CONFLICT (step) DO UPDATE SET info = excluded.info, seconds = excluded.seconds, "
                       "done_at = now()", step, json.dumps(info or {}), seconds)
    print(f"# build step {step}: {seconds:.1f} s", flush=True)


async def build(owner_dsn: str, args: argparse.Namespace, sentences: list[str],
                vectors: npt.NDArray[np.float32]) -> None:
    from pgvector.asyncpg import register_vector

    conn = await asyncpg.connect(owner_dsn)
    await register_vector(conn)
    await conn.execute("SET maintenance_work_mem = '3GB'; SET max_parallel_maintenance_workers = 2")
    # Bulk load: fewer checkpoints (a benchmark database only).
    await conn.execute("ALTER SYSTEM SET max_wal_size = '16GB'")
    await conn.execute("SELECT pg_reload_conf()")
    steps = await done_steps(conn)
    params = {"rows": args.rows, "big_org_rows": args.big_org_rows}
    if "params" in steps and steps["params"] != params:
        raise SystemExit(f"the database under {HOME} was built with {steps['params']}, not {params}: "
                         "pass --rebuild (or the same --rows/--big-org-rows)")
    sizes = org_sizes(args.rows, args.big_org_rows)

    if "orgs" not in steps:
        started = time.perf_counter()
        names = ["latency-big"] + [f"latency-small-{i:04d}" for i in range(1, len(sizes))]
        await conn.execute("DELETE FROM orgs WHERE name LIKE 'latency-%'")
        await conn.executemany("INSERT INTO orgs (name) VALUES ($1)", [(n,) for n in names])
        await mark(conn, "params", started, params)
        await mark(conn, "orgs", started)

    org_ids = [r["id"] for r in await conn.fetch("SELECT id FROM orgs WHERE name LIKE 'latency-%' ORDER BY name")]
    # 'latency-big' sorts before 'latency-small-*'
    assert len(org_ids) == len(sizes)

    if "drop_indexes" not in steps:
        started = time.perf_counter()
        memories = [dict(r) for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'memories' "
            "AND indexname <> 'memories_pkey' ORDER BY indexname")]
        postings = [dict(r) for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
            "AND tablename = 'memory_postings' AND indexname <> 'memory_postings_pkey' ORDER BY indexname")]
        pkey = await conn.fetchval("SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                                   "WHERE conname = 'memory_postings_pkey'")
        for r in memories + postings:
            await conn.execute(f'DROP INDEX IF EXISTS "{r["indexname"]}"')
        await conn.execute("ALTER TABLE memory_postings DROP CONSTRAINT IF EXISTS memory_postings_pkey")
        await mark(conn, "drop_indexes", started, {"memories": memories, "postings": postings, "pkey": pkey})
        steps = await done_steps(conn)

    if "load" not in steps:
        started = time.perf_counter()
        await conn.execute("TRUNCATE memories, memory_access, memory_postings, memory_term_df, memory_lex_stats")
        await conn.execute("ALTER TABLE memories DISABLE TRIGGER memories_lex_insert")
        done = 0
        for org, texts, vecs in row_batches(sizes, vectors, sentences, COPY_BATCH):
            await conn.copy_records_to_table(
                "memories", columns=["org_id", "text", "embedding"],
                records=[(org_ids[org], t, v) for t, v in zip(texts, vecs, strict=True)])
            before, done = done, done + len(texts)
            if done // 100_000 > before // 100_000:
                print(f"  loaded {done}/{args.rows} ({done / (time.perf_counter() - started):.0f}/s)", flush=True)
        await conn.execute("ALTER TABLE memories ENABLE TRIGGER memories_lex_insert")
        await mark(conn, "load", started)

    if "postings" not in steps:
        started = time.perf_counter()
        await conn.execute("TRUNCATE memory_postings, memory_term_df, memory_lex_stats")
        # The trigger's own function, over the loaded rows, in groups of orgs (~50K rows each), on two
        # connections at once (as two concurrent writers would: their counters land in their own shards).
        groups: list[list[UUID]] = [[]]
        acc = 0
        for org, size in zip(org_ids, sizes, strict=True):
            if acc >= 50_000:
                groups.append([])
                acc = 0
            groups[-1].append(org)
            acc += size
        queue: asyncio.Queue[list[UUID]] = asyncio.Queue()
        for g in groups:
            queue.put_nowait(g)

        async def worker() -> None:
            w = await asyncpg.connect(owner_dsn)
            try:
                while not queue.empty():
                    g = queue.get_nowait()
                    await w.execute("SELECT memory_lex_add(array_agg(org_id), array_agg(id), array_agg(tsv)) "
                                    "FROM memories WHERE org_id = ANY($1::uuid[]) HAVING count(*) > 0", g)
                    print(f"  postings: {len(groups) - queue.qsize()}/{len(groups)} groups "
                          f"({time.perf_counter() - started:.0f} s)", flush=True)
            finally:
                await w.close()

        await asyncio.gather(worker(), worker())
        await mark(conn, "postings", started)

    info = steps.get("drop_indexes") or (await done_steps(conn))["drop_indexes"]
    if "indexes" not in steps:
        started = time.perf_counter()
        await conn.execute(f"ALTER TABLE memory_postings ADD CONSTRAINT memory_postings_pkey {info['pkey']}")
        for r in info["postings"] + info["memories"]:
            if "hnsw" in r["indexdef"]:
                continue  # the global HNSW graph last: it is the long one
            t = time.perf_counter()
            await conn.execute(r["indexdef"].replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
            print(f"  index {r['indexname']}: {time.perf_counter() - t:.1f} s", flush=True)
        await mark(conn, "indexes", started)

    if "hnsw" not in steps:
        started = time.perf_counter()
        for r in info["memories"]:
            if "hnsw" in r["indexdef"]:
                await conn.execute(r["indexdef"].replace("CREATE INDEX", "CREATE INDEX IF NOT EXISTS", 1))
        await mark(conn, "hnsw", started)

    if "analyze" not in steps:
        started = time.perf_counter()
        await conn.execute("VACUUM (ANALYZE) memories, memory_postings, memory_term_df, memory_lex_stats, orgs")
        now = {r["indexname"]: r["indexdef"] for r in await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' "
            "AND tablename IN ('memories', 'memory_postings') AND indexname NOT LIKE 'memories_hnsw_org_%'")}
        for r in info["memories"] + info["postings"]:
            assert now.get(r["indexname"]) == r["indexdef"], f"index {r['indexname']} differs"
        await mark(conn, "analyze", started)

    if "verify" not in steps:
        started = time.perf_counter()
        report = await verify(conn)
        await mark(conn, "verify", started, report)
        steps = await done_steps(conn)
    print(f"# verified: {json.dumps(steps['verify'])}", flush=True)

    if not args.skip_maintain:
        started = time.perf_counter()
        actions = await maintenance.maintain(conn, threshold=args.threshold, maintenance_work_mem="2GB")
        for a in actions:
            print(f"  maintain: {a}", flush=True)
        print(f"# maintain (threshold {args.threshold}): {time.perf_counter() - started:.1f} s", flush=True)
    sizes_db = await conn.fetchrow(
        "SELECT pg_size_pretty(pg_total_relation_size('memories')) AS memories, "
        "pg_size_pretty(pg_total_relation_size('memory_postings')) AS postings, "
        "(SELECT count(*) FROM memory_postings) AS n_postings, "
        "(SELECT count(*) FROM memory_term_df) AS n_df")
    print(f"# sizes: {dict(sizes_db)}", flush=True)
    for r in await conn.fetch("SELECT step, round(seconds::numeric, 1) AS s FROM bench_latency_build ORDER BY done_at"):
        print(f"#   {r['step']}: {r['s']} s", flush=True)
    await conn.close()


async def verify(conn: asyncpg.Connection) -> dict[str, Any]:
    """Postings, df counters and org stats equal what the trigger computes from ``tsv``, on a sample."""
    bad_postings = await conn.fetchval(
        """
        WITH s AS (SELECT org_id, id, tsv FROM memories TABLESAMPLE SYSTEM (0.1) REPEATABLE (7) LIMIT 500),
        want AS (SELECT s.org_id, s.id AS memory_id, l.lexeme AS term, coalesce(cardinality(l.positions), 1) AS tf,
                        sum(coalesce(cardinality(l.positions), 1)) OVER (PARTITION BY s.id)::int AS doc_len
                   FROM s CROSS JOIN LATERAL unnest(s.tsv) AS l),
        want2 AS (SELECT *, memory_bm25_impact(tf, doc_len) AS impact FROM want),
        got AS (SELECT p.org_id, p.memory_id, p.term, p.tf, p.doc_len, p.impact
                  FROM memory_postings p JOIN s ON p.org_id = s.org_id AND p.memory_id = s.id)
        SELECT (SELECT count(*) FROM (SELECT * FROM want2 EXCEPT SELECT * FROM got) a)
             + (SELECT count(*) FROM (SELECT * FROM got EXCEPT SELECT * FROM want2) b)
        """)
    sampled = await conn.fetchval("SELECT count(*) FROM (SELECT 1 FROM memories TABLESAMPLE SYSTEM (0.1) "
                                  "REPEATABLE (7) LIMIT 500) s")
    bad_df = await conn.fetchval(
        """
        WITH t AS (SELECT org_id, term, sum(df) AS df FROM memory_term_df TABLESAMPLE SYSTEM (0.05) REPEATABLE (3)
                    GROUP BY 1, 2 LIMIT 200)
        SELECT count(*) FROM t
         WHERE t.df <> (SELECT count(*) FROM memory_postings p WHERE p.org_id = t.org_id AND p.term = t.term)
            OR t.df <> (SELECT count(*) FROM memories m WHERE m.org_id = t.org_id
                          AND EXISTS (SELECT 1 FROM unnest(m.tsv) l WHERE l.lexeme = t.term))
        """)
    n_df = await conn.fetchval("SELECT count(*) FROM (SELECT 1 FROM memory_term_df TABLESAMPLE SYSTEM (0.05) "
                               "REPEATABLE (3) GROUP BY org_id, term LIMIT 200) x")
    bad_stats = await conn.fetchval(
        """
        WITH st AS (SELECT org_id, sum(n_docs) AS n, sum(total_len) AS len FROM memory_lex_stats GROUP BY 1),
        real AS (SELECT org_id, count(*) AS n,
                        sum((SELECT sum(coalesce(cardinality(l.positions), 1)) FROM unnest(tsv) l)) AS len
                   FROM memories GROUP BY 1)
        SELECT count(*) FROM real FULL JOIN st USING (org_id)
         WHERE real.n IS DISTINCT FROM st.n OR real.len IS DISTINCT FROM st.len
        """)
    total = await conn.fetchval("SELECT count(*) FROM memories")
    assert bad_postings == 0 and bad_df == 0 and bad_stats == 0, (bad_postings, bad_df, bad_stats)
    return {"memories": total, "sampled_rows_postings_equal": sampled, "sampled_terms_df_equal": n_df,
            "orgs_stats_equal": await conn.fetchval("SELECT count(DISTINCT org_id) FROM memory_lex_stats")}


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
                                            None, None, None, None, None, None, None, None, None,
                                            False, None, False)
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
                nulls = ", ".join(["NULL"] * len(filter_args(SearchFilters())))  # no filters
                call = f"EXECUTE sem('{org}', '{literal}', {args.limit}, {nulls}, false, NULL, false)"
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
        from service.cli import prepare_database

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

"""The 1M-row database that ``benchmarks/search_latency.py`` measures: the corpus, the orgs' rows and
vectors, and the resumable build (binary COPY, postings through the trigger's own function, the
migration's indexes, per-org HNSW). See that script's docstring for what each step does."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np
import numpy.typing as npt

from service.retrieval import maintenance

SCIFACT = Path(os.environ.get("PGCONTEXT_SCIFACT", "/work/shared/data/scifact"))
POOL_SENTENCES = 12_000
SMALL_ORGS = 1000
COPY_BATCH = 25_000
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")


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
        raise SystemExit(f"the database under {args.home} was built with {steps['params']}, not {params}: "
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

"""Retrieval quality on a BEIR dataset, through the service itself.

    python benchmarks/retrieval_beir.py ../shared/data/scifact [--split train] [--max-queries N]

Loads corpus.jsonl into a fresh org through POST /v1/memories (the service's write path, batches
of 64, embedded server-side), runs every query of qrels/<split>.tsv through POST /v1/memories/search
for each strategy, and prints one line per strategy: nDCG@10, Recall@100 and latency p50/p95 (the
engine's total_ms, and the in-process HTTP round trip), plus an in-process BM25 reference (bm25s)
computed in the same run. Also reports write throughput with and without the postings triggers.

With no PGCONTEXT_DATABASE_URL / DATABASE_URL it starts embedded Postgres and Redis in a temp dir.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import KEEP, app_client, ndcg_at, new_tenant, percentile, recall_at, servers
from benchmarks._common import SEARCH_STRATEGIES as STRATEGIES
from service.logs import configure as configure_logs
from service.retrieval import RetrievalEngine
from service.settings import load_settings

BATCH = 64
DEPTH = 100


def load_beir(root: Path, split: str) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    corpus: dict[str, str] = {}
    with (root / "corpus.jsonl").open() as f:
        for line in f:
            doc = json.loads(line)
            corpus[str(doc["_id"])] = f"{doc.get('title') or ''}\n{doc['text']}".strip()
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels" / f"{split}.tsv").open() as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            qrels.setdefault(qid, {})[did] = int(score)
    queries: dict[str, str] = {}
    with (root / "queries.jsonl").open() as f:
        for line in f:
            q = json.loads(line)
            if str(q["_id"]) in qrels:
                queries[str(q["_id"])] = q["text"]
    return corpus, queries, qrels


def bm25_reference(corpus: dict[str, str], queries: dict[str, str], qrels: dict[str, dict[str, int]]) -> str:
    import bm25s

    try:
        import Stemmer

        stemmer: Any = Stemmer.Stemmer("english")
        stem_note = "snowball stemmer"
    except ImportError:  # PyStemmer is optional; without it bm25s compares unstemmed tokens
        stemmer, stem_note = None, "no stemmer"
    doc_ids = list(corpus)
    retriever = bm25s.BM25()  # defaults: k1=1.5, b=0.75, Lucene idf
    retriever.index(bm25s.tokenize([corpus[d] for d in doc_ids], stopwords="en", stemmer=stemmer,
                                   show_progress=False), show_progress=False)
    qids = list(queries)
    tokens = bm25s.tokenize([queries[q] for q in qids], stopwords="en", stemmer=stemmer, show_progress=False)
    started = time.perf_counter()
    results, _scores = retriever.retrieve(tokens, k=DEPTH, show_progress=False, n_threads=1)
    per_query_ms = (time.perf_counter() - started) * 1000 / max(len(qids), 1)
    ndcg = [ndcg_at([doc_ids[i] for i in row], qrels[q], 10) for q, row in zip(qids, results, strict=True)]
    recall = [recall_at([doc_ids[i] for i in row], qrels[q], DEPTH) for q, row in zip(qids, results, strict=True)]
    return (f"{'bm25s (reference)':<18} nDCG@10={np.mean(ndcg):.4f}  Recall@100={np.mean(recall):.4f}  "
            f"mean {per_query_ms:.2f} ms/query in-process, batched ({stem_note}, stopwords en)")


async def load_corpus(client: Any, headers: dict[str, str], corpus: dict[str, str]) -> tuple[dict[str, str], float]:
    """POST the corpus in batches; returns memory id -> doc id and memories/s (embedding included)."""
    by_memory: dict[str, str] = {}
    doc_ids = list(corpus)
    started = time.perf_counter()
    for start in range(0, len(doc_ids), BATCH):
        chunk = doc_ids[start:start + BATCH]
        r = await client.post("/v1/memories", headers=headers,
                              json={"memories": [{"text": corpus[d]} for d in chunk], "on_duplicate": KEEP})
        r.raise_for_status()
        by_memory.update(zip(r.json()["ids"], chunk, strict=True))
    return by_memory, len(doc_ids) / (time.perf_counter() - started)


async def write_overhead(client: Any, owner_dsn: str, corpus: dict[str, str], n: int) -> str:
    """memories/s of the write path with caller-supplied embeddings (no model time): postings triggers
    on vs off, each into a fresh org, so the difference is the lexical index upkeep."""
    engine = client.app.state.services.extras["retrieval"]
    assert isinstance(engine, RetrievalEngine)
    texts = list(corpus.values())[:n]
    vectors = await engine.embedder.embed(texts)
    rates: dict[str, float] = {}
    conn = await asyncpg.connect(owner_dsn)
    try:
        for enabled in (False, True, False, True):  # interleaved, best of two: less drift from caches
            await conn.execute(f"ALTER TABLE memories {'ENABLE' if enabled else 'DISABLE'} TRIGGER memories_lex_insert")
            _org, headers = await new_tenant(owner_dsn, f"write-{enabled}-{time.time_ns()}")
            started = time.perf_counter()
            for start in range(0, n, BATCH):
                body = [{"text": t, "embedding": v.tolist()}
                        for t, v in zip(texts[start:start + BATCH], vectors[start:start + BATCH], strict=True)]
                (await client.post("/v1/memories", json={"memories": body, "on_duplicate": KEEP},
                                   headers=headers)).raise_for_status()
            mode = "on" if enabled else "off"
            rates[mode] = max(rates.get(mode, 0.0), n / (time.perf_counter() - started))
    finally:
        await conn.execute("ALTER TABLE memories ENABLE TRIGGER memories_lex_insert")
        await conn.close()
    off, on = rates["off"], rates["on"]
    return (f"write path, embeddings supplied, batches of {BATCH}, {n} memories (best of 2): "
            f"{off:.0f} memories/s without postings triggers, {on:.0f} with ({(1 - on / off) * 100:.0f}% slower)")


async def run_strategy(client: Any, headers: dict[str, str], name: str, queries: dict[str, str],
                       qrels: dict[str, dict[str, int]], by_memory: dict[str, str]) -> str:
    strategy, tuning = STRATEGIES[name]
    engine = client.app.state.services.extras["retrieval"]
    assert isinstance(engine, RetrievalEngine)
    engine.cache.clear()  # every strategy pays for its own query embeddings
    tuning = {"lexical_candidates": DEPTH, "semantic_candidates": DEPTH, **tuning}
    ndcg, recall, engine_ms, http_ms = [], [], [], []
    used: dict[str, int] = {}
    for qid, text in queries.items():
        started = time.perf_counter()
        r = await client.post("/v1/memories/search", headers=headers,
                              json={"query": text, "strategy": strategy, "limit": DEPTH, "tuning": tuning})
        http_ms.append((time.perf_counter() - started) * 1000)
        r.raise_for_status()
        body = r.json()
        used[body["strategy"]] = used.get(body["strategy"], 0) + 1
        ranked = [by_memory[x["id"]] for x in body["results"]]
        ndcg.append(ndcg_at(ranked, qrels[qid], 10))
        recall.append(recall_at(ranked, qrels[qid], DEPTH))
        engine_ms.append(body["metrics"]["total_ms"])
    mix = ", ".join(f"{k} {v}" for k, v in sorted(used.items()))
    return (f"{name:<18} nDCG@10={np.mean(ndcg):.4f}  Recall@100={np.mean(recall):.4f}  "
            f"p50={percentile(engine_ms, 50):.1f} ms  p95={percentile(engine_ms, 95):.1f} ms  "
            f"(HTTP in-process p50={percentile(http_ms, 50):.1f} p95={percentile(http_ms, 95):.1f}; used: {mix})")


async def main_async(args: argparse.Namespace) -> None:
    settings = load_settings()
    corpus, queries, qrels = load_beir(Path(args.dir), args.split)
    if args.max_queries:
        queries = dict(list(queries.items())[: args.max_queries])
    print(f"# {Path(args.dir).name}: {len(corpus)} docs, {len(queries)} {args.split} queries", flush=True)
    print(bm25_reference(corpus, queries, qrels), flush=True)
    with servers(settings) as (owner_dsn, redis_url):
        async with app_client(settings, owner_dsn, redis_url) as client:
            _org, headers = await new_tenant(owner_dsn, f"beir-{Path(args.dir).name}-{time.time_ns()}")
            by_memory, rate = await load_corpus(client, headers, corpus)
            print(f"# loaded through POST /v1/memories: {rate:.0f} memories/s (server-side embedding included)",
                  flush=True)
            for name in args.strategies:
                print(await run_strategy(client, headers, name, queries, qrels, by_memory), flush=True)
            if args.write_sample:
                print("# " + await write_overhead(client, owner_dsn, corpus, args.write_sample), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--max-queries", type=int, default=0, help="0 = all queries of the split")
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--write-sample", type=int, default=2048,
                        help="memories per write-overhead run (0 skips the measurement)")
    args = parser.parse_args()
    configure_logs("warning")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

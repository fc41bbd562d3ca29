"""What the BM25 query's per-term postings cap costs in ranking quality and buys in time, at 100K memories.

    python benchmarks/lexical_cap.py --data-dir .pgcontext/bench-100k            # a running service's dir
    python benchmarks/lexical_cap.py --dsn postgresql://postgres:...@host/db --postings 500,1000,exact

``sql/retrieval/lexical_bm25.sql`` reads at most ``postings_per_term`` postings of each query term, in
impact order, and sums BM25 over those (``PGCONTEXT_RETRIEVAL_POSTINGS_PER_TERM``, default 500;
light searches under load use ``PGCONTEXT_ASSEMBLY_LIGHT_COLD_POSTINGS_PER_TERM``, 200). Where a
term's postings are fewer than the cap the sum is exact; in a large org the common terms' lists are
cut, so a memory's score misses the contributions the cut left out. SciFact's 5,183 documents
rarely reach the cap, so the retrieval-quality benchmarks do not see it.

This runs the service's own query, org-wide and unfiltered, with the service's BM25 settings, one
query at a time, over the org that ``benchmarks/assemble_load.py`` loads (its memories are
sentences, titles and runs of sentences of the SciFact corpus). Each memory is mapped back to the
documents it was cut from, so the SciFact train qrels say which memories are relevant to a claim.
For each cap (``exact`` is no cap) it reports the latency (mean, p95) and, over the top
``--k`` memories: MRR of the first relevant memory, relevant memories in the top 10, and the share
of a claim's relevant documents with a memory in the top ``--k``; and the overlap with the exact
ranking's top ``--k``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from uuid import UUID

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: the repository's packages
    sys.path.insert(0, str(ROOT))

from benchmarks._common import running_embedded_dsn  # noqa: E402
from benchmarks.bench_org import SCIFACT, corpus_pieces, scifact_train  # noqa: E402
from service.retrieval.branches import PREFETCH_MARGIN, lexical_args  # noqa: E402
from service.retrieval.types import SearchFilters  # noqa: E402
from service.settings import load_settings  # noqa: E402

EXACT = 1_000_000_000
"""The cap that reads every posting: exact BM25."""


def texts_to_docs(corpus: Path) -> dict[str, set[str]]:
    """Every text ``bench_org.build_texts`` can make from the corpus -> the documents it comes from."""
    out: dict[str, set[str]] = {}
    for doc_id, text in corpus_pieces(corpus):
        out.setdefault(text, set()).add(doc_id)
    return out


@dataclass
class Outcome:
    ms: list[float]
    mrr: float = 0.0
    relevant_top10: float = 0.0
    doc_recall: float = 0.0
    exact_overlap: float = 0.0


BM25: Final = load_settings().retrieval
"""The service's BM25 settings (k1, b, search-context weight), from the environment as it reads them."""


async def rank(statement: asyncpg.prepared_stmt.PreparedStatement, org: UUID, query: str, cap: int,
               k: int) -> tuple[float, list[UUID]]:
    started = time.perf_counter()
    rows = await statement.fetch(org, query, cap, k + PREFETCH_MARGIN, k, BM25.bm25_k1, BM25.bm25_b,
                                 *lexical_args(SearchFilters(), None, BM25.search_context_weight))  # no filters
    return (time.perf_counter() - started) * 1000, [r["id"] for r in rows]


async def measure(dsn: str, caps: list[int], k: int, scifact: Path, max_claims: int) -> None:
    docs_of = texts_to_docs(scifact / "corpus.jsonl")
    qrels = scifact_train(scifact)
    with (scifact / "queries.jsonl").open() as f:
        claims = [(str(q["_id"]), q["text"]) for q in map(json.loads, f) if str(q["_id"]) in qrels][:max_claims]
    conn = await asyncpg.connect(dsn)
    try:
        org = await conn.fetchval("SELECT org_id FROM memories GROUP BY org_id ORDER BY count(*) DESC LIMIT 1")
        texts = {r["id"]: r["text"] for r in await conn.fetch("SELECT id, text FROM memories WHERE org_id = $1", org)}
        unmapped = sum(1 for t in texts.values() if t not in docs_of)
        print(f"# lexical cap: {platform.platform()}, {len(texts)} memories in the org ({unmapped} not from the "
              f"corpus), {len(claims)} SciFact train claims, top {k}", flush=True)
        await conn.execute("SET plan_cache_mode = force_generic_plan")  # as the service runs it unfiltered
        statement = await conn.prepare((ROOT / "sql" / "retrieval" / "lexical_bm25.sql").read_text())
        exact = {qid: (await rank(statement, org, q, EXACT, k))[1] for qid, q in claims}
        print("| postings per term | mean ms | p95 ms | MRR | relevant in top 10 | doc recall@k "
              "| overlap with exact@k |")
        print("|---|---|---|---|---|---|---|")
        for cap in caps:
            await rank(statement, org, claims[0][1], cap, k)  # plan and caches
            out = Outcome(ms=[])
            for qid, query in claims:
                ms, ids = await rank(statement, org, query, cap, k)
                out.ms.append(ms)
                relevant = [bool(docs_of.get(texts[i], set()) & qrels[qid]) for i in ids]
                first = next((n for n, hit in enumerate(relevant) if hit), None)
                out.mrr += 0.0 if first is None else 1 / (first + 1)
                out.relevant_top10 += sum(relevant[:10])
                found = set().union(*(docs_of.get(texts[i], set()) for i in ids)) & qrels[qid]
                out.doc_recall += len(found) / len(qrels[qid])
                out.exact_overlap += len(set(ids) & set(exact[qid])) / max(1, len(exact[qid]))
            n, times = len(claims), sorted(out.ms)
            label = "exact" if cap == EXACT else str(cap)
            print(f"| {label} | {sum(times) / n:.2f} | {times[int(n * 0.95)]:.2f} | {out.mrr / n:.3f} | "
                  f"{out.relevant_top10 / n:.2f} | {out.doc_recall / n:.3f} | {out.exact_overlap / n:.3f} |",
                  flush=True)
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", type=Path, help="PGCONTEXT_DATA_DIR of a running embedded service")
    where.add_argument("--dsn", help="a superuser (or table owner) DSN of the database")
    parser.add_argument("--postings", default="100,200,500,1000,2000,exact",
                        help="caps to measure, comma-separated ('exact': no cap)")
    parser.add_argument("--k", type=int, default=60, help="ranked memories per query (assembly asks 60)")
    parser.add_argument("--claims", type=int, default=1000, help="at most this many train claims")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    args = parser.parse_args()
    caps = [EXACT if c.strip() == "exact" else int(c) for c in args.postings.split(",")]
    dsn = args.dsn or running_embedded_dsn(args.data_dir)
    asyncio.run(measure(dsn, caps, args.k, args.scifact, args.claims))


if __name__ == "__main__":
    main()

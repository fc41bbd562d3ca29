"""Import this repository into a fresh org through the service's ingestion path, then score a hand-made
query set (docs/document_queries.json) per retrieval mode and fused.

    python benchmarks/ingest_repo.py [--root /work/main] [--batch-files 64] [--json out.json]

Servers: PGCONTEXT_DATABASE_URL / DATABASE_URL and REDIS_URL if set, else fresh embedded ones in a
temp dir. Ingestion runs in-process (``service.documents.ingest.ingest``, the handler's code path,
without HTTP) so the time split is the server's own: chunking (tiktoken + outlines), embedding
(the configured embedder) and Postgres (the read of stored hashes and the write transactions).

Scoring: each mode returns its top 5 for the query text as typed. A hit is a result whose path is an
answer's path and whose line span overlaps the answer's range; ``strict`` does not count L0 (file
summary) chunks, whose span is the whole file. Modes: exact, path, symbol (service.documents.lookup),
lexical (the retrieval engine's BM25 branch, document chunks only), semantic (cosine nearest chunks).
``fused`` and ``fused_auto`` are the service's own search (``RetrievalEngine.search``, the code behind
POST /v1/memories/search) with ``modes`` = all five, resp. ``"all"`` (lexical, semantic and the lookup
modes that apply to the query), each mode contributing its top 20 to RRF (k=60), document chunks only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import new_tenant, servers  # noqa: E402
from service.app import build_services, close_services  # noqa: E402
from service.cli.servers import prepare_database  # noqa: E402
from service.documents import lookup  # noqa: E402
from service.documents.ingest import ingest  # noqa: E402
from service.documents.lookup import LookupHit  # noqa: E402
from service.documents.types import FileIn, IngestRequest  # noqa: E402
from service.documents.walk import SkippedFile, walk_tree  # noqa: E402
from service.retrieval import SearchFilters, SearchRequest, SearchTuning  # noqa: E402
from service.retrieval.types import MODES as RETRIEVAL_MODES  # noqa: E402
from service.retrieval.types import Mode  # noqa: E402
from service.runtime import Endpoints, Services  # noqa: E402
from service.settings import load_settings  # noqa: E402

MODES = ("exact", "path", "symbol", "lexical", "semantic")
K = 5
FUSE_DEPTH = 20


@dataclass(frozen=True)
class Result:
    id: UUID
    path: str
    line_start: int
    line_end: int
    level: int


def from_hit(h: LookupHit) -> Result:
    return Result(h.id, h.path, h.line_start, h.line_end, h.level)


async def ingest_tree(services: Services, org: UUID, root: Path, batch_files: int) -> dict[str, Any]:
    skipped: list[SkippedFile] = []
    t0 = time.perf_counter()
    files = list(walk_tree(root, max_file_bytes=services.settings.documents.max_file_bytes, on_skip=skipped.append))
    walk_s = time.perf_counter() - t0
    totals = {"chunking_ms": 0.0, "embedding_ms": 0.0, "database_ms": 0.0}
    chunks = 0
    t1 = time.perf_counter()
    batch: list[FileIn] = []
    size = 0

    async def flush() -> None:
        nonlocal chunks, batch, size
        if not batch:
            return
        response = await ingest(services, org, IngestRequest(files=batch))
        chunks += response.chunks_written
        for name in totals:
            totals[name] += getattr(response.timings, name)
        batch, size = [], 0

    for f in files:
        if batch and (len(batch) >= batch_files or size + f.size > 4_000_000):
            await flush()
        batch.append(FileIn(path=f.path, content=f.content))
        size += f.size
    await flush()
    ingest_s = time.perf_counter() - t1
    # A second pass over the unchanged tree: everything is skipped by hash.
    t2 = time.perf_counter()
    unchanged = 0
    for start in range(0, len(files), batch_files):
        part = files[start : start + batch_files]
        response = await ingest(services, org, IngestRequest(files=[FileIn(path=f.path, content=f.content)
                                                                    for f in part]))
        unchanged += response.unchanged
    reimport_s = time.perf_counter() - t2
    return {
        "files": len(files), "bytes": sum(f.size for f in files), "skipped": len(skipped), "chunks": chunks,
        "walk_s": walk_s, "ingest_s": ingest_s, "files_per_s": len(files) / ingest_s,
        "chunks_per_s": chunks / ingest_s, "chunking_s": totals["chunking_ms"] / 1000,
        "embedding_s": totals["embedding_ms"] / 1000, "postgres_s": totals["database_ms"] / 1000,
        "reimport_unchanged_s": reimport_s, "reimport_unchanged_files": unchanged,
    }


def hit(results: Sequence[Result], answers: Sequence[tuple[str, int, int]], *, strict: bool) -> bool:
    for r in results[:K]:
        if strict and r.level == 0:
            continue
        for path, a, b in answers:
            if r.path == path and r.line_start <= b and a <= r.line_end:
                return True
    return False


async def resolve_answers(services: Services, org: UUID, query: dict[str, Any]) -> list[tuple[str, int, int]]:
    out = []
    async with services.db.tenant(org, readonly=True) as tx:
        for a in query["answers"]:
            if "symbol" in a:
                hits = await lookup.symbol(tx, a["symbol"], limit=50,
                                           filters=lookup.LookupFilters(path_prefix=a["path"]))
                exact = [h for h in hits if h.path == a["path"] and h.symbol == a["symbol"]]
                if not exact:
                    raise SystemExit(f"answer symbol {a['symbol']} not found in {a['path']}")
                out.append((a["path"], exact[0].line_start, exact[0].line_end))
            else:
                out.append((a["path"], int(a["lines"][0]), int(a["lines"][1])))
    return out


async def run_modes(services: Services, org: UUID, query: str, spans: dict[UUID, Result],
                    depth: int) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    vector = (await services.embedder.embed([query]))[0]
    async with services.db.tenant(org, readonly=True) as tx:
        out["exact"] = [from_hit(h) for h in await lookup.exact(tx, query, limit=depth)]
        out["path"] = [from_hit(h) for h in await lookup.path(tx, query, limit=depth)]
        out["symbol"] = [from_hit(h) for h in await lookup.symbol(tx, query, limit=depth)]
        out["semantic"] = [from_hit(h) for h in await lookup.nearest(tx, vector, limit=depth)]
    engine = services.extras["retrieval"]
    try:
        response = await engine.search(org, SearchRequest(  # type: ignore[attr-defined]
            query=query, strategy="lexical", limit=depth, filters=SearchFilters(kinds=["document_chunk"])))
        out["lexical"] = [spans[r.id] for r in response.results if r.id in spans]
    except Exception as exc:  # the retrieval module is another engineer's work in progress
        print(f"lexical failed for {query!r}: {exc}", file=sys.stderr)
        out["lexical"] = []
    depth_tuning = SearchTuning(lookup_candidates=depth, lexical_candidates=depth, semantic_candidates=depth)
    fused: tuple[tuple[str, list[Mode] | Literal["all"]], ...] = (
        ("fused", list(RETRIEVAL_MODES)), ("fused_auto", "all"))
    for name, modes in fused:
        response = await engine.search(org, SearchRequest(  # type: ignore[attr-defined]
            query=query, modes=modes, limit=K, tuning=depth_tuning, filters=SearchFilters(kinds=["document_chunk"])))
        out[name] = [Result(r.id, r.path or "", r.line_start or 0, r.line_end or 0, r.level or 0)
                     for r in response.results]
    return out


async def chunk_spans(services: Services, org: UUID) -> dict[UUID, Result]:
    async with services.db.tenant(org, readonly=True) as tx:
        rows = await tx.conn.fetch("SELECT id, source_path, line_start, line_end, level FROM memories "
                                  "WHERE org_id = $1 AND kind = 'document_chunk'", org)
    return {r["id"]: Result(r["id"], r["source_path"], r["line_start"], r["line_end"], r["level"]) for r in rows}


async def evaluate(services: Services, org: UUID, queries: list[dict[str, Any]]) -> dict[str, Any]:
    spans = await chunk_spans(services, org)
    names = [*MODES, "fused", "fused_auto"]
    hits = {n: {"all": 0, "strict": 0} for n in names}
    by_style: dict[str, dict[str, int]] = {}
    per_query = []
    t0 = time.perf_counter()
    for q in queries:
        answers = await resolve_answers(services, org, q)
        results = await run_modes(services, org, q["query"], spans, FUSE_DEPTH)
        row: dict[str, Any] = {"query": q["query"], "style": q["style"]}
        for n in names:
            got = hit(results[n], answers, strict=False)
            strict = hit(results[n], answers, strict=True)
            hits[n]["all"] += got
            hits[n]["strict"] += strict
            style = by_style.setdefault(f"{q['style']}:{n}", {"all": 0, "strict": 0, "n": 0})
            style["all"] += got
            style["strict"] += strict
            style["n"] += 1
            row[n] = int(got)
        per_query.append(row)
    elapsed = time.perf_counter() - t0
    total = len(queries)
    return {"queries": total, "query_seconds": elapsed,
            "hit_at_5": {m: hits[m]["all"] / total for m in names},
            "strict_hit_at_5": {m: hits[m]["strict"] / total for m in names},
            "by_style": {k: {"hit": v["all"] / v["n"], "strict": v["strict"] / v["n"], "n": v["n"]}
                         for k, v in sorted(by_style.items())},
            "per_query": per_query}


async def main_async(args: argparse.Namespace, owner_dsn: str, redis_url: str) -> dict[str, Any]:
    settings = load_settings()
    app_dsn = await asyncio.to_thread(prepare_database, settings, owner_dsn)
    org_id, _ = await new_tenant(owner_dsn, f"ingest-repo-{int(time.time())}")
    org = UUID(org_id)
    services = await build_services(settings, Endpoints(owner_dsn=owner_dsn, app_dsn=app_dsn, redis_url=redis_url),
                                    None)
    try:
        await services.embedder.embed(["warm up"])
        ingest_stats = await ingest_tree(services, org, Path(args.root), args.batch_files)
        queries = json.loads((ROOT / "docs" / "document_queries.json").read_text())["queries"]
        quality = await evaluate(services, org, queries)
    finally:
        await close_services(services, close_embedder=True)
    return {"machine": {"python": platform.python_version(), "platform": platform.platform()},
            "embedder": settings.embedding.provider, "chunk_tokens": settings.documents.max_chunk_tokens,
            "ingest": ingest_stats, "quality": quality}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(ROOT))
    parser.add_argument("--batch-files", type=int, default=64)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    settings = load_settings()
    with servers(settings) as (owner_dsn, redis_url):
        result = asyncio.run(main_async(args, owner_dsn, redis_url))
    ing = result["ingest"]
    print(f"files {ing['files']} ({ing['bytes'] / 1e6:.2f} MB, {ing['skipped']} skipped), chunks {ing['chunks']}")
    print(f"walk+read {ing['walk_s']:.2f} s; ingest {ing['ingest_s']:.1f} s = {ing['files_per_s']:.1f} files/s, "
          f"{ing['chunks_per_s']:.1f} chunks/s")
    print(f"split: chunking {ing['chunking_s']:.1f} s, embedding {ing['embedding_s']:.1f} s, "
          f"postgres {ing['postgres_s']:.1f} s; re-import unchanged {ing['reimport_unchanged_s']:.2f} s "
          f"({ing['reimport_unchanged_files']} files skipped)")
    q = result["quality"]
    print(f"\nhit@{K} over {q['queries']} queries ({q['query_seconds']:.1f} s)")
    print("| mode | hit@5 | hit@5 without L0 |")
    print("|---|---|---|")
    for mode, value in q["hit_at_5"].items():
        print(f"| {mode} | {value:.2f} | {q['strict_hit_at_5'][mode]:.2f} |")
    print("\nby style (hit@5 / without L0):")
    for key, v in q["by_style"].items():
        print(f"  {key}: {v['hit']:.2f} / {v['strict']:.2f} (n={v['n']})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

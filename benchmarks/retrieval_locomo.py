"""Retrieval and context assembly on conversations (LoCoMo-style), through the service's HTTP API.

    python benchmarks/retrieval_locomo.py ../shared/data/locomo-dev [--categories 1 2 3 4]

DIR holds three files:

* ``corpus.jsonl``: one turn per line (``_id``, ``text``, ``metadata``). ``metadata.sample_id`` names
  the conversation: each gets its own org, so a question only ever sees its own conversation. The
  metadata is sent as the memory's; its ``speaker`` is who said the turn, which ``auto`` search uses
  when a question names them (docs/retrieval.md "Speakers").
  ``metadata.session_date_time`` (e.g. ``1:56 pm on 8 May, 2023``) is sent as the memory's
  ``occurred_at`` (left out if the service rejects the field: one that predates event time). The
  ``--context-turns`` turns before it in the file, of the same conversation and session
  (``metadata.session`` when given), are sent as its ``search_context`` (searched, never packed; left
  out if the service does not take the field).
* ``queries.jsonl``: ``_id``, ``text``, ``metadata.sample_id`` and ``metadata.category``.
* ``qrels.tsv``: header line, then ``query-id  corpus-id  score`` (evidence turns).

It prints one line per search strategy (Recall@10 and binary nDCG@10, overall and per category,
engine latency), an in-process BM25 reference (bm25s per conversation, Porter stemmer, k1 0.9,
b 0.4), then one line per assembly budget: the share of evidence turns whose memory is in
``memories_used``, the mean context tokens, and the share of those tokens spent on the reference
tags that open each memory line (``[...]`` or the number ``n``), counted with tiktoken.

Every assembly line starts from the loaded state: the orgs' access statistics (what earlier lines
packed, as "recently used") are cleared before it, so a line's figures do not depend on which lines
ran before it; within a line, earlier questions' packed memories count as recently used for later
ones, as in a service in use.
Turns are written org-wide (no agent) so the assembling agent sees them all; assembly runs with no
directive, no history, ``reserve_tokens`` 0 and the hot set off (``--use-hot`` turns it on; it
would otherwise fill with whatever earlier questions touched, making results order-dependent).
Unless PGCONTEXT_DEADLINE_MS is set, assembly deadlines are relaxed so that quality does not
depend on how busy the machine is (latency has its own benchmarks).
With no PGCONTEXT_DATABASE_URL / DATABASE_URL it starts embedded Postgres and Redis in a temp dir.
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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    KEEP,
    SEARCH_STRATEGIES,
    app_client,
    ndcg_at,
    new_tenant,
    percentile,
    recall_at,
    servers,
)
from service.logs import configure as configure_logs
from service.retrieval import RetrievalEngine
from service.settings import load_settings
from service.text.tokens import Tokenizers

BATCH = 64
K = 10
AGENT = "locomo-bench"
MODEL = "gpt-4o"
RELAXED_DEADLINES = {"PGCONTEXT_DEADLINE_MS": "5000", "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS": "1000",
                     "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS": "1000"}
# name -> request fields besides agent, query and model
ASSEMBLIES: dict[str, dict[str, Any]] = {
    "assemble_500": {"max_context_tokens": 500},
    "assemble_1000": {"max_context_tokens": 1000},
    "assemble_2000": {"max_context_tokens": 2000},
    "assemble_selective": {"selective": True},
}
_ASSEMBLY_NAME = re.compile(r"assemble_(\d+)")
"""Any ``assemble_N`` runs with ``max_context_tokens`` N (e.g. ``assemble_1500`` for a trade-off curve)."""
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B %Y", "%d %B, %Y", "%B %d, %Y",
                 "%Y-%m-%d %H:%M", "%Y-%m-%d")
_TAG = re.compile(r"\[[^\]\n]*\]|\d+(?= )")
"""A memory line's tag: ``[...]`` (ids, before), or the number that opens it (``1 text``)."""


@dataclass(frozen=True, slots=True)
class Turn:
    id: str
    text: str
    group: str
    occurred_at: datetime | None
    metadata: dict[str, Any]
    context: str = ""
    """The turns before it (same conversation and session), sent as ``search_context``."""


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    text: str
    group: str
    category: str


def parse_when(value: Any) -> datetime | None:
    """A session date such as ``1:56 pm on 8 May, 2023`` (or ISO 8601) as UTC; None if unparseable."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = " ".join(value.split())
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
        for fmt in _DATE_FORMATS:
            try:
                parsed = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
    if parsed is None:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def load_dir(root: Path, categories: set[str] | None) -> tuple[list[Turn], list[Query], dict[str, dict[str, int]]]:
    """Turns, the questions to score (in qrels, in ``categories`` when they have one) and the qrels."""
    turns: list[Turn] = []
    with (root / "corpus.jsonl").open() as f:
        for line in f:
            if not line.strip():
                continue
            doc = json.loads(line)
            meta = doc.get("metadata") or {}
            text = f"{doc.get('title') or ''}\n{doc['text']}".strip()
            turns.append(Turn(str(doc["_id"]), text, str(meta.get("sample_id", "all")),
                              parse_when(meta.get("session_date_time")), meta))
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels.tsv").open() as f:
        next(f)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3 and int(parts[2]) > 0:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries: list[Query] = []
    with (root / "queries.jsonl").open() as f:
        for line in f:
            if not line.strip():
                continue
            q = json.loads(line)
            meta = q.get("metadata") or {}
            category = str(meta.get("category", "-"))
            if str(q["_id"]) not in qrels or (categories and "category" in meta and category not in categories):
                continue
            queries.append(Query(str(q["_id"]), q["text"], str(meta.get("sample_id", "all")), category))
    return turns, queries, qrels


def with_context(turns: Sequence[Turn], before: int) -> list[Turn]:
    """Each turn with the text of up to ``before`` turns preceding it in file order, of the same
    conversation and the same ``metadata.session`` (absent: one session), oldest first."""
    out: list[Turn] = []
    for i, t in enumerate(turns):
        parts: list[str] = []
        for prev in turns[max(0, i - before):i]:
            if prev.group == t.group and prev.metadata.get("session") == t.metadata.get("session"):
                parts.append(prev.text)
        out.append(Turn(t.id, t.text, t.group, t.occurred_at, t.metadata, "\n".join(parts)))
    return out


def assembly_fields(name: str) -> dict[str, Any]:
    """The request fields of an assembly line: a named one, or ``assemble_N`` at N tokens."""
    if name in ASSEMBLIES:
        return ASSEMBLIES[name]
    if (m := _ASSEMBLY_NAME.fullmatch(name)) and int(m.group(1)) > 0:
        return {"max_context_tokens": int(m.group(1))}
    raise argparse.ArgumentTypeError(f"{name!r}: give one of {', '.join(ASSEMBLIES)} or assemble_N (N tokens)")


def assembly_name(name: str) -> str:
    assembly_fields(name)
    return name


def by_category(queries: Sequence[Query], values: Sequence[float]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for q, v in zip(queries, values, strict=True):
        out.setdefault(q.category, []).append(v)
    return dict(sorted(out.items()))


def quality_line(name: str, queries: Sequence[Query], recall: Sequence[float], ndcg: Sequence[float],
                 tail: str) -> str:
    recall_cat, ndcg_cat = by_category(queries, recall), by_category(queries, ndcg)
    cats = "  ".join(f"c{c} {np.mean(recall_cat[c]):.3f}/{np.mean(ndcg_cat[c]):.3f} (n={len(recall_cat[c])})"
                     for c in recall_cat)
    return (f"{name:<20} R@{K}={np.mean(recall):.4f}  nDCG@{K}={np.mean(ndcg):.4f}  "
            f"by category R@{K}/nDCG@{K}: {cats}  {tail}")


def bm25_reference(turns: Sequence[Turn], queries: Sequence[Query], qrels: dict[str, dict[str, int]]) -> str:
    """bm25s per conversation: Porter stemmer, English stop words, k1 0.9, b 0.4."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("porter")
    recall: list[float] = []
    ndcg: list[float] = []
    scored: list[Query] = []
    for group in sorted({t.group for t in turns}):
        docs = [t for t in turns if t.group == group]
        asked = [q for q in queries if q.group == group]
        if not asked:
            continue
        retriever = bm25s.BM25(k1=0.9, b=0.4)
        retriever.index(bm25s.tokenize([t.text for t in docs], stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)
        tokens = bm25s.tokenize([q.text for q in asked], stopwords="en", stemmer=stemmer, show_progress=False)
        results, _scores = retriever.retrieve(tokens, k=min(K, len(docs)), show_progress=False, n_threads=1)
        for q, row in zip(asked, results, strict=True):
            ranked = [docs[i].id for i in row]
            recall.append(recall_at(ranked, qrels[q.id], K))
            ndcg.append(ndcg_at(ranked, qrels[q.id], K))
            scored.append(q)
    return quality_line("bm25s (reference)", scored, recall, ndcg, "(in-process, Porter, stop words en, k1 0.9 b 0.4)")


async def load_group(client: Any, headers: dict[str, str], turns: Sequence[Turn],
                     send_time: list[bool], send_context: list[bool]) -> dict[str, str]:
    """POST one conversation's turns (org-wide memories); returns memory id -> turn id.

    ``send_time[0]``: send ``occurred_at``; set to False (and the batch resent) if the service rejects
    the field as unknown, so the benchmark also runs against a service without event time; likewise
    ``send_context[0]`` for ``search_context``."""
    by_memory: dict[str, str] = {}
    for start in range(0, len(turns), BATCH):
        chunk = turns[start:start + BATCH]
        while True:
            body = []
            for t in chunk:
                memory: dict[str, Any] = {"text": t.text, "kind": "episode", "metadata": t.metadata}
                if send_time[0] and t.occurred_at is not None:
                    memory["occurred_at"] = t.occurred_at.isoformat()
                if send_context[0] and t.context:
                    memory["search_context"] = t.context
                body.append(memory)
            r = await client.post("/v1/memories", json={"memories": body, "on_duplicate": KEEP}, headers=headers)
            if r.status_code == 400 and send_time[0] and "occurred_at" in r.text:
                send_time[0] = False
                continue
            if r.status_code == 400 and send_context[0] and "search_context" in r.text:
                send_context[0] = False
                continue
            r.raise_for_status()
            break
        by_memory.update(zip(r.json()["ids"], (t.id for t in chunk), strict=True))
    return by_memory


async def run_strategy(client: Any, name: str, queries: Sequence[Query], qrels: dict[str, dict[str, int]],
                       orgs: dict[str, tuple[dict[str, str], dict[str, str]]]) -> str:
    strategy, tuning = SEARCH_STRATEGIES[name]
    engine = client.app.state.services.extras["retrieval"]
    assert isinstance(engine, RetrievalEngine)
    engine.cache.clear()  # every strategy pays for its own query embeddings
    recall, ndcg, engine_ms = [], [], []
    used: dict[str, int] = {}
    for q in queries:
        headers, by_memory = orgs[q.group]
        r = await client.post("/v1/memories/search", headers=headers,
                              json={"query": q.text, "strategy": strategy, "limit": K, "tuning": tuning})
        r.raise_for_status()
        body = r.json()
        used[body["strategy"]] = used.get(body["strategy"], 0) + 1
        ranked = [by_memory[x["id"]] for x in body["results"]]
        recall.append(recall_at(ranked, qrels[q.id], K))
        ndcg.append(ndcg_at(ranked, qrels[q.id], K))
        engine_ms.append(body["metrics"]["total_ms"])
    mix = ", ".join(f"{k} {v}" for k, v in sorted(used.items()))
    return quality_line(name, queries, recall, ndcg,
                        f"p50={percentile(engine_ms, 50):.1f} ms p95={percentile(engine_ms, 95):.1f} ms (used: {mix})")


def tag_tokens(context: str, count: Any) -> int:
    """Tokens of the tag opening every memory line (``[...]`` or ``n``) in the context's memories section."""
    inside, total = False, 0
    for line in context.split("\n"):
        if line.startswith("<memories>"):
            inside = True
        elif line.startswith("</memories>"):
            inside = False
        elif inside and (m := _TAG.match(line)):
            total += int(count(m.group(0)))
    return total


async def forget_accesses(client: Any, owner_dsn: str, org_ids: Sequence[str]) -> None:
    """Clear the orgs' access statistics (after writing what the service still holds), so that an
    assembly line starts from the loaded state: the memories an earlier line packed for the same
    questions would otherwise count as recently used, and each line would score higher the more lines
    ran before it (``assemble_1000`` after ``assemble_500``: +0.012 of evidence on LoCoMo dev)."""
    # The app (its pool included) runs on the test client's portal loop, not this one: flush there.
    await asyncio.to_thread(client.blocking_portal.call, client.app.state.services.extras["assembly"].access.flush)
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("DELETE FROM memory_access WHERE org_id = ANY($1::uuid[])", list(org_ids))
    finally:
        await conn.close()


async def run_assembly(client: Any, name: str, queries: Sequence[Query], qrels: dict[str, dict[str, int]],
                       orgs: dict[str, tuple[dict[str, str], dict[str, str]]], tokenizers: Tokenizers,
                       use_hot: bool) -> str:
    evidence: dict[str, list[int]] = {}  # category -> [evidence turns in context, evidence turns]
    context_tokens: list[int] = []
    tags: list[int] = []
    levels: dict[str, int] = {}
    engine_ms: list[float] = []
    for q in queries:
        headers, by_memory = orgs[q.group]
        body = {"agent_id": AGENT, "query": q.text, "model": MODEL, "reserve_tokens": 0,
                "retrieval": {"use_hot": use_hot}, **assembly_fields(name)}
        r = await client.post("/v1/context/assemble", headers=headers, json=body)
        r.raise_for_status()
        out = r.json()
        counter = tokenizers.get(out["budget"]["encoding"])
        used = {by_memory.get(m["id"]) for m in out["memories_used"]}
        wanted = set(qrels[q.id])
        counts = evidence.setdefault(q.category, [0, 0])
        counts[0] += len(wanted & used)
        counts[1] += len(wanted)
        n = counter.count(out["context"])
        context_tokens.append(n)
        tags.append(tag_tokens(out["context"], counter.count))
        levels[out["degradation_level"]] = levels.get(out["degradation_level"], 0) + 1
        engine_ms.append(out["metrics"]["total_ms"])
    cats = "  ".join(f"c{c} {found / wanted:.3f}" for c, (found, wanted) in sorted(evidence.items()))
    found_total, wanted_total = (sum(c[i] for c in evidence.values()) for i in (0, 1))
    mix = ", ".join(f"{k} {v}" for k, v in sorted(levels.items()))
    share = sum(tags) / max(sum(context_tokens), 1)
    return (f"{name:<20} evidence_in_context={found_total / max(wanted_total, 1):.4f}  "
            f"by category: {cats}  mean_context_tokens={np.mean(context_tokens):.1f}  "
            f"tag_token_share={share:.4f}  p50={percentile(engine_ms, 50):.1f} ms (levels: {mix})")


async def main_async(args: argparse.Namespace) -> None:
    env = dict(os.environ)
    if "PGCONTEXT_DEADLINE_MS" not in env:
        env.update(RELAXED_DEADLINES)
    settings = load_settings(env)
    root = Path(args.dir)
    turns, queries, qrels = load_dir(root, set(args.categories) if args.categories else None)
    turns = with_context(turns, args.context_turns)
    if args.max_queries:
        queries = queries[: args.max_queries]
    groups = sorted({t.group for t in turns})
    dated = sum(t.occurred_at is not None for t in turns)
    print(f"# {root.name}: {len(turns)} turns in {len(groups)} conversations ({dated} with a parsed date), "
          f"{len(queries)} questions (categories {', '.join(args.categories) or 'all'})", flush=True)
    print(bm25_reference(turns, queries, qrels), flush=True)
    tokenizers = Tokenizers(settings.assembly.tiktoken_dir or settings.data_dir / "tiktoken")
    with servers(settings) as (owner_dsn, redis_url):
        async with app_client(settings, owner_dsn, redis_url) as client:
            send_time, send_context = [True], [args.context_turns > 0]
            orgs: dict[str, tuple[dict[str, str], dict[str, str]]] = {}
            org_ids: list[str] = []
            started = time.perf_counter()
            for group in groups:
                org_id, headers = await new_tenant(owner_dsn, f"locomo-{group}-{time.time_ns()}")
                org_ids.append(org_id)
                orgs[group] = (headers, await load_group(client, headers, [t for t in turns if t.group == group],
                                                         send_time, send_context))
            sent = "not sent: the service does not take it" if not send_time[0] else "sent" if dated else "none parsed"
            context = (f"the {args.context_turns} turns before" if send_context[0] else
                       "not sent: the service does not take it" if args.context_turns else "not sent")
            print(f"# loaded through POST /v1/memories in {time.perf_counter() - started:.1f} s "
                  f"(occurred_at {sent}; search_context {context}; "
                  f"assembly deadline {settings.assembly.deadline_ms} ms, hot set {'on' if args.use_hot else 'off'})",
                  flush=True)
            for name in args.strategies:
                print(await run_strategy(client, name, queries, qrels, orgs), flush=True)
            for name in args.assemblies:
                await forget_accesses(client, owner_dsn, org_ids)
                print(await run_assembly(client, name, queries, qrels, orgs, tokenizers, args.use_hot), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="directory with corpus.jsonl, queries.jsonl and qrels.tsv")
    parser.add_argument("--categories", nargs="*", default=["1", "2", "3", "4"],
                        help="question categories to score (none given: all)")
    parser.add_argument("--max-queries", type=int, default=0, help="0 = every question")
    parser.add_argument("--strategies", nargs="*", default=list(SEARCH_STRATEGIES), choices=list(SEARCH_STRATEGIES),
                        help="search strategies to score (none given: only the assembly lines)")
    parser.add_argument("--assemblies", nargs="*", default=list(ASSEMBLIES), type=assembly_name,
                        help=f"assembly lines: {', '.join(ASSEMBLIES)}, or assemble_N for N tokens")
    parser.add_argument("--use-hot", action="store_true", help="let assembly use the agent's hot set")
    parser.add_argument("--context-turns", type=int, default=2,
                        help="send this many preceding turns (same conversation and session) as each turn's "
                             "search_context; 0: none")
    args = parser.parse_args()
    configure_logs("warning")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

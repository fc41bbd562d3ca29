"""Selective mode against the naive top-10 on SciFact train (quality, not latency):
``python benchmarks/assemble_load.py --selective-eval N``."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from benchmarks._common import MODEL
from benchmarks.bench_org import scifact_train


def scifact_docs(root: Path) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with (root / "corpus.jsonl").open() as f:
        for line in f:
            doc = json.loads(line)
            ids.append(str(doc["_id"]))
            texts.append(f"{doc.get('title') or ''}. {doc.get('text') or ''}".strip())
    return ids, texts


@dataclass(frozen=True)
class _Line:
    formatted: str


async def selective_eval(root: Path, max_queries: int, doc_ids: list[str], texts: list[str],
                         vectors: npt.NDArray[np.float32]) -> str:
    """Selective mode vs the naive top-10 on SciFact train: tokens packed and relevant documents kept."""
    import dataclasses

    from benchmarks._common import KEEP, app_client, new_tenant, servers
    from service.assembly.format import format_memories, format_memory, memory_tag
    from service.settings import load_settings
    from service.text.tokens import Tokenizers

    base = load_settings()
    # Quality, not latency: no branch may time out here.
    settings = dataclasses.replace(base, assembly=dataclasses.replace(
        base.assembly, deadline_ms=20_000, directive_timeout_ms=10_000, hot_timeout_ms=10_000, cold_timeout_ms=15_000))
    queries = {str(json.loads(line)["_id"]): json.loads(line)["text"] for line in (root / "queries.jsonl").open()}
    relevant = scifact_train(root)
    wanted = [q for q in queries if q in relevant][:max_queries]
    counter = Tokenizers(settings.data_dir / "tiktoken").for_model(MODEL)
    with servers(settings) as (owner_dsn, redis_url):
        async with app_client(settings, owner_dsn, redis_url) as client:
            _, headers = await new_tenant(owner_dsn, "scifact-selective")
            memory_doc: dict[str, str] = {}
            for start in range(0, len(texts), 32):  # whole abstracts: small batches stay under statement_timeout
                batch = range(start, min(start + 32, len(texts)))
                r = await client.post("/v1/memories", headers=headers, json={"on_duplicate": KEEP, "memories": [
                    {"text": texts[i], "kind": "document", "embedding": vectors[i].tolist()} for i in batch]})
                assert r.status_code == 201, r.text
                memory_doc.update({str(m): doc_ids[i] for m, i in zip(r.json()["ids"], batch, strict=True)})
            naive_tokens, naive_recall, sel_tokens, sel_recall, sel_docs = [], [], [], [], []
            tiers: Counter[str] = Counter()
            for qid in wanted:
                rel = relevant[qid]
                r = await client.post("/v1/memories/search", headers=headers,
                                      json={"query": queries[qid], "strategy": "lexical", "limit": 10})
                top = r.json()["results"]
                # written exactly as the assembly writes memories
                block = format_memories([_Line(format_memory(memory_tag(n), x["text"]))
                                         for n, x in enumerate(top, start=1)])
                naive_tokens.append(counter.count(block))
                naive_recall.append(len(rel & {memory_doc[str(x["id"])] for x in top}) / len(rel))
                r = await client.post("/v1/context/assemble", headers=headers, json={
                    "agent_id": "eval", "query": queries[qid], "model": MODEL, "selective": True,
                    "retrieval": {"use_hot": False, "strategy": "lexical", "limit": 30}})
                body = r.json()
                assert body["degradation_level"] == "L1", body["branches"]  # hot is off on purpose
                packed = {memory_doc[m["id"]] for m in body["memories_used"]}
                sel_tokens.append(body["budget"]["memories_tokens"])
                sel_recall.append(len(rel & packed) / len(rel))
                sel_docs.append(len(packed))
                tiers[body["budget"]["tier"]] += 1
    n = len(wanted)
    return (
        f"SciFact train, {n} queries, {MODEL} tokens of the memories section "
        "(BM25 retrieval for both, random document vectors: no model time):\n\n"
        "| context | mean tokens | median tokens | mean docs | recall of relevant docs |\n|---|---|---|---|---|\n"
        f"| naive top-10 | {np.mean(naive_tokens):.0f} | {np.median(naive_tokens):.0f} | 10 | "
        f"{np.mean(naive_recall):.3f} |\n"
        f"| selective mode (from 30 candidates) | {np.mean(sel_tokens):.0f} | {np.median(sel_tokens):.0f} | "
        f"{np.mean(sel_docs):.1f} | {np.mean(sel_recall):.3f} |\n\n"
        f"tiers chosen: {dict(tiers)}; selective uses {np.mean(sel_tokens) / np.mean(naive_tokens):.0%} of the "
        "naive tokens"
    )

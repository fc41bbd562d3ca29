"""``filters.conversations`` in an org of many conversations: does the semantic branch still find a
conversation's nearest messages when that conversation is a small share of the org's rows?

One org, one agent, ``--conversations`` conversations of ``--per`` messages each (distinct SciFact
sentences, roles alternating), appended through the conversation API. For ``--queries`` SciFact claims,
searched as the service searches them (its own query embedding), against one conversation:

* recall@10 of the semantic branch against the exact nearest 10 messages of that conversation
  (cosine over its rows, no index), with the filter alone and with ``sources: ["messages"]``;
* how many of the 10 results are that conversation's messages, and the engine's p50/p95;
* the same searches without a filter, in the same run, as the baseline;

first on the shared HNSW graph, then after ``maintain`` gives the org its own graph.

    .venv/bin/python benchmarks/conversation_filter.py [--conversations 120] [--per 100] [--queries 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import numpy as np
from pgvector import Vector
from pgvector.asyncpg import register_vector

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import app_client, new_tenant, percentile, servers
from benchmarks.retrieval_locomo import RELAXED_DEADLINES
from benchmarks.search_latency_build import SCIFACT, sentence_pool
from service.logs import configure as configure_logs
from service.retrieval import RetrievalEngine, maintenance
from service.settings import load_settings

TARGET = "c7"
FILTERS: dict[str, dict[str, Any]] = {
    "no filter (baseline)": {},
    "conversations": {"conversations": [TARGET]},
    "conversations + messages": {"conversations": [TARGET], "sources": ["messages"]},
}


async def load(client: Any, headers: dict[str, str], conversations: int, per: int) -> float:
    sentences = sentence_pool(conversations * per)
    started = time.perf_counter()
    for c in range(conversations):
        turns = [{"role": "user" if i % 2 else "assistant", "content": sentences[c * per + i]} for i in range(per)]
        for start in range(0, per, 64):
            r = await client.post(f"/v1/conversations/c{c}/messages", headers=headers,
                                  json={"agent_id": "a", "messages": turns[start:start + 64]})
            r.raise_for_status()
    return time.perf_counter() - started


async def measure(client: Any, headers: dict[str, str], claims: list[str], truth: list[set[str]],
                  filters: dict[str, Any]) -> str:
    engine_ms, mine, recall = [], [], []
    for claim, exact in zip(claims, truth, strict=True):
        r = await client.post("/v1/memories/search", headers=headers, json={
            "query": claim, "strategy": "semantic", "limit": 10, "filters": filters})
        r.raise_for_status()
        body = r.json()
        engine_ms.append(body["metrics"]["total_ms"])
        found = {x["id"] for x in body["results"] if (x.get("message") or {}).get("conversation_id") == TARGET}
        mine.append(len(found))
        recall.append(len(found & exact) / len(exact))
    return (f"p50 {percentile(engine_ms, 50):5.1f} ms  p95 {percentile(engine_ms, 95):5.1f} ms  "
            f"its messages in the 10: {np.mean(mine):5.2f}  recall@10 vs exact: {np.mean(recall):.3f}")


async def main_async(args: argparse.Namespace) -> None:
    env = dict(os.environ)
    env.update(RELAXED_DEADLINES)
    settings = load_settings(env)
    with (SCIFACT / "queries.jsonl").open() as f:
        claims = [json.loads(line)["text"] for line in f][: args.queries]
    with servers(settings) as (owner_dsn, redis_url):
        async with app_client(settings, owner_dsn, redis_url) as client:
            org, headers = await new_tenant(owner_dsn, f"conversation-filter-{time.time_ns()}")
            seconds = await load(client, headers, args.conversations, args.per)
            print(f"# conversation_filter: {platform.platform()}, {time.strftime('%Y-%m-%d')}; "
                  f"{args.conversations * args.per} messages in {args.conversations} conversations of {args.per} "
                  f"(loaded in {seconds:.0f} s), {len(claims)} SciFact claims against conversation {TARGET} "
                  f"({100 / args.conversations:.1f}% of the rows), strategy semantic, limit 10", flush=True)
            engine = client.app.state.services.extras["retrieval"]
            assert isinstance(engine, RetrievalEngine)
            conn = await asyncpg.connect(owner_dsn)
            await register_vector(conn)
            try:
                truth = []
                def query_vector(text: str) -> Any:  # the service's own, computed on the app's loop
                    return client.blocking_portal.call(engine.embed_query, UUID(org), text)

                for claim in claims:  # exact cosine over the conversation's rows
                    vector = await asyncio.to_thread(query_vector, claim)
                    rows = await conn.fetch("SELECT id::text FROM memories WHERE org_id = $1 AND conversation_id = $2 "
                                            "ORDER BY embedding <=> $3 LIMIT 10", UUID(org), TARGET, Vector(vector))
                    truth.append({r["id"] for r in rows})
                for graph in ("shared HNSW graph", "the org's own graph"):
                    if graph == "the org's own graph":
                        await maintenance.maintain(conn, threshold=args.conversations * args.per // 2)
                    for label, filters in FILTERS.items():
                        await measure(client, headers, claims[:5], truth[:5], filters)  # plans and caches
                        line = await measure(client, headers, claims, truth, filters)
                        print(f"{graph:<20} {label:<26} {line}", flush=True)
            finally:
                await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=120)
    parser.add_argument("--per", type=int, default=100, help="messages per conversation")
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    if args.conversations <= 7:
        parser.error(f"--conversations must be above 7 (the searches target {TARGET})")
    configure_logs("warning")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()

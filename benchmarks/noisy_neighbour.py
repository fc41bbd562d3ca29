"""Noisy neighbour: does org B flooding the service change org A's context assembly?

    python benchmarks/noisy_neighbour.py                    # embedded servers, the default rate limits
    PGCONTEXT_RATE_LIMIT_RPS=50 python benchmarks/noisy_neighbour.py --phase-seconds 15 --rounds 3

Starts ``pgcontext serve`` (embedded Postgres + Redis in a temporary data dir, one worker) with the
service's default per-org rate limits unless ``PGCONTEXT_RATE_LIMIT_*`` say otherwise, loads org A
and org B with ``--memories`` SciFact texts each (real embeddings, cached in
``.pgcontext/bench-cache``) over ``--agents`` agents, A's with a directive each. Then, in the same
run, alternating ``--rounds`` times:

* **solo**: org A sends assemblies at a fixed rate (``--a-rate`` per second, open loop: each request
  is sent on schedule whatever the previous ones do, so a slow service shows as latency, not as
  fewer requests);
* **flood**: the same, while org B sends ``--flood-factor`` times its rate limit (in the limiter's
  own tokens, priced by :mod:`service.tenancy.ratecost` as the service prices them) of, in turn:
  ``GET /v1/memories/hot`` for a new agent id each time, and searches and assemblies with a
  different 4,000-character query each time (SciFact sentences, ``strategy: semantic``: every one
  asks the embedder and misses its cache).

Org B's client runs in a process of its own (``--flood-nice``, default 10: in production B's client
runs elsewhere; here it shares the machine's cores, and its CPU is not the service's), so B's load
generation does not delay A's client. Reported for both sides: org A's p50/p95/p99 latency and
degradation-level shares, the p99 ratio and the largest level-share difference; org B's answers.
Acceptance: p99 ratio <= 1.2 and every level's share within 20 points.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import MODEL, percentile  # noqa: E402
from benchmarks.assembly_driver import assemble_body  # noqa: E402
from benchmarks.bench_org import (  # noqa: E402
    SCIFACT,
    add_fresh_queries_flag,
    agent_of,
    build_texts,
    embeddings_for,
    load_queries,
    service,
)
from service.embedded.postgres import free_port  # noqa: E402
from service.settings import RateLimitSettings, load_settings  # noqa: E402
from service.tenancy.ratecost import base_cost, work_cost  # noqa: E402

LEVELS = ("L0", "L1", "L2")
JSON = {"Content-Type": "application/json"}


@dataclass
class Phase:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    levels: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    flood: Counter[str] = field(default_factory=Counter)

    def add(self, other: Phase) -> None:
        self.latencies_ms += other.latencies_ms
        self.levels.update(other.levels)
        self.errors.update(other.errors)
        self.flood.update(other.flood)

    def mix(self) -> dict[str, float]:
        total = sum(self.levels.values()) or 1
        return {level: self.levels[level] / total for level in LEVELS}

    def row(self) -> str:
        p = [percentile(self.latencies_ms, q) for q in (50, 95, 99)]
        mix = " / ".join(f"{v:.1%}" for v in self.mix().values())
        flood = ", ".join(f"{k}: {v}" for k, v in sorted(self.flood.items())) or "-"
        return (f"| {self.name} | {len(self.latencies_ms)} | {p[0]:.1f} | {p[1]:.1f} | {p[2]:.1f} | {mix} | "
                f"{dict(self.errors) or '-'} | {flood} |")


def create_org_b(data_dir: Path) -> str:
    """Org B and a key for it, through the CLI against the running embedded servers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
    env["PGCONTEXT_DATA_DIR"] = str(data_dir)
    cli = [sys.executable, "-m", "service.cli"]
    subprocess.run([*cli, "orgs", "create", "noisy-b"], cwd=ROOT, env=env, check=True, capture_output=True)
    out = subprocess.run([*cli, "keys", "create", "--org", "noisy-b"], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


async def org_a(http: aiohttp.ClientSession, phase: Phase, rate: float, seconds: float, queries: list[str],
                agents: int, rng: random.Random) -> None:
    """Open loop: one assembly every 1/rate s, each in its own task."""

    async def one(i: int) -> None:
        body = msgspec.json.encode(assemble_body(i, queries, agents, rng))
        started = time.perf_counter()
        try:
            async with http.post("/v1/context/assemble", data=body, headers=JSON) as r:
                raw = await r.read()
                status = r.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            phase.errors[type(exc).__name__] += 1
            return
        elapsed = (time.perf_counter() - started) * 1000
        if status != 200:
            phase.errors[str(status)] += 1
            return
        phase.latencies_ms.append(elapsed)
        phase.levels[msgspec.json.decode(raw)["degradation_level"]] += 1

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


def flood_bodies(kind: str, sentences: list[str], rng: random.Random) -> tuple[str, str, dict[str, Any] | None]:
    """(method, path, JSON body) of one of org B's requests: a new agent id, a new 4,000-character query."""
    if kind == "hot":
        return "GET", f"/v1/memories/hot?agent_id=new-{uuid.uuid4().hex}", None
    query = ""
    while len(query) < 4000:
        query += rng.choice(sentences) + " "
    query = query[:4000]
    if kind == "search":
        return "POST", "/v1/memories/search", {"query": query, "strategy": "semantic"}
    return "POST", "/v1/context/assemble", {"agent_id": f"new-{uuid.uuid4().hex[:12]}", "query": query,
                                           "model": MODEL, "max_context_tokens": 4000,
                                           "retrieval": {"strategy": "semantic"}}


def price(limits: RateLimitSettings, kind: str, sentences: list[str]) -> int:
    """What the service charges for one of B's requests (a hot read of a new agent also pays its miss)."""
    method, path, body = flood_bodies(kind, sentences, random.Random(0))
    route = path.split("?")[0]
    size = len(msgspec.json.encode(body)) if body is not None else 0
    cost = base_cost(limits, method, route, size) + work_cost(limits, method, route, body)
    return min(limits.burst, cost + (limits.hot_miss_cost if kind == "hot" else 0))


def flood(url: str, key: str, tokens_per_s: float, seconds: float, kinds: list[str], costs: list[int],
          sentences: list[str], niceness: int) -> dict[str, int]:
    """Org B, in its own process: open loop at ``tokens_per_s`` of its rate-limit tokens for ``seconds``."""
    os.nice(niceness)
    return asyncio.run(_flood(url, key, tokens_per_s, seconds, kinds, costs, sentences))


async def _flood(url: str, key: str, tokens_per_s: float, seconds: float, kinds: list[str], costs: list[int],
                 sentences: list[str]) -> dict[str, int]:
    answers: Counter[str] = Counter()
    rng = random.Random()
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {key}"}, connector=connector,
                                     timeout=aiohttp.ClientTimeout(total=30)) as http:

        async def one(kind: str) -> None:
            method, path, body = flood_bodies(kind, sentences, rng)
            try:
                data = msgspec.json.encode(body) if body is not None else None
                async with http.request(method, path, data=data, headers=JSON if data else None) as r:
                    await r.read()
                    answers[f"{kind} {r.status}"] += 1
            except (aiohttp.ClientError, TimeoutError) as exc:
                answers[f"{kind} {type(exc).__name__}"] += 1

        tasks: list[asyncio.Task[None]] = []
        start, due, i = time.perf_counter(), 0.0, 0
        while due < seconds:
            await asyncio.sleep(max(0.0, start + due - time.perf_counter()))
            tasks.append(asyncio.create_task(one(kinds[i % len(kinds)])))
            due += costs[i % len(kinds)] / tokens_per_s
            i += 1
        await asyncio.gather(*tasks)
    return dict(answers)


async def run(url: str, key_a: str, key_b: str, args: argparse.Namespace, queries: list[str],
              sentences: list[str], limits: RateLimitSettings) -> bool:
    kinds = args.flood_kinds.split(",")
    costs = [price(limits, kind, sentences) for kind in kinds]
    print(f"B's requests and their prices in tokens: {dict(zip(kinds, costs, strict=True))}", flush=True)
    connector = aiohttp.TCPConnector(limit=64)
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        await loop.run_in_executor(pool, os.getpid)  # start B's process before anything is measured
        async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {key_a}"}, connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=30)) as a:
            rng = random.Random(5)
            await org_a(a, Phase("warm-up"), args.a_rate, 5, queries, args.agents, rng)
            solo, flooded = Phase("A solo (all rounds)"), Phase("A while B floods (all rounds)")
            for round_ in range(args.rounds):
                for name in ("solo", "flood"):
                    phase = Phase(f"{name} {round_ + 1}")
                    b = None
                    if name == "flood":
                        b = loop.run_in_executor(pool, flood, url, key_b, args.flood_factor * limits.rps,
                                                 args.phase_seconds + 1.5, kinds, costs, sentences, args.flood_nice)
                        await asyncio.sleep(1.0)  # B's bucket is empty and the flood at full rate before A starts
                    await org_a(a, phase, args.a_rate, args.phase_seconds, queries, args.agents, rng)
                    if b is not None:
                        phase.flood.update(await b)
                    print(phase.row(), flush=True)
                    (solo if name == "solo" else flooded).add(phase)
                    await asyncio.sleep(1.0)
    p99_solo, p99_flood = percentile(solo.latencies_ms, 99), percentile(flooded.latencies_ms, 99)
    shift = max(abs(flooded.mix()[k] - solo.mix()[k]) for k in LEVELS)
    print("|---|---|---|---|---|---|---|---|")
    print(solo.row())
    print(flooded.row())
    ratio = p99_flood / p99_solo
    passed = ratio <= 1.2 and shift <= 0.2
    admitted = sum(v for k, v in flooded.flood.items() if k.endswith(" 200"))
    print(f"\np99 flood / solo = {ratio:.2f}; largest level-share difference = {shift * 100:.1f} points "
          f"(acceptance: p99 ratio <= 1.20 and level shares within 20 points: {'PASS' if passed else 'FAIL'})")
    print(f"B: {admitted} requests answered 200 in {args.rounds} x {args.phase_seconds + 1.5:g} s of flood")
    print(f"limits: {limits.rps:g} tokens/s, burst {limits.burst}, heavy cost {limits.heavy_cost}, "
          f"embed chars/token {limits.embed_chars_per_token} (up to {limits.embed_max_chars}), "
          f"text chars/token {limits.text_chars_per_token}, body bytes/token {limits.body_bytes_per_token}, "
          f"hot miss {limits.hot_miss_cost}, {limits.max_in_flight} in flight per org; "
          f"B sent {args.flood_factor:g}x its rate ({args.flood_kinds}, client at nice {args.flood_nice}); "
          f"A at {args.a_rate:g} assemblies/s; load average now {os.getloadavg()[0]:.1f}")
    return passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=2000, help="memories per org")
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--a-rate", type=float, default=20.0, help="org A's assemblies per second")
    parser.add_argument("--flood-factor", type=float, default=3.0, help="org B's rate, in multiples of its limit")
    parser.add_argument("--flood-kinds", default="hot,search,hot,assemble",
                        help="org B's requests, in turn: hot (new agent id), search, assemble (4,000-char queries)")
    parser.add_argument("--flood-nice", type=int, default=10, help="niceness of org B's client process")
    parser.add_argument("--phase-seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3, help="solo/flood pairs (interleaved, same run)")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    add_fresh_queries_flag(parser)
    args = parser.parse_args()

    texts = build_texts(args.scifact / "corpus.jsonl", args.memories)
    vectors = embeddings_for(texts)
    queries = load_queries(args.scifact, fresh=args.fresh_queries)
    print(f"# noisy neighbour, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="pgc-noisy-") as tmp:
        data_dir = Path(tmp)
        limits = load_settings().rate_limit  # the service's defaults, unless PGCONTEXT_RATE_LIMIT_* say otherwise
        env = {"PGCONTEXT_RATE_LIMIT_RPS": str(limits.rps),
               "PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT": str(limits.max_in_flight),
               **{k: v for k, v in os.environ.items() if k.startswith("PGCONTEXT_RATE_LIMIT_")}}
        with service(data_dir, free_port(), env_extra=env) as (url, key_a):
            assert key_a is not None, "the first start prints the default org's key"
            key_b = create_org_b(data_dir)
            started = time.perf_counter()
            for key in (key_a, key_b):  # loading is not what is measured: bulk writes get the time they need
                asyncio.run(_load(url, key, texts, vectors, args.agents))
            print(f"orgs A and B: {len(texts)} memories each, loaded in {time.perf_counter() - started:.0f} s",
                  flush=True)

            async def directives() -> None:
                async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key_a}"}) as http:
                    for i in range(args.agents):
                        r = await http.put(f"/v1/agents/agent-{i}/directive",
                                           json={"content": f"You are agent {i}. Cite memories by number."})
                        assert r.status_code == 200, r.text

            asyncio.run(directives())
            print("| phase | A requests | p50 ms | p95 ms | p99 ms | A levels L0 / L1 / L2 | A errors | B answers |")
            print("|---|---|---|---|---|---|---|---|")
            sentences = [t for t in texts if len(t) >= 40]
            passed = asyncio.run(run(url, key_a, key_b, args, queries, sentences, limits))
            counters = [line for line in httpx.get(f"{url}/metrics").text.splitlines()
                        if line.startswith(("pgcontext_rate_limit", "pgcontext_assembly_shed_total"))]
            print("service counters:", "; ".join(counters) or "-")
    sys.exit(0 if passed else 1)


async def _load(url: str, key: str, texts: list[str], vectors: Any, agents: int) -> None:
    """Org's memories in batches of 128 (vectors given), each retried while its org's bucket refills:
    a batch's body (~1 MB of JSON vectors) costs a good part of a bucket (``body_bytes_per_token``)."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=300) as http:
        for start in range(0, len(texts), 128):
            body = {"memories": [{"text": texts[i], "agent_id": agent_of(i, agents, 10),
                                  "embedding": vectors[i].tolist(), "importance": round((i * 37 % 100) / 100, 2),
                                  "kind": "fact" if i % 3 else "episode"}
                                 for i in range(start, min(start + 128, len(texts)))]}
            for _ in range(60):
                r = await http.post("/v1/memories", json=body)
                if r.status_code not in (429, 503):
                    break
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))
            if r.status_code != 201:
                raise SystemExit(f"load failed: {r.status_code} {r.text[:300]}")


if __name__ == "__main__":
    main()

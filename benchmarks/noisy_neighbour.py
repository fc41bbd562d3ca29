"""Noisy neighbour: does org B flooding the service change org A's context assembly?

    python benchmarks/noisy_neighbour.py                    # embedded servers, default rate limits
    python benchmarks/noisy_neighbour.py --phase-seconds 30 --rounds 3

Starts ``pgcontext serve`` (embedded Postgres + Redis in a temporary data dir, the default per-org
rate limits unless ``PGCONTEXT_RATE_LIMIT_*`` are set), loads org A with ``--memories`` SciFact texts
(real embeddings, cached in ``.pgcontext/bench-cache``) over ``--agents`` agents, each with a
directive, and creates org B. Then, in the same run, alternating ``--rounds`` times:

* **solo**: org A sends assemblies at a fixed rate (``--a-rate`` per second, open loop: each request
  is sent on schedule whatever the previous ones do, so a slow service shows as latency, not as
  fewer requests);
* **flood**: the same, while org B sends ``--flood-factor`` times its rate limit (in tokens) of:
  ``GET /v1/memories/hot`` for a new agent id each time, and searches and assemblies with
  4,000-character queries (``strategy: semantic``, so each asks the embedder).

Reported for both: org A's p50/p95/p99 latency and degradation-level mix, the p99 ratio and the
largest level-share difference; org B's answers (200 / 429 / other). Acceptance (issue 13): A's p99
and level mix within 20% of solo. Everything runs on one machine (service, Postgres, Redis, the
load generator), so the flood also competes for the same cores through the load generator itself.
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
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import percentile  # noqa: E402
from benchmarks.assemble_load import (  # noqa: E402
    MODEL,
    SCIFACT,
    assemble_body,
    build_texts,
    embeddings_for,
    load_org,
    load_queries,
    service,
)
from service.embedded import free_port  # noqa: E402
from service.settings import load_settings  # noqa: E402

LEVELS = ("L0", "L1", "L2")


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
        mix = " ".join(f"{k} {v:.1%}" for k, v in self.mix().items())
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


async def org_a(http: httpx.AsyncClient, phase: Phase, rate: float, seconds: float, queries: list[str],
                agents: int, rng: random.Random) -> None:
    """Open loop: one assembly every 1/rate s, each in its own task."""

    async def one(i: int) -> None:
        started = time.perf_counter()
        try:
            r = await http.post("/v1/context/assemble", json=assemble_body(i, queries, agents, rng))
        except httpx.HTTPError as exc:
            phase.errors[type(exc).__name__] += 1
            return
        elapsed = (time.perf_counter() - started) * 1000
        if r.status_code != 200:
            phase.errors[str(r.status_code)] += 1
            return
        phase.latencies_ms.append(elapsed)
        phase.levels[r.json()["degradation_level"]] += 1

    tasks: list[asyncio.Task[None]] = []
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i / rate - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


async def org_b(http: httpx.AsyncClient, phase: Phase, tokens_per_s: float, heavy_cost: int,
                stop: asyncio.Event, kinds: tuple[str, ...]) -> None:
    """Open loop at ``tokens_per_s`` of org B's rate-limit tokens: new-agent hot sets (1 token) and
    oversized semantic searches and assemblies (``heavy_cost`` each), in turn."""
    long_query = ("what did the committee decide about the quarterly budget and the hiring plan " * 60)[:4000]
    average_cost = sum(1 if k == "hot" else heavy_cost for k in kinds) / len(kinds)
    interval = average_cost / tokens_per_s

    async def one(kind: str) -> None:
        try:
            if kind == "hot":
                r = await http.get("/v1/memories/hot", params={"agent_id": f"new-{uuid.uuid4().hex}"})
            elif kind == "search":
                r = await http.post("/v1/memories/search", json={"query": long_query, "strategy": "semantic"})
            else:
                r = await http.post("/v1/context/assemble", json={
                    "agent_id": f"new-{uuid.uuid4().hex[:12]}", "query": long_query, "model": MODEL,
                    "max_context_tokens": 4000, "retrieval": {"strategy": "semantic"}})
            phase.flood[f"{kind} {r.status_code}"] += 1
        except httpx.HTTPError as exc:
            phase.flood[f"{kind} {type(exc).__name__}"] += 1

    tasks: list[asyncio.Task[None]] = []
    start, i = time.perf_counter(), 0
    while not stop.is_set():
        await asyncio.sleep(max(0.0, start + i * interval - time.perf_counter()))
        tasks.append(asyncio.create_task(one(kinds[i % len(kinds)])))
        i += 1
    await asyncio.gather(*tasks)


async def run(url: str, key_a: str, key_b: str, args: argparse.Namespace, queries: list[str]) -> None:
    limits = load_settings().rate_limit
    pool = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key_a}"}, timeout=30,
                                 limits=pool) as a, \
            httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key_b}"}, timeout=30,
                              limits=pool) as b:
        rng = random.Random(5)
        warm = Phase("warm-up")
        await org_a(a, warm, args.a_rate, 5, queries, args.agents, rng)
        solo, flood = Phase("A solo"), Phase("A while B floods")
        for round_ in range(args.rounds):
            for name in ("solo", "flood"):
                phase = Phase(f"{name} {round_ + 1}")
                stop = asyncio.Event()
                flooder = (asyncio.create_task(org_b(b, phase, args.flood_factor * limits.rps, limits.heavy_cost, stop,
                                                   tuple(args.flood_kinds.split(","))))
                           if name == "flood" else None)
                if flooder is not None:
                    await asyncio.sleep(1.0)  # B's bucket is empty and the flood at full rate before A starts
                await org_a(a, phase, args.a_rate, args.phase_seconds, queries, args.agents, rng)
                stop.set()
                if flooder is not None:
                    await flooder
                print(phase.row(), flush=True)
                (solo if name == "solo" else flood).add(phase)
                await asyncio.sleep(1.0)
    p99_solo, p99_flood = percentile(solo.latencies_ms, 99), percentile(flood.latencies_ms, 99)
    shift = max(abs(flood.mix()[k] - solo.mix()[k]) for k in LEVELS)
    print()
    print("| phase | A requests | p50 ms | p95 ms | p99 ms | A levels | A errors | B answers |")
    print("|---|---|---|---|---|---|---|---|")
    print(solo.row())
    print(flood.row())
    ratio = p99_flood / p99_solo
    print(f"\np99 flood / solo = {ratio:.2f}; largest level-share difference = {shift:.1%} "
          f"(acceptance: p99 ratio <= 1.20 and level shares within 20 points: "
          f"{'PASS' if ratio <= 1.2 and shift <= 0.2 else 'FAIL'})")
    print(f"rate limit: {limits.rps:g} tokens/s, burst {limits.burst}, heavy cost {limits.heavy_cost}, "
          f"{limits.max_in_flight} requests in flight per org; "
          f"B sent {args.flood_factor:g}x that ({args.flood_kinds}); A at {args.a_rate:g} assemblies/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--a-rate", type=float, default=20.0, help="org A's assemblies per second")
    parser.add_argument("--flood-factor", type=float, default=1.5, help="org B's rate, in multiples of its limit")
    parser.add_argument("--flood-kinds", default="hot,search,hot,assemble",
                        help="org B's requests, in turn: hot (new agent id), search, assemble (4,000-char queries)")
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2, help="solo/flood pairs (interleaved, same run)")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    args = parser.parse_args()

    texts = build_texts(args.scifact / "corpus.jsonl", args.memories)
    vectors = embeddings_for(texts)
    queries = load_queries(args.scifact)
    print(f"# noisy neighbour, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="pgc-noisy-") as tmp:
        data_dir = Path(tmp)
        defaults = load_settings().rate_limit  # the service's defaults, unless PGCONTEXT_RATE_LIMIT_* say otherwise
        limits = {"PGCONTEXT_RATE_LIMIT_RPS": str(defaults.rps),
                  "PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT": str(defaults.max_in_flight),
                  **{k: v for k, v in os.environ.items() if k.startswith("PGCONTEXT_RATE_LIMIT_")}}
        with service(data_dir, free_port(), env_extra=limits) as (url, key_a):
            assert key_a is not None, "the first start prints the default org's key"
            headers = {"Authorization": f"Bearer {key_a}"}
            seconds = asyncio.run(load_org(url, headers, texts, vectors, args.agents, 10))
            print(f"org A: {len(texts)} memories loaded in {seconds:.0f} s", flush=True)

            async def directives() -> None:
                async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                    for i in range(args.agents):
                        r = await http.put(f"/v1/agents/agent-{i}/directive",
                                           json={"content": f"You are agent {i}. Cite memories by number."})
                        assert r.status_code == 200, r.text

            asyncio.run(directives())
            key_b = create_org_b(data_dir)
            print("| phase | A requests | p50 ms | p95 ms | p99 ms | A levels | A errors | B answers |")
            print("|---|---|---|---|---|---|---|---|")
            asyncio.run(run(url, key_a, key_b, args, queries))


if __name__ == "__main__":
    main()

"""Goodput under overload: useful assemblies per second at 64 and 400 closed-loop clients.

    python benchmarks/overload.py --scifact /work/shared/data/scifact
    python benchmarks/overload.py --baseline-tree /tmp/pgcontext-old   # old code vs this tree, same run

Starts ``pgcontext serve`` on the embedded default (see ``benchmarks/assemble_load.py``), loads an
org of ``--memories`` SciFact memories once, then for each service under test (this tree, and with
``--baseline-tree`` another checkout of the project, serving the same data directory one after the
other) and each client count (``--clients``, default 64,400) runs two phases of ``--seconds``:

* **impatient**: every client retries at once after a 503 (``Retry-After`` ignored);
* **polite**: a client sleeps ``Retry-After`` (with ±20% jitter) after a 503.

Each client gives up on a request after ``--patience`` seconds (it disconnects) and sends the next.
A **useful** answer is a 200 with memories in its context (level L0 or L1: an L2 holds only
the directive and the history) that arrived within the client's patience; goodput is useful
answers per second. Reported per phase: goodput, answers/s (every 200 within patience) and their
level mix, 503s per second, abandoned requests, client p50/p99 of those answers and the server's
``metrics.queued_ms`` p50/p99. The load generator shares the machine with the service: compare rows of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import cpu_seconds_of, cpu_used, percentile, postmaster_pid, service_pid, tree_pids  # noqa: E402
from benchmarks.assembly_driver import assemble_body  # noqa: E402
from benchmarks.bench_org import add_fresh_queries_flag, load_queries, prepare_org, service  # noqa: E402
from service.embedded.postgres import free_port  # noqa: E402


class _Metrics(msgspec.Struct):
    queued_ms: float | None = None
    total_ms: float = 0.0


class _Assembled(msgspec.Struct):
    degradation_level: str
    metrics: _Metrics


_decode = msgspec.json.Decoder(_Assembled).decode


@dataclass
class Phase:
    tree: str
    clients: int
    retry: str
    seconds: float = 0.0
    useful_ms: list[float] = field(default_factory=list)
    """Client latency of every 200 that arrived within the client's patience."""
    queued_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    """The server's ``metrics.total_ms`` of those answers (admission to answer)."""
    levels: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    refusals: Counter[str] = field(default_factory=Counter)
    """``details.reason`` of the 503s (the old code gives none)."""
    late: int = 0
    """200s that arrived after the client's patience (the client had stopped waiting)."""
    cpu_s: dict[str, float] = field(default_factory=dict)
    """CPU seconds the phase cost the service process, Postgres (all its processes) and this load generator."""

    @property
    def goodput(self) -> float:
        useful = self.levels["L0"] + self.levels["L1"]
        return useful / self.seconds if self.seconds else 0.0

    @property
    def answers(self) -> float:
        return len(self.useful_ms) / self.seconds if self.seconds else 0.0

    def row(self, peak: float | None) -> str:
        ok = max(len(self.useful_ms), 1)
        mix = ", ".join(f"{k} {100 * v / ok:.1f}%" for k, v in sorted(self.levels.items())) or "-"
        ratio = f"{self.goodput / peak:.2f}" if peak else "-"
        queued = (f"{percentile(self.queued_ms, 50):.0f} / {percentile(self.queued_ms, 99):.0f}"
                  if self.queued_ms else "-")
        served = (f"{percentile(self.total_ms, 50):.0f} / {percentile(self.total_ms, 99):.0f}"
                  if self.total_ms else "-")
        return (f"| {self.tree} | {self.clients} | {self.retry} | {self.goodput:.1f} | {ratio} | "
                f"{self.answers:.1f} | {mix} | "
                f"{self.statuses['503'] / self.seconds:.0f} | {self.statuses['abandoned']} | "
                f"{sum(v for k, v in self.statuses.items() if k not in ('200', '503', 'abandoned'))} | "
                f"{percentile(self.useful_ms, 50):.0f} / {percentile(self.useful_ms, 99):.0f} | {queued} | {served} | "
                f"{self.cpu_share('service')} / {self.cpu_share('postgres')} / {self.cpu_share('loadgen')} |")

    def cpu_share(self, part: str) -> str:
        """Cores used on average during the phase."""
        return f"{self.cpu_s.get(part, 0.0) / self.seconds:.2f}" if self.seconds else "-"


HEADER = ("| code | clients | after 503 | goodput/s (L0+L1) | vs peak | answers/s | levels | 503/s | abandoned "
          "| other errors | answer p50 / p99 ms | server queued p50 / p99 ms "
          "| server assembly p50 / p99 ms | cores: service / Postgres / clients |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


async def run_phase(url: str, key: str, queries: list[str], agents: int, phase: Phase, seconds: float,
                    patience: float, offset: int) -> None:
    connector = aiohttp.TCPConnector(limit=phase.clients + 8)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    encode = msgspec.json.encode
    rng = random.Random(phase.clients)
    counter = iter(range(offset, offset + 10_000_000))
    stop_at = time.perf_counter() + seconds
    async with aiohttp.ClientSession(url, headers=headers, connector=connector) as http:

        async def client() -> None:
            for i in counter:
                now = time.perf_counter()
                if now >= stop_at:
                    return
                body = encode(assemble_body(i, queries, agents, rng))
                try:
                    async with asyncio.timeout(patience):
                        async with http.post("/v1/context/assemble", data=body) as r:
                            status, raw, retry_after = r.status, await r.read(), r.headers.get("Retry-After")
                except TimeoutError:
                    phase.statuses["abandoned"] += 1
                    continue
                except aiohttp.ClientError as exc:
                    phase.statuses[type(exc).__name__] += 1
                    await asyncio.sleep(0.01)
                    continue
                elapsed = time.perf_counter() - now
                phase.statuses[str(status)] += 1
                if status == 200:
                    out = _decode(raw)
                    if elapsed <= patience:  # (each 200 inside the patience, whatever its level)
                        phase.useful_ms.append(elapsed * 1000)
                        phase.levels[out.degradation_level] += 1
                        phase.queued_ms.append(out.metrics.queued_ms or 0.0)
                        phase.total_ms.append(out.metrics.total_ms)
                    else:
                        phase.late += 1
                elif status == 503:
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        phase.refusals[str(json.loads(raw)["error"]["details"].get("reason"))] += 1
                if status == 503 and phase.retry == "polite" and retry_after:
                    pause = float(retry_after) * rng.uniform(0.8, 1.2)
                    await asyncio.sleep(min(pause, max(0.0, stop_at - time.perf_counter())))

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(phase.clients)))
        phase.seconds = time.perf_counter() - started


async def warm_up(url: str, key: str, queries: list[str], agents: int) -> None:
    phase = Phase("warmup", 4, "polite")
    await run_phase(url, key, queries, agents, phase, 15, 10, 0)


def deadline_env(deadline_ms: int) -> dict[str, str]:
    """The outer deadline and the hot and directive branch timeouts in the defaults' proportions (40/15/5)."""
    return {"PGCONTEXT_DEADLINE_MS": str(deadline_ms),
            "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS": str(max(1, deadline_ms * 15 // 40)),
            "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS": str(max(1, deadline_ms * 5 // 40))}


def add_same_run_args(parser: argparse.ArgumentParser, memories: int = 20_000) -> None:
    """The options every same-run (old vs new) benchmark here shares."""
    parser.add_argument("--memories", type=int, default=memories)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--deadline-ms", type=int, default=40,
                        help="PGCONTEXT_DEADLINE_MS of both services (hot / directive timeouts scale with it): "
                             "a machine shared with other work may not hold 40 ms for anyone")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout to measure in the same run")
    parser.add_argument("--data-dir", type=Path, help="keep the embedded servers and loaded org here (reused)")
    parser.add_argument("--scifact", type=Path, default=ROOT.parent / "shared" / "data" / "scifact")
    add_fresh_queries_flag(parser)
    parser.add_argument("--random-vectors", action="store_true", help="dry run: random vectors, no model")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_same_run_args(parser)
    parser.add_argument("--clients", default="64,400")
    parser.add_argument("--seconds", type=float, default=30.0, help="per phase")
    parser.add_argument("--patience", type=float, default=2.0, help="client timeout per request, seconds")
    parser.add_argument("--retry", default="impatient,polite")
    args = parser.parse_args()
    queries = load_queries(args.scifact, fresh=args.fresh_queries)
    clients = [int(c) for c in args.clients.split(",")]
    retries = args.retry.split(",")
    print(f"# overload: {platform.platform()}, python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {args.memories} memories, patience {args.patience} s, "
          f"deadline {args.deadline_ms} ms, "
          f"{args.seconds:.0f} s per phase", flush=True)
    trees = [("new", ROOT)] + ([("old", args.baseline_tree.resolve())] if args.baseline_tree else [])
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        data_dir = args.data_dir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="pgcontext-overload-", dir="/tmp")))
        key = prepare_org(data_dir, args.memories, args.agents, 10, args.scifact, args.random_vectors)
        offset = 10_000
        for c in clients:
            for retry in retries:
                # Old and new back to back for each phase, so a change in the machine's load hits both.
                for name, tree in trees:
                    port = free_port()
                    with service(data_dir, port, source=tree, env_extra=deadline_env(args.deadline_ms)) as (url, _):
                        asyncio.run(warm_up(url, key, queries, args.agents))
                        phase = Phase(name, c, retry)
                        pids = {"service": [service_pid(port)], "postgres": tree_pids(postmaster_pid(data_dir))}
                        before = {part: cpu_seconds_of(p) for part, p in pids.items()}
                        own = os.times()
                        asyncio.run(run_phase(url, key, queries, args.agents, phase, args.seconds, args.patience,
                                              offset))
                        mine = os.times()
                        phase.cpu_s = {part: cpu_used(before[part], cpu_seconds_of(
                            [*p] if part == "service" else tree_pids(postmaster_pid(data_dir))))
                            for part, p in pids.items()}
                        phase.cpu_s["loadgen"] = mine.user + mine.system - own.user - own.system
                    offset += 100_000
                    phases.append(phase)
                    peak = next((p.goodput for p in phases if p.tree == name and p.clients == min(clients)
                                 and p.retry == retry), None)
                    print(phase.row(peak), file=sys.stderr, flush=True)
    print(HEADER)
    for phase in phases:
        peak = max((p.goodput for p in phases if p.tree == phase.tree and p.clients == min(clients)), default=None)
        print(phase.row(peak))
    print(json.dumps([{"tree": p.tree, "clients": p.clients, "retry": p.retry, "goodput": round(p.goodput, 1),
                       "levels": dict(p.levels), "statuses": dict(p.statuses),
                       "refusals": dict(p.refusals), "late": p.late, "cpu_s": p.cpu_s} for p in phases]))


if __name__ == "__main__":
    main()

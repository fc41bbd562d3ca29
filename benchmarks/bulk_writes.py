"""Foreground assembly beside background bulk writes: L0 share and p99 at concurrency 8, alone and with
two clients writing 64-memory batches (embedded server-side) at full speed, in the same run.

    python benchmarks/bulk_writes.py --scifact /work/shared/data/scifact
    python benchmarks/bulk_writes.py --baseline-tree /tmp/pgcontext-old     # old code vs this tree

Starts ``pgcontext serve`` on the embedded default with an org of ``--memories`` SciFact memories
(see ``benchmarks/assemble_load.py``); for each service under test (this tree and, with
``--baseline-tree``, another checkout serving the same data directory) it runs ``--rounds``
interleaved pairs of phases of ``--seconds`` each: assemblies alone, then the same assemblies while
the writers write. Writers' texts are new SciFact sentence runs, so every batch is embedded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from benchmarks._common import percentile  # noqa: E402
from benchmarks.assembly_driver import assemble_body  # noqa: E402
from benchmarks.bench_org import build_texts, load_queries, prepare_org, service  # noqa: E402
from benchmarks.overload import add_same_run_args, deadline_env  # noqa: E402
from service.embedded.postgres import free_port  # noqa: E402


class _Assembled(msgspec.Struct):
    degradation_level: str


_decode = msgspec.json.Decoder(_Assembled).decode


@dataclass
class Phase:
    tree: str
    writers: int
    latencies_ms: list[float] = field(default_factory=list)
    levels: Counter[str] = field(default_factory=Counter)
    written: int = 0
    write_errors: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def row(self) -> str:
        n = max(sum(self.levels.values()), 1)
        mix = ", ".join(f"{k} {100 * v / n:.1f}%" for k, v in sorted(self.levels.items()))
        return (f"| {self.tree} | {self.writers} | {sum(self.levels.values())} | {100 * self.levels['L0'] / n:.1f}% "
                f"| {mix} | {percentile(self.latencies_ms, 50):.1f} / {percentile(self.latencies_ms, 99):.1f} | "
                f"{len(self.latencies_ms) / self.seconds:.0f} | {self.written / self.seconds:.0f} | "
                f"{sum(self.write_errors.values())} |")


HEADER = ("| code | bulk writers | assemblies | L0 | levels | p50 / p99 ms | assemblies/s | memories written/s "
          "| write errors |\n|---|---|---|---|---|---|---|---|---|")


async def run_phase(url: str, key: str, queries: list[str], agents: int, texts: list[str], phase: Phase,
                    seconds: float, offset: int) -> None:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    encode = msgspec.json.encode
    rng = random.Random(offset)
    counter = iter(range(offset, offset + 10_000_000))
    writing = True
    async with aiohttp.ClientSession(url, headers=headers, timeout=aiohttp.ClientTimeout(total=300)) as http:

        async def assembler(stop_at: float) -> None:
            for i in counter:
                if time.perf_counter() >= stop_at:
                    return
                started = time.perf_counter()
                async with http.post("/v1/context/assemble", data=encode(assemble_body(i, queries, agents, rng))) as r:
                    raw = await r.read()
                if r.status == 200:
                    phase.latencies_ms.append((time.perf_counter() - started) * 1000)
                    phase.levels[_decode(raw).degradation_level] += 1
                else:
                    phase.levels[str(r.status)] += 1

        async def writer(w: int) -> None:
            batch = 0
            while writing:
                start = (offset + w * 1_000_000 + batch * 64) % max(len(texts) - 64, 1)
                body = {"memories": [{"text": f"{texts[start + j]} [bulk {offset}.{w}.{batch}.{j}]",
                                      "agent_id": f"writer-{w}"} for j in range(64)]}
                async with http.post("/v1/memories", data=encode(body)) as r:
                    await r.read()
                if r.status == 201:
                    phase.written += 64
                else:
                    phase.write_errors[str(r.status)] += 1
                batch += 1

        writers = [asyncio.ensure_future(writer(w)) for w in range(phase.writers)]
        if writers:
            await asyncio.sleep(2)  # the writers are embedding before the assemblies start
        started = time.perf_counter()
        await asyncio.gather(*(assembler(started + seconds) for _ in range(8)))
        phase.seconds = time.perf_counter() - started
        writing = False
        await asyncio.gather(*writers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_same_run_args(parser)
    parser.add_argument("--seconds", type=float, default=30.0, help="per phase")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--writers", type=int, default=2)
    args = parser.parse_args()
    print(f"# bulk writes: {platform.platform()}, python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {args.memories} memories, deadline {args.deadline_ms} ms, "
          f"{args.seconds:.0f} s per phase",
          flush=True)
    queries = load_queries(args.scifact, fresh=args.fresh_queries)
    texts = build_texts(args.scifact / "corpus.jsonl", args.memories + 20_000)[args.memories:]
    trees = [("new", ROOT)] + ([("old", args.baseline_tree.resolve())] if args.baseline_tree else [])
    phases: list[Phase] = []
    with contextlib.ExitStack() as stack:
        data_dir = args.data_dir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="pgcontext-bulk-", dir="/tmp")))
        key = prepare_org(data_dir, args.memories, args.agents, 10, args.scifact, args.random_vectors)
        offset = 0
        for _ in range(args.rounds):
            for name, tree in trees:
                with service(data_dir, free_port(), source=tree, env_extra=deadline_env(args.deadline_ms)) as (url, _):
                    asyncio.run(run_phase(url, key, queries, args.agents, texts, Phase(name, 0), 10, offset))
                    for writers in (0, args.writers):
                        offset += 100_000
                        phase = Phase(name, writers)
                        asyncio.run(run_phase(url, key, queries, args.agents, texts, phase, args.seconds, offset))
                        phases.append(phase)
                        print(phase.row(), file=sys.stderr, flush=True)
    print(HEADER)
    for phase in phases:
        print(phase.row())


if __name__ == "__main__":
    main()

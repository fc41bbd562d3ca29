"""Memory over a mixed soak: service RSS and Postgres memory sampled while every kind of request runs.

    python benchmarks/soak.py --scifact /work/shared/data/scifact                   # 3 minutes
    python benchmarks/soak.py --minutes 10 --baseline-tree /tmp/pgcontext-old        # old code first, same run

Starts ``pgcontext serve`` on the embedded default (see ``benchmarks/assemble_load.py``; with
``--baseline-tree`` another checkout serves the same data directory first), loads ``--memories``
SciFact memories, then for ``--minutes`` runs at once:

* 4 clients assembling context (SciFact claims as queries);
* 1 client writing batches of 64 memories embedded server-side;
* 1 client searching (hybrid);
* every 30 s one large document ingest (``--doc-chunks`` ~256-token sections: 171 by default, the
  size that once took the service from 433 to 2,087 MB).

Every ``--every`` seconds it samples the service's RSS and, over all Postgres processes of the
data directory, the sum of PSS (shared buffers touched count, divided among the processes that
touched them), of private memory (USS: pages mapped by one process only; that would also count
shared buffers only one process has touched so far) and of anonymous memory (each process's own
heap: catalog and plan caches, sort and hash memory; no shared buffers), the figure that says
whether the backends' own memory is bounded. Reported:
the samples, the errors, and the growth from the end of warm-up (the first third of the run) to
the end. An error is every answer a client sees that is not 2xx and every request that fails
(connection error, or no answer within the client's 120 s); a 429/503 carrying ``Retry-After`` is
not: the soak's clients honour it (sleep that long, then send the same request again), and those
refusals are counted separately. Each error is printed as it happens, with how long it took.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import postmaster_pid, rollup_kb, service_pid, status_kb, tree_pids  # noqa: E402
from benchmarks.assembly_driver import assemble_body  # noqa: E402
from benchmarks.bench_org import build_texts, load_queries, prepare_org, service  # noqa: E402
from benchmarks.overload import add_same_run_args, deadline_env  # noqa: E402
from service.embedded.postgres import free_port  # noqa: E402


@dataclass
class Sample:
    t: float
    service_rss_mb: float
    postgres_pss_mb: float
    postgres_uss_mb: float
    postgres_heap_mb: float
    backends: int


def sample(t: float, service: int, postmaster: int) -> Sample:
    pids = tree_pids(postmaster)
    rollups = [rollup_kb(p) for p in pids]
    pss = sum(r.get("Pss", 0) for r in rollups)
    uss = sum(r.get("Private_Clean", 0) + r.get("Private_Dirty", 0) for r in rollups)
    heap = sum(r.get("Anonymous", 0) for r in rollups)
    return Sample(round(t, 1), status_kb(service, "VmRSS") / 1024, pss / 1024, uss / 1024, heap / 1024,
                  len(pids))


def big_document(texts: list[str], chunks: int) -> str:
    """Markdown with ``chunks`` sections of ~256 tokens each (SciFact sentences)."""
    parts: list[str] = []
    i = 0
    for n in range(chunks):
        body: list[str] = []
        while sum(len(s) for s in body) < 1000:
            body.append(texts[i % len(texts)])
            i += 1
        parts.append(f"## Section {n}\n\n" + " ".join(body) + "\n")
    return "# Soak document\n\n" + "\n".join(parts)


@dataclass
class Run:
    tree: str
    samples: list[Sample] = field(default_factory=list)
    answers: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    deferred: Counter[str] = field(default_factory=Counter)
    """429/503 answers with ``Retry-After`` that the client honoured (slept, then sent again)."""
    slowest_s: dict[str, float] = field(default_factory=dict)


async def soak(url: str, key: str, run: Run, minutes: float, every: float, port: int, data_dir: Path,
               queries: list[str], texts: list[str], agents: int, doc_chunks: int) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    stop_at = time.monotonic() + minutes * 60
    started = time.monotonic()
    rng = random.Random(5)
    document = big_document(texts, doc_chunks)
    svc, postmaster = service_pid(port), postmaster_pid(data_dir)

    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as http:

        def error(kind: str, what: str, began: float, detail: str = "") -> None:
            run.errors[f"{kind} {what}"] += 1
            print(f"  {run.tree} t={time.monotonic() - started:.0f}s ERROR {kind} {what} after "
                  f"{time.monotonic() - began:.1f} s {detail[:300]}", file=sys.stderr, flush=True)

        async def call(kind: str, method: str, path: str, body: object) -> None:
            began = time.monotonic()
            while True:
                try:
                    r = await http.request(method, path, json=body)
                except httpx.HTTPError as exc:
                    error(kind, type(exc).__name__, began)
                    return
                retry_after = r.headers.get("retry-after")
                if r.status_code in (429, 503) and retry_after and time.monotonic() < stop_at:
                    # Refused for now with Retry-After: the soak's clients honour it (not an error).
                    code = ""
                    with contextlib.suppress(ValueError, KeyError, TypeError):
                        code = " " + str(r.json()["error"]["code"])
                    run.deferred[f"{kind} {r.status_code}{code}"] += 1
                    await asyncio.sleep(float(retry_after) * rng.uniform(1.0, 1.2))
                    continue
                break
            took = time.monotonic() - began
            run.slowest_s[kind] = max(run.slowest_s.get(kind, 0.0), round(took, 1))
            if r.status_code >= 300:
                error(kind, str(r.status_code), began, r.text)
            else:
                run.answers[kind] += 1

        async def loop(kind: str, pause: float, make: Callable[[int], tuple[str, str, object]]) -> None:
            i = 0
            while time.monotonic() < stop_at:
                method, path, body = make(i)
                await call(kind, method, path, body)
                i += 1
                if pause:
                    await asyncio.sleep(pause)

        def assemble(i: int) -> tuple[str, str, object]:
            return "POST", "/v1/context/assemble", assemble_body(i, queries, agents, rng)

        def write(i: int) -> tuple[str, str, object]:
            batch = [{"text": texts[(i * 64 + j) % len(texts)] + f" (soak {i}.{j})", "agent_id": f"agent-{j % agents}"}
                     for j in range(64)]
            return "POST", "/v1/memories", {"memories": batch}

        def search(i: int) -> tuple[str, str, object]:
            return "POST", "/v1/memories/search", {"query": queries[i % len(queries)], "strategy": "hybrid"}

        def ingest(i: int) -> tuple[str, str, object]:
            # a new revision of the same file each time: the whole document is chunked and embedded again
            return "POST", "/v1/documents", {"files": [{"path": "soak/doc.md", "content": f"{document}\n<!-- {i} -->"}]}

        async def sampler() -> None:
            while time.monotonic() < stop_at:
                run.samples.append(sample(time.monotonic() - started, svc, postmaster))
                print(f"  {run.tree} {run.samples[-1]}", file=sys.stderr, flush=True)
                await asyncio.sleep(every)
            run.samples.append(sample(time.monotonic() - started, svc, postmaster))

        await asyncio.gather(*(loop("assemble", 0, assemble) for _ in range(4)), loop("write", 0, write),
                             loop("search", 0.05, search), loop("ingest", 30, ingest), sampler())


def summary(run: Run) -> str:
    s = run.samples
    warm = next((x for x in s if x.t >= s[-1].t / 3), s[0])
    peak_rss = max(x.service_rss_mb for x in s)
    return (f"| {run.tree} | {s[0].service_rss_mb:.0f} / {warm.service_rss_mb:.0f} / {peak_rss:.0f} / "
            f"{s[-1].service_rss_mb:.0f} | {s[0].postgres_pss_mb:.0f} / {warm.postgres_pss_mb:.0f} / "
            f"{s[-1].postgres_pss_mb:.0f} | {s[0].postgres_uss_mb:.0f} / {warm.postgres_uss_mb:.0f} / "
            f"{s[-1].postgres_uss_mb:.0f} | {s[0].postgres_heap_mb:.0f} / {warm.postgres_heap_mb:.0f} / "
            f"{s[-1].postgres_heap_mb:.0f} | {s[-1].backends} | {dict(run.answers)} | {dict(run.slowest_s)} | "
            f"{sum(run.deferred.values())} {dict(run.deferred) or ''} | {sum(run.errors.values())} "
            f"{dict(run.errors) or ''} |")


HEADER = ("| code | service RSS MB: start / after warm-up / peak / end | Postgres PSS MB: start / warm / end "
          "| Postgres private MB: start / warm / end | Postgres heap MB: start / warm / end | PG processes | answers "
          "| slowest s | refused with Retry-After "
          "(honoured) | errors |\n"
          "|---|---|---|---|---|---|---|---|---|---|")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_same_run_args(parser)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--doc-chunks", type=int, default=171)
    args = parser.parse_args()
    print(f"# soak: {platform.platform()}, python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, {args.minutes:g} min per code, {args.memories} memories",
          flush=True)
    queries = load_queries(args.scifact, fresh=args.fresh_queries)
    texts = build_texts(args.scifact / "corpus.jsonl", 5000)
    trees = ([("old", args.baseline_tree.resolve())] if args.baseline_tree else []) + [("new", ROOT)]
    runs = []
    with contextlib.ExitStack() as stack:
        data_dir = args.data_dir or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="pgcontext-soak-", dir="/tmp")))
        key = prepare_org(data_dir, args.memories, args.agents, 10, args.scifact, args.random_vectors)
        for name, tree in trees:
            port = free_port()
            with service(data_dir, port, source=tree, env_extra=deadline_env(args.deadline_ms)) as (url, _):
                run = Run(name)
                asyncio.run(soak(url, key, run, args.minutes, args.every, port, data_dir, queries, texts,
                                 args.agents, args.doc_chunks))
                runs.append(run)
                print(summary(run), file=sys.stderr, flush=True)
    print(HEADER)
    for run in runs:
        print(summary(run))
    print(json.dumps([{"tree": r.tree, "samples": [vars(x) for x in r.samples]} for r in runs]))


if __name__ == "__main__":
    main()

"""Context-assembly load test: p50/p95/p99, throughput, errors and degradation levels under concurrency.

    python benchmarks/assemble_load.py                      # embedded servers, 100,000 memories
    python benchmarks/assemble_load.py --url http://host:8080 --key pgc_...   # an already running service

Without ``--url`` it starts ``pgcontext serve`` as a subprocess on the embedded default (its own
Postgres + Redis under a temporary ``PGCONTEXT_DATA_DIR``, or ``--data-dir`` to keep and reuse the
loaded org between runs), then loads the org with ``--memories`` memories (default 100,000) spread
over ``--agents`` agents plus org-wide ones, one directive per agent, and vacuums it (the steady
state autovacuum keeps, see migration 0010). Texts are sentences (then
titles, then runs of adjacent sentences) of the SciFact corpus; their embeddings are computed once
with the service's own embedder, in batches, and cached as ``.npy`` under
``.pgcontext/bench-cache`` so later runs and the load itself skip the model (the write API takes an
``embedding`` per memory). Memories are POSTed in batches of 256.

Each concurrency level (default 1, 4, 8, 16) runs a **baseline** first — ``GET /v1/directives/{agent}``
(auth + one Redis read: the cheapest real request) — and then ``POST /v1/context/assemble`` with
SciFact claims as queries, a short chat history, ``gpt-4o`` and a 4,000-token window. Both are bounded
by ``--requests`` per level and ``--seconds`` per level. Reported per level: client-side p50/p95/p99
latency, throughput, error rate, the degradation-level distribution, the server's own
``metrics.total_ms`` p50/p99, the cold strategies used and the candidates they handed to ranking,
whether the directive made it into the context (every agent has one, so each assembly is ``present``,
``reported`` missing in ``degradation_reasons``, or ``missing`` unreported: the last must stay 0) and
the assemble/baseline p50 ratio (which survives a noisy machine better than absolute numbers), and
how many query embeddings the level computed or took from the service's query-embedding cache
(``/metrics``). The 809 claims repeat: from the second level on every query's embedding is cached,
which spares a full hybrid assembly its costliest step; ``--fresh-queries`` makes every query new to
the cache (:data:`bench_org.FRESH_SUFFIXES`). ``--search N`` adds, per measured service, N claims searched one
at a time with each strategy (client and server latency), and
``--compare-root DIR`` measures another source tree first on the same data; ``--timeout-ms MS``
gives every assembly that deadline of its own (a longer wall, up to the service's maximum);
``--noise N`` runs N busy processes beside the service, each in a session of its own, for the
measured levels (a busy shared host: three per core); ``--url A --beside B``
drives two running services (on copies of one data directory) at the same time with the same
assemblies, for ratios that a noisy machine does not swing (:func:`run_beside`). The load
generator runs on the same machine as the service, Postgres and Redis, and competes with them
for CPU: it uses aiohttp and decodes only the response fields it needs with msgspec, and every
level also reports the CPU ms per assembly of each process group (service, Postgres, Redis, the
load generator itself; from ``/proc``), which says where a saturated machine's cores went.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import noise, percentile  # noqa: E402
from benchmarks.assembly_driver import HEADER, Call, Level, assemble_body, drive  # noqa: E402
from benchmarks.bench_org import (  # noqa: E402
    SCIFACT,
    add_fresh_queries_flag,
    load_queries,
    prepare_org,
    random_vectors,
    service,
)
from service.embedded.postgres import free_port  # noqa: E402

# -- the load --------------------------------------------------------------------------------------


async def ensure_directives(http: aiohttp.ClientSession, agents: int) -> int:
    """Every agent the assemblies use has a directive (a service given by ``--url`` may hold an org
    loaded without them); returns how many were written."""
    written = 0
    for a in range(agents):
        async with http.get(f"/v1/agents/agent-{a}/directive") as r:
            if r.status == 200:
                continue
        async with http.put(f"/v1/agents/agent-{a}/directive", data=msgspec.json.encode(
                {"content": f"You are research assistant {a}. Cite the memories you use by tag."}),
                headers={"Content-Type": "application/json"}) as r:
            if r.status not in (200, 201):
                raise SystemExit(f"PUT directive of agent-{a}: {r.status} {(await r.text())[:200]}")
        written += 1
    return written


async def run_levels(url: str, headers: dict[str, str], queries: list[str], agents: int,
                     concurrencies: list[int], requests: int, seconds: float,
                     strategy: str | None = None, timeout_ms: int | None = None) -> list[tuple[Level, Level]]:
    # aiohttp + msgspec: the client shares the machine's two cores with the service, so it should
    # cost as little CPU per request as possible (httpx + json cost ~2.5 ms per assembly here).
    connector = aiohttp.TCPConnector(limit=max(concurrencies) + 4)
    timeout = aiohttp.ClientTimeout(total=10)
    encode = msgspec.json.encode
    async with aiohttp.ClientSession(url, headers=headers, connector=connector, timeout=timeout) as http:
        rng = random.Random(3)

        async def directive(i: int) -> tuple[int, bytes]:
            async with http.get(f"/v1/agents/agent-{1 + i % (agents - 1) if agents > 1 else 0}/directive") as r:
                return r.status, await r.read()

        async def assemble(i: int) -> tuple[int, bytes]:
            body = assemble_body(i, queries, agents, rng, strategy, timeout_ms)
            async with http.post("/v1/context/assemble", data=encode(body),
                                 headers={"Content-Type": "application/json"}) as r:
                return r.status, await r.read()

        written = await ensure_directives(http, agents)
        if written:
            print(f"# wrote directives for {written} agents that had none", file=sys.stderr, flush=True)
        # Warm-up: pool connections, every agent's directive and hot set, the tokenizers.
        warm = Level("warmup", 4)
        await drive("assemble", 4, 2 * agents, 60, assemble, warm)
        await drive("directive", 4, agents, 60, directive, Level("warmup", 4))
        results = []
        offset = 2 * agents
        for c in concurrencies:
            base = Level("baseline: GET directive", c)
            await drive("directive", c, requests, seconds, directive, base)
            asm = Level("assemble", c)

            async def shifted(i: int, start: int = offset) -> tuple[int, bytes]:
                return await assemble(i + start)  # every level asks new (query, agent) pairs first

            looked = await embedding_lookups(http)
            await drive("assemble", c, requests, seconds, shifted, asm)
            asm.embeddings = await embedding_lookups(http) - looked
            offset += requests
            results.append((base, asm))
            print(base.row(None), file=sys.stderr, flush=True)
            print(asm.row(base), f"strategies {dict(asm.strategies)} errors {dict(asm.errors)}", file=sys.stderr,
                  flush=True)
            print(f"  CPU ms per assembly: {asm.cpu_line()}", file=sys.stderr, flush=True)
            print(f"  cold search planned->ran: {asm.runs_line()}", file=sys.stderr, flush=True)
            print(f"  query embeddings: {asm.embeddings_line()}", file=sys.stderr, flush=True)
            print(f"  directive: {asm.directive_line()}", file=sys.stderr, flush=True)
    return results


async def embedding_lookups(http: aiohttp.ClientSession) -> Counter[str]:
    """The service's ``pgcontext_query_embedding_cache_total`` counters (empty if ``/metrics`` is
    closed, e.g. by a metrics token; with several workers, those of the process that answered)."""
    async with http.get("/metrics") as r:
        text = await r.text() if r.status == 200 else ""
    found = re.findall(r'^pgcontext_query_embedding_cache_total\{outcome="(hit|miss)"\} (\S+)$', text, re.M)
    return Counter({outcome: int(float(value)) for outcome, value in found})


SEARCH_STRATEGIES = ("lexical", "semantic", "hybrid", "auto")


async def run_beside(urls: Sequence[str], headers: dict[str, str], queries: list[str], agents: int,
                     concurrencies: list[int], requests: int, seconds: float, strategy: str | None,
                     rounds: int) -> dict[str, dict[int, list[Level]]]:
    """Every service in ``urls`` driven at the same time with the same assemblies (``concurrency``
    workers each), ``rounds`` times per level, the start order reversed every other round. The
    services share the machine's cores for the whole run, so a slow minute (a noisy neighbour, a
    checkpoint) is felt by all of them alike: on a machine whose sequential runs swing by 20%, the
    ratios between services side by side hold where those of runs one after the other do not. Each
    service must hold the same org (a copy of one loaded ``--data-dir``) under the same key. CPU is
    not split per service (the process groups are shared)."""
    encode = msgspec.json.encode
    measured: dict[str, dict[int, list[Level]]] = {u: {c: [] for c in concurrencies} for u in urls}
    async with contextlib.AsyncExitStack() as stack:
        sessions = {u: await stack.enter_async_context(aiohttp.ClientSession(
            u, headers=headers, connector=aiohttp.TCPConnector(limit=max(concurrencies) + 4),
            timeout=aiohttp.ClientTimeout(total=10))) for u in urls}

        def caller(u: str, offset: int) -> Call:
            rng = random.Random(3)  # the same agents, in the same order, for every service

            async def assemble(i: int) -> tuple[int, bytes]:
                body = assemble_body(i + offset, queries, agents, rng, strategy)
                async with sessions[u].post("/v1/context/assemble", data=encode(body),
                                            headers={"Content-Type": "application/json"}) as r:
                    return r.status, await r.read()

            return assemble

        await asyncio.gather(*(drive("assemble", 4, 2 * agents, 60, caller(u, 0), Level("warmup", 4)) for u in urls))
        offset = 2 * agents
        for r in range(rounds):
            for c in concurrencies:
                order = list(urls) if r % 2 == 0 else list(reversed(urls))
                levels = [Level("assemble", c) for _ in order]
                await asyncio.gather(*(drive("assemble", c, requests, seconds, caller(u, offset), lv)
                                       for u, lv in zip(order, levels, strict=True)))
                offset += requests
                for u, lv in zip(order, levels, strict=True):
                    measured[u][c].append(lv)
                    print(f"round {r + 1} {u}", lv.row(None), f"runs {dict(lv.runs.most_common(3))}",
                          f"errors {dict(lv.errors)}",
                          file=sys.stderr, flush=True)
    return measured


def beside_rows(measured: dict[str, dict[int, list[Level]]]) -> list[str]:
    """Per service and level: the mean over rounds of p50/p95/p99 and throughput, and each against
    the first service's (paired by round: the ratio of the means)."""
    first = next(iter(measured))
    rows = ["| service | concurrency | rounds | p50 / p95 / p99 ms (mean of rounds) | assemblies/s | "
            "vs first: p50 / p95 / p99 / throughput | L0 |", "|---|---|---|---|---|---|---|"]

    def means(levels: list[Level]) -> list[float]:
        return [sum(percentile(lv.latencies_ms, q) for lv in levels) / len(levels) for q in (50, 95, 99)] + [
            sum(len(lv.latencies_ms) / max(lv.seconds, 1e-9) for lv in levels) / len(levels)]

    for u, by_level in measured.items():
        for c, levels in by_level.items():
            if not levels:
                continue
            m, b = means(levels), means(measured[first][c])
            vs = " / ".join(f"{100 * (x / y - 1):+.0f}%" for x, y in zip(m, b, strict=True))
            ok = sum(len(lv.latencies_ms) for lv in levels)
            l0 = 100 * sum(lv.levels["L0"] for lv in levels) / max(ok, 1)
            rows.append(f"| {u} | {c} | {len(levels)} | {m[0]:.1f} / {m[1]:.1f} / {m[2]:.1f} | {m[3]:.0f} | "
                        f"{'-' if u == first else vs} | {l0:.1f}% |")
    return rows


async def run_search(url: str, headers: dict[str, str], queries: list[str], n: int) -> dict[str, list[float]]:
    """``n`` SciFact claims, one at a time, each through every strategy of :data:`SEARCH_STRATEGIES` in
    turn (``POST /v1/memories/search``, ``limit`` 10; the order rotates per claim, so drift and the
    query-embedding cache hit them alike). Client ms per strategy, then its server ``total_ms``
    under ``{strategy}:server``."""
    timings: dict[str, list[float]] = {}
    connector = aiohttp.TCPConnector(limit=2)
    async with aiohttp.ClientSession(url, headers=headers, connector=connector) as http:
        for i in range(n):
            query = queries[(7 * i + 3) % len(queries)]
            k = i % len(SEARCH_STRATEGIES)
            for strategy in SEARCH_STRATEGIES[k:] + SEARCH_STRATEGIES[:k]:
                started = time.perf_counter()
                async with http.post("/v1/memories/search", data=msgspec.json.encode(
                        {"query": query, "strategy": strategy, "limit": 10}),
                        headers={"Content-Type": "application/json"}) as r:
                    body = await r.read()
                if r.status != 200:
                    timings.setdefault(f"{strategy}:errors", []).append(r.status)
                    continue
                timings.setdefault(strategy, []).append(1000 * (time.perf_counter() - started))
                timings.setdefault(f"{strategy}:server", []).append(msgspec.json.decode(body)["metrics"]["total_ms"])
    return timings


def search_rows(timings: dict[str, list[float]]) -> list[str]:
    rows = ["| strategy | searches | client p50 / p95 / p99 ms | server total_ms p50 / p95 | errors |",
            "|---|---|---|---|---|"]
    for strategy in SEARCH_STRATEGIES:
        client, server = timings.get(strategy, []), timings.get(f"{strategy}:server", [])
        if not client:
            continue
        rows.append(f"| {strategy} | {len(client)} | {percentile(client, 50):.1f} / {percentile(client, 95):.1f} / "
                    f"{percentile(client, 99):.1f} | {percentile(server, 50):.1f} / {percentile(server, 95):.1f} | "
                    f"{len(timings.get(f'{strategy}:errors', []))} |")
    return rows


def service_env(text: str) -> tuple[str, str]:
    """``--service-env`` NAME=VALUE, NAME a ``PGCONTEXT_*`` setting."""
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("PGCONTEXT_"):
        raise argparse.ArgumentTypeError(f"expected PGCONTEXT_NAME=VALUE, got {text!r}")
    return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a running service (default: start one on the embedded default)")
    parser.add_argument("--key", help="API key for --url (its org must already hold the memories)")
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=20, help="agents (agent-0 ... agent-N-1)")
    parser.add_argument("--org-wide-every", type=int, default=10, help="every Nth memory is org-wide")
    parser.add_argument("--concurrency", default="1,4,8,16")
    parser.add_argument("--requests", type=int, default=1000, help="per request kind and concurrency level")
    parser.add_argument("--seconds", type=float, default=30.0, help="per request kind and concurrency level")
    parser.add_argument("--workers", type=int, default=1, help="service processes for the started service")
    parser.add_argument("--data-dir", type=Path, help="keep the embedded servers and loaded org here (reused)")
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    parser.add_argument("--random-vectors", action="store_true", help="dry run: random vectors, no model")
    parser.add_argument("--compare-root", type=Path, action="append", default=[],
                        help="also measure the service from this source tree (e.g. an export of main), "
                             "in the same run on the same data, before this one (repeatable)")
    parser.add_argument("--deadline-ms", type=int, help="PGCONTEXT_DEADLINE_MS of the measured services "
                        "(default: the service's own, 40)")
    parser.add_argument("--service-env", action="append", default=[], metavar="PGCONTEXT_NAME=VALUE",
                        type=service_env,
                        help="a setting for the started services (repeatable); they get no PGCONTEXT_* variable "
                             "from this environment but these and --deadline-ms")
    parser.add_argument("--strategy", choices=["auto", "hybrid", "lexical_first", "semantic", "lexical"],
                        help="the assemblies' retrieval.strategy (default: none given, so the service's auto); "
                             "one strategy for every tree compares the same work, whatever each tree sheds")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="the assemblies' own deadline (body timeout_ms, as X-Timeout-Ms): longer than the "
                             "service's 40 ms it buys a longer wall, up to PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS")
    parser.add_argument("--noise", type=int, metavar="N", default=0,
                        help="N busy processes beside the service for the whole run, each in a session of its own "
                             "(setsid): a busy shared host; three per core is busy (--noise 6 on two cores)")
    add_fresh_queries_flag(parser)
    parser.add_argument("--beside", action="append", default=[], metavar="URL",
                        help="with --url: another running service on a copy of the same data, driven at the "
                             "same time with the same assemblies (repeatable; see run_beside)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per level with --beside")
    parser.add_argument("--search", type=int, metavar="N", default=0,
                        help="after the assembly levels, N claims searched one at a time with each strategy "
                             "(search latency of every measured service, same run)")
    parser.add_argument("--selective-eval", type=int, metavar="QUERIES", default=0,
                        help="instead of the load test: selective mode vs naive top-10 on SciFact train")
    args = parser.parse_args()
    if args.selective_eval:
        from benchmarks.selective_eval import scifact_docs, selective_eval

        doc_ids, texts = scifact_docs(args.scifact)
        # Lexical retrieval for both sides (BM25 here is as good as hybrid on SciFact, see "Retrieval
        # quality"), so the documents need no model time: their vectors only fill the column.
        vectors = random_vectors(len(texts))
        print(asyncio.run(selective_eval(args.scifact, args.selective_eval, doc_ids, texts, vectors)))
        return
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    queries = load_queries(args.scifact, fresh=args.fresh_queries)
    print(f"# assemble load: {platform.platform()}, python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; {args.noise} busy processes beside the "
          f"service (own sessions); assemblies' timeout_ms {args.timeout_ms or 'none'}", flush=True)

    measured: dict[str, list[tuple[Level, Level]]] = {}
    searched: dict[str, dict[str, list[float]]] = {}
    if args.url:
        if not args.key:
            raise SystemExit("--url needs --key")
        if args.beside:
            beside = asyncio.run(run_beside([args.url, *args.beside], {"Authorization": f"Bearer {args.key}"},
                                            queries, args.agents, concurrencies, args.requests, args.seconds,
                                            args.strategy, args.rounds))
            print(f"\n## side by side: {args.strategy or 'auto'}, {args.rounds} rounds per level\n")
            print("\n".join(beside_rows(beside)))
            return
        with noise(args.noise):
            measured[args.url] = asyncio.run(run_levels(args.url, {"Authorization": f"Bearer {args.key}"}, queries,
                                                        args.agents, concurrencies, args.requests, args.seconds,
                                                        args.strategy, args.timeout_ms))
        if args.search:
            searched[args.url] = asyncio.run(run_search(args.url, {"Authorization": f"Bearer {args.key}"}, queries,
                                                        args.search))
    else:
        with contextlib.ExitStack() as stack:
            data_dir = args.data_dir or Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="pgcontext-assemble-", dir="/tmp")))
            # Loaded (if not yet) by a service that then stops: each measured one starts on the loaded data.
            key = prepare_org(data_dir, args.memories, args.agents, args.org_wide_every, args.scifact,
                              args.random_vectors, workers=args.workers)
            for root in [*args.compare_root, ROOT]:
                with service(data_dir, free_port(), args.workers, source=root,
                             env_extra=dict(args.service_env), deadline_ms=args.deadline_ms) as (url, _), \
                        noise(args.noise):
                    print(f"# service from {root}", file=sys.stderr, flush=True)
                    measured[str(root)] = asyncio.run(run_levels(
                        url, {"Authorization": f"Bearer {key}"}, queries, args.agents, concurrencies,
                        args.requests, args.seconds, args.strategy, args.timeout_ms))
                    if args.search:
                        searched[str(root)] = asyncio.run(run_search(
                            url, {"Authorization": f"Bearer {key}"}, queries, args.search))
                        print("\n".join(search_rows(searched[str(root)])), file=sys.stderr, flush=True)
    for root, results in measured.items():
        print(f"\n## service from {root}\n")
        print(HEADER)
        for base, asm in results:
            print(base.row(None))
            print(asm.row(base))
        print()
        for _, asm in results:
            print(f"concurrency {asm.concurrency}: cold strategies {dict(asm.strategies)}, errors {dict(asm.errors)}; "
                  f"directive {asm.directive_line()}; CPU ms per assembly: {asm.cpu_line()}; "
                  f"cold search planned->ran: {asm.runs_line()}; cold candidates: {asm.candidates_line()}; "
                  f"query embeddings: {asm.embeddings_line()}")
        if root in searched:
            print(f"\nsearch, one at a time ({args.search} claims x {len(SEARCH_STRATEGIES)} strategies):\n")
            print("\n".join(search_rows(searched[root])))


if __name__ == "__main__":
    main()

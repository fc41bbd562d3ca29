"""Scale-out benchmark: the same assembly load against one service instance on the primary, and against
two service instances (one Postgres primary + one streaming replica, reads routed to it).

    python benchmarks/scale_out.py [--memories 20000] [--concurrency 4,16] [--seconds 20]

Starts its own embedded PostgreSQL primary and Redis under a temporary directory, migrates, creates
one org and loads ``--memories`` SciFact texts (random vectors: the write path and index sizes are the
real ones, the vectors' meaning is not needed for load) through a first ``pgcontext serve``. Then it
measures per-row storage (``pg_relation_size`` / ``pg_total_relation_size`` of ``memories``, its HNSW
index and the BM25 postings, per memory), makes a streaming replica with ``pg_basebackup -R``
(``tests/replica.py``) and runs, per concurrency level, ``POST /v1/context/assemble``
(``benchmarks/assembly_driver.py``: assemble_load's requests and driver) against:

* **one**: one service process, ``PGCONTEXT_READ_DATABASE_URLS`` unset (every read on the primary);
* **two + replica**: two service processes (requests alternate between them), both with the replica
  in ``PGCONTEXT_READ_DATABASE_URLS``.

Reported per run: throughput, p50/p95/p99, and CPU ms per assembly for each process group (the
service processes, the primary's postmaster and backends, the replica's, Redis, this load generator)
from ``/proc``. Everything runs on one machine, which other jobs share: the two configurations run
back to back in the same invocation so their ratio is the comparable number, not the absolute ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import aiohttp
import asyncpg
import httpx
import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import new_tenant, percentile, stop_service, wait_ready  # noqa: E402
from benchmarks.assembly_driver import Level, assemble_body, drive  # noqa: E402
from benchmarks.bench_org import (  # noqa: E402
    SCIFACT,
    add_fresh_queries_flag,
    build_texts,
    load_org,
    load_queries,
    random_vectors,
)
from service.db import migrate  # noqa: E402
from service.embedded.postgres import EmbeddedPostgres, free_port  # noqa: E402
from service.embedded.redis_server import EmbeddedRedis  # noqa: E402
from tests.replica import make_replica, wait_caught_up, with_host  # noqa: E402

AGENTS = 20
SIZES = """
    SELECT pg_relation_size('memories') AS heap,
           pg_total_relation_size('memories') AS memories_total,
           pg_relation_size('memories_embedding_hnsw') AS hnsw,
           pg_total_relation_size('memory_postings') AS postings_total,
           (SELECT count(*) FROM memory_postings) AS postings,
           (SELECT count(*) FROM memories) AS n"""


@contextlib.contextmanager
def serve(data_dir: Path, env: dict[str, str], port: int, name: str, cwd: Path = ROOT) -> Iterator[tuple[str, int]]:
    """``pgcontext serve`` (the ``service`` package under ``cwd``) on configured servers; yields (url, pid)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
    full.update(env)
    full.update({"PGCONTEXT_DATA_DIR": str(data_dir), "PGCONTEXT_MIGRATE_ON_START": "false"})
    log_path = data_dir / f"{name}.log"
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port)], cwd=cwd,
                                env=full, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, proc, log_path, timeout_s=180, name=f"service {name}", poll_s=0.3)
            yield url, proc.pid
        finally:
            stop_service(proc)


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_by_group(groups: dict[str, set[int]]) -> dict[str, float]:
    """CPU seconds of each group: its root pids and their direct children (postgres backends, workers)."""
    out = {name: 0.0 for name in groups}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is None:
            continue
        for name, roots in groups.items():
            if int(entry.name) in roots or stat[0] in roots:
                out[name] += stat[1]
                break
    times = os.times()
    out["loadgen"] = times.user + times.system
    return out


async def run(urls: Sequence[str], headers: dict[str, str], queries: list[str], concurrency: int, requests: int,
              seconds: float, groups: dict[str, set[int]], offset: int) -> Level:
    encode = msgspec.json.encode
    timeout = aiohttp.ClientTimeout(total=10)
    sessions = [aiohttp.ClientSession(u, headers=headers, timeout=timeout,
                                      connector=aiohttp.TCPConnector(limit=concurrency + 4)) for u in urls]
    rng = random.Random(3)
    try:
        async def assemble(i: int) -> tuple[int, bytes]:
            http = sessions[i % len(sessions)]
            async with http.post("/v1/context/assemble", data=encode(assemble_body(i + offset, queries, AGENTS, rng)),
                                 headers={"Content-Type": "application/json"}) as r:
                return r.status, await r.read()

        await drive("assemble", concurrency, 2 * AGENTS * len(urls), 60, assemble, Level("warmup", concurrency))
        level = Level("assemble", concurrency)
        before = cpu_by_group(groups)
        await drive("assemble", concurrency, requests, seconds, assemble, level)
        after = cpu_by_group(groups)
        done = max(len(level.latencies_ms), 1)
        level.cpu_ms = {k: round(1000 * (after[k] - before.get(k, 0.0)) / done, 2) for k in after}
        return level
    finally:
        for s in sessions:
            await s.close()


def postmaster_pid(pg: EmbeddedPostgres) -> int:
    process = pg.postmaster()
    assert process is not None
    return process.pid


def row(name: str, level: Level) -> str:
    lat = level.latencies_ms
    return (f"| {name} | {level.concurrency} | {len(lat)} | {len(lat) / level.seconds:.0f} | "
            f"{percentile(lat, 50):.1f} | {percentile(lat, 95):.1f} | {percentile(lat, 99):.1f} | "
            f"{100 * sum(level.errors.values()) / max(level.requests, 1):.1f}% | {level.cpu_line()} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--concurrency", default="4,16")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--scifact", type=Path, default=SCIFACT)
    add_fresh_queries_flag(parser)
    parser.add_argument("--old-tree", type=Path, help="also run one instance of the service code in this "
                        "checkout (e.g. `git archive main`), same servers: old vs new without replicas")
    args = parser.parse_args()
    queries = load_queries(args.scifact, fresh=args.fresh_queries)
    print(f"# scale-out: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.platform()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (machine shared with other jobs)", flush=True)
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replica-scale-", dir="/tmp")))
        shared = Path(os.environ.get("PGCONTEXT_DATA_DIR", ROOT / ".pgcontext")).resolve()
        for cache in ("models", "tiktoken"):
            if (shared / cache).is_dir():
                (root / cache).symlink_to((shared / cache).resolve(), target_is_directory=True)
        primary = EmbeddedPostgres(root / "primary")
        stack.callback(primary.stop)
        primary.start()
        redis = EmbeddedRedis(root / "redis")
        stack.callback(redis.stop)
        redis.start()
        owner = primary.dsn()
        migrate.upgrade(owner)
        password = migrate.derived_app_password(owner)
        asyncio.run(migrate.set_app_password(owner, password))
        app = migrate.app_dsn(owner, password)
        _, headers = asyncio.run(new_tenant(owner, "scale-out"))
        base_env = {"PGCONTEXT_DATABASE_URL": owner, "PGCONTEXT_APP_DATABASE_URL": app,
                    "PGCONTEXT_REDIS_URL": redis.url()}
        texts = build_texts(args.scifact / "corpus.jsonl", args.memories)
        # A generous statement timeout for the bulk load only: the shared machine can be very busy.
        with serve(root, {**base_env, "PGCONTEXT_STATEMENT_TIMEOUT_MS": "120000"}, free_port(), "loader") as (url, _):
            took = asyncio.run(load_org(url, headers, texts, random_vectors(len(texts)), AGENTS, 10))

            async def directives() -> None:
                async with httpx.AsyncClient(base_url=url, headers=headers) as http:
                    for a in range(AGENTS):
                        await http.put(f"/v1/agents/agent-{a}/directive", json={"content": f"Assistant {a}."})

            asyncio.run(directives())
        print(f"# loaded {len(texts)} memories in {took:.0f} s ({len(texts) / took:.0f}/s)", flush=True)

        async def sizes() -> asyncpg.Record:
            conn = await asyncpg.connect(owner)
            try:
                await conn.execute("VACUUM ANALYZE memories, memory_postings")
                record = await conn.fetchrow(SIZES)
                assert record is not None
                return record
            finally:
                await conn.close()

        s = asyncio.run(sizes())
        n = s["n"]
        print(f"# storage at N={n}: memories heap {s['heap'] / n:.0f} B/row, memories with indexes "
              f"{s['memories_total'] / n:.0f} B/row, global HNSW {s['hnsw'] / n:.0f} B/row, "
              f"postings {s['postings'] / n:.1f}/memory, postings with indexes {s['postings_total'] / n:.0f} B/row",
              flush=True)
        started = time.perf_counter()
        replica = make_replica(primary, root / "replica")
        stack.callback(replica.stop)
        replica.start()
        assert replica._socket_dir is not None
        asyncio.run(wait_caught_up(owner, with_host(owner, replica._socket_dir)))
        print(f"# replica made by pg_basebackup -R and caught up in {time.perf_counter() - started:.1f} s", flush=True)
        replica_env = {**base_env, "PGCONTEXT_READ_DATABASE_URLS": with_host(app, replica._socket_dir)}
        groups = {"primary": {postmaster_pid(primary)}, "replica": {postmaster_pid(replica)}}
        redis_pid = redis._recorded()
        if redis_pid is not None:
            groups["redis"] = {redis_pid.pid}
        results: list[tuple[str, Level]] = []
        offset = 0
        for c in [int(x) for x in args.concurrency.split(",")]:
            if args.old_tree:
                with serve(root, base_env, free_port(), "old", cwd=args.old_tree) as (url, pid):
                    level = asyncio.run(run([url], headers, queries, c, args.requests, args.seconds,
                                            {**groups, "service": {pid}}, offset))
                    results.append(("one instance, old code", level))
                    print(row(*results[-1]), flush=True)
            with serve(root, base_env, free_port(), "one") as (url, pid):
                level = asyncio.run(run([url], headers, queries, c, args.requests, args.seconds,
                                        {**groups, "service": {pid}}, offset))
                results.append(("one instance, primary only", level))
                print(row(*results[-1]), flush=True)
            with serve(root, replica_env, free_port(), "a") as (url_a, pid_a), \
                    serve(root, replica_env, free_port(), "b") as (url_b, pid_b):
                level = asyncio.run(run([url_a, url_b], headers, queries, c, args.requests, args.seconds,
                                        {**groups, "service": {pid_a, pid_b}}, offset))
                results.append(("two instances + replica", level))
                print(row(*results[-1]), flush=True)
            offset += args.requests
    print("| setup | conc. | assemblies | /s | p50 ms | p95 ms | p99 ms | errors | CPU ms per assembly |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, level in results:
        print(row(name, level))


if __name__ == "__main__":
    main()

"""Shared benchmark helpers: servers (configured or embedded), an in-process app client, IR metrics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np
import numpy.typing as npt
from litestar.testing import AsyncTestClient

from service.app import create_app
from service.auth import admin
from service.cli.servers import prepare_database
from service.embedded.postgres import EmbeddedPostgres
from service.embedded.redis_server import EmbeddedRedis
from service.runtime import Endpoints
from service.settings import Settings

MODEL = "gpt-4o"
"""The model the benchmarks' assemblies name (its encoding, o200k_base, counts their tokens)."""

SEARCH_STRATEGIES: dict[str, tuple[str, dict[str, Any]]] = {
    "lexical": ("lexical", {}),
    "semantic": ("semantic", {}),
    "hybrid": ("hybrid", {"fusion": "rrf"}),
    "hybrid_convex": ("hybrid", {"fusion": "convex", "convex_alpha": 0.5}),
    "lexical_first": ("lexical_first", {"cascade_width": 200}),
    "auto": ("auto", {}),
}
"""The retrieval benchmarks' strategies: line name -> (request ``strategy``, request ``tuning``)."""

KEEP = "keep"
"""``on_duplicate`` of benchmark corpora: every document stays its own memory. Results are scored by document
id against the corpus's labels, and corpora hold true duplicates (repeated turns like "Thanks!", SciFact
abstracts sharing sentences); merging them would change the labels, not measure retrieval."""


@contextlib.contextmanager
def servers(settings: Settings) -> Iterator[tuple[str, str]]:
    """(owner DSN, Redis URL): the configured ones, else fresh embedded servers in a temp dir."""
    owner = settings.database.url or os.environ.get("DATABASE_URL")
    redis_url = settings.redis.url or os.environ.get("REDIS_URL")
    with contextlib.ExitStack() as stack:
        # Outside private folders: the embedded server runs as its own system user when we are root.
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pgcontext-bench-", dir="/tmp")))
        if owner is None:
            pg = EmbeddedPostgres(root / "postgres").start()
            stack.callback(pg.stop)
            owner = pg.dsn()
        if redis_url is None:
            redis = EmbeddedRedis(root / "redis").start()
            stack.callback(redis.stop)
            redis_url = redis.url()
        yield owner, redis_url


def running_embedded_dsn(data_dir: Path) -> str:
    """The superuser DSN of the embedded Postgres that a running service keeps under ``data_dir``
    (its ``PGCONTEXT_DATA_DIR``). Attached, not owned: the server keeps running after this process."""
    pg = EmbeddedPostgres(data_dir.resolve() / "postgres")
    if not pg.running():
        raise SystemExit(f"no embedded Postgres runs under {data_dir}: start the service on it first")
    return pg.start().dsn()


async def vacuum_loaded(dsn: str) -> None:
    """What autovacuum does to appended rows, now: after a bulk load the postings pages are not yet
    marked all-visible, and BM25's index-only scans would visit the heap for them (migration 0010)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM (ANALYZE) memories, memory_postings, memory_term_df, memory_lex_stats")
    finally:
        await conn.close()


async def new_tenant(owner_dsn: str, name: str) -> tuple[str, dict[str, str]]:
    """Create an org and a key; returns (org id, auth headers)."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        await admin.create_org(conn, name)
        issued = await admin.create_key(conn, name)
    finally:
        await conn.close()
    return str(issued.org_id), {"Authorization": f"Bearer {issued.key}"}


@contextlib.asynccontextmanager
async def app_client(settings: Settings, owner_dsn: str, redis_url: str) -> AsyncIterator[AsyncTestClient[Any]]:
    """The real app (migrated database, configured embedder) behind an in-process ASGI client."""
    app_dsn = await asyncio.to_thread(prepare_database, settings, owner_dsn)  # it runs its own event loop
    if "PGCONTEXT_RATE_LIMIT_RPS" not in os.environ:  # these benchmarks measure one org at full speed
        settings = dataclasses.replace(settings, rate_limit=dataclasses.replace(settings.rate_limit, rps=0,
                                                                                max_in_flight=0))
    app = create_app(settings, Endpoints(owner_dsn=owner_dsn, app_dsn=app_dsn, redis_url=redis_url))
    async with AsyncTestClient(app=app, timeout=120) as client:
        yield client


EMBED_BATCH = 256


def wait_ready(url: str, proc: subprocess.Popen[Any], log_path: Path, *, timeout_s: float, name: str = "the service",
               poll_s: float = 0.2) -> None:
    """Poll ``url``/readyz until it answers 200; exit with the log's path if ``proc`` dies or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                return
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"{name} did not become ready; see {log_path}")
        time.sleep(poll_s)


def stop_service(proc: subprocess.Popen[Any], timeout_s: float = 60) -> None:
    """Stop a ``pgcontext serve`` the benchmark started as an operator would (SIGINT: it stops its embedded
    servers first), killing it when it has not exited within ``timeout_s``."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def cached_embeddings(settings: Settings, texts: Sequence[str], cache_dir: Path, name: str) -> npt.NDArray[np.float32]:
    """The service embedder's vectors for ``texts`` (batches of 256), cached as ``.npy`` in ``cache_dir``
    under ``name``, the count, the model and a content hash, so later runs skip the model."""
    from service.embeddings import build_embedder

    embedder = build_embedder(settings.embedding, settings.data_dir)
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    model = re.sub(r"[^A-Za-z0-9_.-]+", "_", embedder.name)
    path = cache_dir / f"{name}-{len(texts)}-{model}-{digest}.npy"
    if path.exists():
        return np.asarray(np.load(path), dtype=np.float32)
    cache_dir.mkdir(parents=True, exist_ok=True)

    async def run() -> npt.NDArray[np.float32]:
        parts: list[npt.NDArray[np.float32]] = []
        started = time.perf_counter()
        for start in range(0, len(texts), EMBED_BATCH):
            parts.append(await embedder.embed(list(texts[start : start + EMBED_BATCH])))
            done = start + EMBED_BATCH
            if done % (EMBED_BATCH * 40) == 0:
                print(f"  embedded {done}/{len(texts)} ({done / (time.perf_counter() - started):.0f}/s)",
                      file=sys.stderr, flush=True)
        await embedder.aclose()
        return np.concatenate(parts).astype(np.float32)

    vectors = asyncio.run(run())
    tmp = path.with_suffix(f".{os.getpid()}.tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def ndcg_at(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    dcg = sum(relevant.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: Sequence[str], relevant: dict[str, int], k: int) -> float:
    wanted = {doc for doc, g in relevant.items() if g > 0}
    return len(wanted & set(ranked[:k])) / len(wanted) if wanted else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def status_kb(pid: int, field_name: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def rollup_kb(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
            name, value = line.split(":", 1)
            out[name] = int(value.split()[0])
    return out


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def service_pid(port: int) -> int:
    needle = f"serve --port {port}"
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if needle in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    return int(entry.name)
    raise SystemExit(f"no service process serving port {port}")


def postmaster_pid(data_dir: Path) -> int:
    for pid_file in data_dir.rglob("postmaster.pid"):
        return int(pid_file.read_text().split()[0])
    raise SystemExit(f"no postmaster.pid under {data_dir}")


def tree_pids(pid: int) -> list[int]:
    """``pid`` and its children (the postmaster and its backends)."""
    return [pid, *_children(pid)]


def _stat_cpu_seconds(stat: str, tick: int) -> float:
    """User + system CPU seconds in a ``/proc/<pid>/stat`` (or ``.../task/<tid>/stat``) line."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


def cpu_seconds_of(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds (user + system) used so far by each of these processes (those gone are left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError):
            out[pid] = _stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), tick)
    return out


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds between two :func:`cpu_seconds_of` readings (processes started between count in full)."""
    return sum(v - before.get(pid, 0.0) for pid, v in after.items())


CPU_GROUPS = (("service", ("service.cli serve", "uvicorn", "multiprocessing")), ("postgres", ("postgres",)),
              ("redis", ("redis-server",)))


SERVICE_MAIN_THREADS = "service main threads"
"""Key of :func:`cpu_seconds_by_group`'s reading of the service processes' main threads alone: their
event loops (with several workers, also the idle supervisor's). Part of ``service``, not a group of
its own: the rest of ``service`` is its other threads (the query embeddings, mostly)."""


def cpu_seconds_by_group() -> dict[str, float]:
    """CPU seconds (user + system) used so far by the local machine's service, Postgres and Redis processes,
    plus this process (``loadgen``), from ``/proc`` (Linux; elsewhere only ``loadgen``). Backends that
    exited are not counted, so take the difference of two readings around a run on pooled connections.
    :data:`SERVICE_MAIN_THREADS` is the share of ``service`` spent on its processes' main threads."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    out: dict[str, float] = {}
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            seconds = _stat_cpu_seconds((entry / "stat").read_text(), tick)
        except OSError:
            continue
        for group, needles in CPU_GROUPS:
            if any(n in cmdline for n in needles):
                out[group] = out.get(group, 0.0) + seconds
                if group == "service":
                    with contextlib.suppress(OSError):
                        main = _stat_cpu_seconds((entry / "task" / entry.name / "stat").read_text(), tick)
                        out[SERVICE_MAIN_THREADS] = out.get(SERVICE_MAIN_THREADS, 0.0) + main
                break
    times = os.times()
    out["loadgen"] = times.user + times.system
    return out


BUSY_LOOP = "while True:\n    pass\n"


@contextlib.contextmanager
def noise(count: int) -> Iterator[list[int]]:
    """``count`` busy processes beside the service, each in a session of its own (``setsid``), as
    other programs on a shared host are scheduled: with the kernel's autogroup scheduling each
    session gets its share of the cores, so one session running many hogs (or ``nice``) does not
    model them. Three per core is a busy host. Yields their pids; they are killed on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True,
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(max(0, count))]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        for p in procs:
            p.wait(10)

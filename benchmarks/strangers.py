"""What strangers cost: random bearer tokens against ``pgcontext mcp --http`` and invalid API keys against
the service. Counts, not latencies: it can run on a busy machine.

    python benchmarks/strangers.py                 # 10,000 of each
    python benchmarks/strangers.py --tokens 500 --keys 500

It starts ``pgcontext serve`` on the embedded servers under a temporary data dir and
``pgcontext mcp --http`` in front of it, then

* sends ``--keys`` requests with random invalid API keys (``--concurrency`` at a time) from one address
  and reads from Postgres how many key lookups reached it (``pg_stat_user_functions`` calls of
  ``pgcontext_resolve_api_key``, the service role's sessions tracking functions), against the limit
  the settings allow (``PGCONTEXT_AUTH_FAILURE_BURST`` + ``PGCONTEXT_AUTH_FAILURE_RATE_PER_S`` x the
  seconds it took);
* sends ``--tokens`` MCP requests with random bearer tokens and reports the MCP process's resident
  memory and open descriptors before, after the first tenth and at the end; then checks that a real
  key from another address still gets through (each flood comes from its own loopback address).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import running_embedded_dsn, status_kb, stop_service, wait_ready  # noqa: E402
from service.embedded.postgres import free_port  # noqa: E402

PGCONTEXT = str(Path(sys.executable).parent / "pgcontext")


def usage(pid: int) -> dict[str, int]:
    return {"rss_kb": status_kb(pid, "VmRSS"), "fds": len(os.listdir(f"/proc/{pid}/fd"))}


async def flood(url: str, count: int, concurrency: int, headers: Any, body: Any = None,
                address: str = "127.0.0.2") -> Counter[int | str]:
    """``count`` requests from ``address``, each with its own random key, ``concurrency`` at a time."""
    statuses: Counter[int | str] = Counter()
    queue = iter(range(count))

    async def worker(http: httpx.AsyncClient) -> None:
        for _ in queue:
            try:
                r = await (http.post(url, json=body, headers=headers()) if body is not None
                           else http.get(url, headers=headers()))
                statuses[r.status_code] += 1
            except httpx.TransportError as exc:
                statuses[type(exc).__name__] += 1

    async with httpx.AsyncClient(timeout=30, transport=httpx.AsyncHTTPTransport(local_address=address)) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    return statuses


async def key_lookups(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(await conn.fetchval("SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                                       "WHERE funcname = 'pgcontext_resolve_api_key'"))
    finally:
        await conn.close()


async def track_lookups(dsn: str) -> None:
    """The service role's sessions count function calls; its pooled sessions are replaced to pick it up."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ALTER ROLE pgcontext_app SET track_functions = 'all'")
        await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'pgcontext_app'")
        await conn.execute("SELECT pg_stat_reset()")
    finally:
        await conn.close()


def random_bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer pgc_{secrets.token_urlsafe(32)}"}


async def measure(args: argparse.Namespace, data: Path, base: str, key: str, mcp_url: str,
                  mcp_pid: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    dsn = running_embedded_dsn(data)
    await track_lookups(dsn)
    async with httpx.AsyncClient(timeout=30) as http:  # the pool reconnects (a 503 or two first)
        for _ in range(100):
            if (await http.get(f"{base}/v1/memories", headers={"Authorization": f"Bearer {key}"})).status_code == 200:
                break
            await asyncio.sleep(0.2)
    await asyncio.sleep(12)  # the warm-up's own lookup is flushed before counting starts
    before = await key_lookups(dsn)
    started = time.monotonic()
    statuses = await flood(f"{base}/v1/memories", args.keys, args.concurrency, random_bearer)
    seconds = time.monotonic() - started
    await asyncio.sleep(12)  # idle backends flush their statistics within 10 s
    lookups = await key_lookups(dsn) - before
    burst = int(os.environ.get("PGCONTEXT_AUTH_FAILURE_BURST", "20"))
    rate = float(os.environ.get("PGCONTEXT_AUTH_FAILURE_RATE_PER_S", "1"))
    report["invalid_keys"] = {"sent": args.keys, "seconds": round(seconds, 1), "statuses": dict(statuses),
                              "postgres_key_lookups": lookups, "allowed_by_settings": int(burst + rate * seconds)}

    mcp: dict[str, Any] = {"sent": args.tokens, "before": usage(mcp_pid)}
    first = max(1, args.tokens // 10)
    statuses = await flood(mcp_url, first, args.concurrency, random_bearer, body={}, address="127.0.0.3")
    mcp["after_first_tenth"] = usage(mcp_pid)
    statuses += await flood(mcp_url, args.tokens - first, args.concurrency, random_bearer, body={},
                            address="127.0.0.3")
    mcp["after_all"] = usage(mcp_pid)
    mcp["statuses"] = dict(statuses)
    # A real key from another address, after the flood: the service's per-address limit hit the
    # strangers' addresses (the MCP server forwards its caller's), not this one.
    async with httpx.AsyncClient(timeout=30, transport=httpx.AsyncHTTPTransport(local_address="127.0.0.4")) as http:
        r = await http.post(mcp_url, headers={"Authorization": f"Bearer {key}",
                                              "Accept": "application/json, text/event-stream"},
                            json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                                "protocolVersion": "2025-06-18", "capabilities": {},
                                "clientInfo": {"name": "strangers", "version": "1"}}})
        mcp["real_key_initialize_status"] = r.status_code
    report["mcp_random_tokens"] = mcp
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pgcontext-strangers-", dir="/tmp") as tmp:
        data = Path(tmp) / "data"
        models = ROOT / ".pgcontext" / "test-cache" / "models"
        if models.exists():
            shutil.copytree(models, data / "models")
        port, mcp_port = free_port(), free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGCONTEXT_")}
        env.update({"PGCONTEXT_DATA_DIR": str(data), "PGCONTEXT_PORT": str(port), "PGCONTEXT_LOG_LEVEL": "warning"})
        env.update({k: v for k, v in os.environ.items() if k.startswith("PGCONTEXT_AUTH_FAILURE")})
        log = Path(tmp) / "serve.log"
        base = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen([PGCONTEXT, "serve"], env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        mcp = None
        try:
            wait_ready(base, serve, log, timeout_s=300)
            key = log.read_text().split("Its API key (shown once):\n", 1)[1].split()[0]
            mcp = subprocess.Popen([PGCONTEXT, "mcp", "--http", "--port", str(mcp_port)],
                                   env={**env, "PGCONTEXT_URL": base, "PGCONTEXT_AGENT_ID": "strangers"},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.post(mcp_url, timeout=2)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise SystemExit("pgcontext mcp --http did not start") from None
                    time.sleep(0.2)
            report = asyncio.run(measure(args, data, base, key, mcp_url, mcp.pid))
            print(json.dumps(report, indent=2))
        finally:
            if mcp is not None:
                mcp.terminate()
                mcp.wait(30)
            stop_service(serve)


if __name__ == "__main__":
    main()

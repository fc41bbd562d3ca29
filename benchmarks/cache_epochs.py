"""What the cache-epoch check (service.db.epochs) costs a request, and how often it reads Postgres.

    python benchmarks/cache_epochs.py [--seconds 5] [--check-s 1.0]

Starts an embedded PostgreSQL (migrated) in a temporary directory, then:

* the in-memory path: ``CacheEpochs.current(org)`` with a fresh reading, awaited 100,000 times
  (what every directive and hot-set read pays while an org is in use);
* steady use: one ``current(org)`` per millisecond for ``--seconds``, counting the Postgres reads
  (expected: about one per ``check_s / 2``, all in the background) and the calls that had to wait
  for one (expected: only the very first);
* the read itself: p50/p99 of the epoch query (``cache.epoch``) in its own transaction.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from uuid import UUID

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.auth import admin  # noqa: E402
from service.db import Database, create_pool, migrate  # noqa: E402
from service.db.epochs import CacheEpochs  # noqa: E402
from service.embedded.postgres import EmbeddedPostgres  # noqa: E402


async def measure(owner_dsn: str, app_dsn: str, seconds: float, check_s: float) -> None:
    import asyncpg

    conn = await asyncpg.connect(owner_dsn)
    try:
        org_id: UUID = await admin.create_org(conn, "epochs")
    finally:
        await conn.close()
    pool = await create_pool(app_dsn, min_size=2, max_size=4)
    db = Database(pool, statement_timeout_ms=5000)
    epochs = CacheEpochs(db, check_s=check_s)
    reads = 0
    fetch = epochs._fetch

    async def counted(org: UUID) -> int:
        nonlocal reads
        reads += 1
        return await fetch(org)

    epochs._fetch = counted  # type: ignore[method-assign,assignment]
    try:
        await epochs.current(org_id)
        n = 100_000
        started = time.perf_counter()
        for _ in range(n):
            await epochs.current(org_id)
        per_call_us = (time.perf_counter() - started) / n * 1e6
        reads = 0
        epochs._known.clear()
        waited = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            await epochs.current(org_id)
            if time.perf_counter() - started > 0.0005:
                waited += 1
            await asyncio.sleep(0.001)
        query_ms = []
        for _ in range(200):
            started = time.perf_counter()
            await fetch(org_id)
            query_ms.append((time.perf_counter() - started) * 1000)
        query_ms.sort()
        print(f"in-memory current(): {per_call_us:.2f} µs per call (fresh reading)")
        print(f"steady use for {seconds:g} s at check_s={check_s:g}: {reads} Postgres reads "
              f"({reads / seconds:.2f}/s), {waited} calls waited > 0.5 ms for one")
        print(f"epoch read (own transaction): p50 {statistics.median(query_ms):.2f} ms, "
              f"p99 {query_ms[int(len(query_ms) * 0.99) - 1]:.2f} ms")
    finally:
        await epochs.aclose()
        await db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--check-s", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pgcontext-epochs-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "postgres")
        try:
            pg.start()
            migrate.upgrade(pg.dsn())
            password = migrate.derived_app_password(pg.dsn())
            asyncio.run(migrate.set_app_password(pg.dsn(), password))
            asyncio.run(measure(pg.dsn(), migrate.app_dsn(pg.dsn(), password), args.seconds, args.check_s))
        finally:
            pg.stop()


if __name__ == "__main__":
    main()

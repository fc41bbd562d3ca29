"""Read replicas: a real primary and a streaming replica made by ``pg_basebackup -R``.

A write then an immediate search sees the write (read-your-writes), reads run on the replica once it
has caught up (checked with ``pg_is_in_recovery()`` on the connection used), a replica held behind
is skipped, and stopping the replica mid-run moves reads to the primary without a 5xx.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from litestar.testing import AsyncTestClient
from prometheus_client import REGISTRY

from service.app import create_app
from service.auth import admin
from service.db import migrate
from service.embedded.postgres import EmbeddedPostgres
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.replica import make_replica, running, wait_caught_up, with_host
from tests.servers import fresh_database

pytestmark = pytest.mark.slow


@dataclasses.dataclass
class Cluster:
    primary: EmbeddedPostgres
    replica: EmbeddedPostgres
    owner_dsn: str
    replica_owner_dsn: str
    app_dsn: str
    replica_app_dsn: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("replication")
    with running(EmbeddedPostgres(root / "primary")) as primary, fresh_database(primary.dsn()) as owner_dsn:
        migrate.upgrade(owner_dsn)
        password = migrate.derived_app_password(owner_dsn)
        asyncio.run(migrate.set_app_password(owner_dsn, password))
        app_dsn = migrate.app_dsn(owner_dsn, password)
        with running(make_replica(primary, root / "replica")) as replica:
            assert replica._socket_dir is not None
            yield Cluster(primary, replica, owner_dsn, with_host(owner_dsn, replica._socket_dir), app_dsn,
                          with_host(app_dsn, replica._socket_dir))


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def replica_client(cluster: Cluster, settings: Settings, embedder: Embedder,
                         redis_url: str) -> AsyncIterator[AsyncTestClient[Any]]:
    db = dataclasses.replace(settings.database, read_urls=(cluster.replica_app_dsn,), read_max_lag_ms=400,
                             read_poll_ms=50)
    app = create_app(dataclasses.replace(settings, database=db),
                     Endpoints(owner_dsn=cluster.owner_dsn, app_dsn=cluster.app_dsn, redis_url=redis_url),
                     embedder=embedder)
    async with AsyncTestClient(app=app) as client:
        yield client


async def new_tenant(cluster: Cluster) -> Tenant:
    conn = await asyncpg.connect(cluster.owner_dsn)
    try:
        name = f"replica-{uuid.uuid4().hex[:10]}"
        await admin.create_org(conn, name)
        issued = await admin.create_key(conn, name)
    finally:
        await conn.close()
    return Tenant(name=name, org_id=issued.org_id, key=issued.key)


async def served_by(client: AsyncTestClient[Any], tenant: Tenant) -> str:
    """Where the app ran one listing for this org: "replica" or "primary" (the routing metric's delta;
    the app runs on the test client's own event loop, so its pools are not used from the test)."""
    before = {t: metric("pgcontext_db_reads_total", target=t) for t in ("replica", "primary")}
    r = await client.get("/v1/memories", params={"limit": 1}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    moved = [t for t in before if metric("pgcontext_db_reads_total", target=t) > before[t]]
    assert len(moved) == 1, moved
    return moved[0]


async def search_texts(client: AsyncTestClient[Any], tenant: Tenant, query: str) -> list[str]:
    r = await client.post("/v1/memories/search", json={"query": query, "limit": 10}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return [hit["text"] for hit in r.json()["results"]]


async def caught_up_reads(client: AsyncTestClient[Any], tenant: Tenant, timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while await served_by(client, tenant) != "replica":
        assert asyncio.get_running_loop().time() < deadline, "reads never moved to the caught-up replica"
        await asyncio.sleep(0.05)


async def test_read_your_writes_and_replica_reads(cluster: Cluster, replica_client: AsyncTestClient[Any]) -> None:
    client = replica_client
    tenant = await new_tenant(cluster)
    await wait_caught_up(cluster.owner_dsn, cluster.replica_owner_dsn)
    await caught_up_reads(client, tenant)
    replica_reads = metric("pgcontext_db_reads_total", target="replica")
    for i in range(15):  # each write, then at once a search and a listing that must see it
        token = f"zebra{i}quokka{uuid.uuid4().hex[:6]}"
        r = await client.post("/v1/memories", json={"memories": [{"text": f"note {token} about replicas"}]},
                              headers=tenant.headers)
        assert r.status_code == 201, r.text
        assert any(token in text for text in await search_texts(client, tenant, token)), f"write {i} not seen"
        listed = await client.get("/v1/memories", params={"limit": 1}, headers=tenant.headers)
        assert listed.status_code == 200 and token in listed.json()["items"][0]["text"]
    # Once the replica has replayed the org's last write, its reads run there.
    await caught_up_reads(client, tenant)
    before = metric("pgcontext_db_reads_total", target="replica")
    assert await search_texts(client, tenant, "replicas")
    assert metric("pgcontext_db_reads_total", target="replica") > before > replica_reads


async def test_lagging_replica_is_skipped(cluster: Cluster, replica_client: AsyncTestClient[Any]) -> None:
    client = replica_client
    reader, writer = await new_tenant(cluster), await new_tenant(cluster)
    await caught_up_reads(client, reader)
    control = await asyncpg.connect(cluster.replica_owner_dsn)
    try:
        await control.execute("SELECT pg_wal_replay_pause()")
        # Another org writes; the replica stops replaying, so its lag grows past read_max_lag_ms (400).
        r = await client.post("/v1/memories", json={"memories": [{"text": "written while paused"}]},
                                      headers=writer.headers)
        assert r.status_code == 201
        await asyncio.sleep(0.8)
        lagging = metric("pgcontext_read_replica_skips_total", reason="lagging")
        assert await served_by(client, reader) == "primary"  # an org with no pending write still avoids it
        assert metric("pgcontext_read_replica_skips_total", reason="lagging") > lagging
        assert metric("pgcontext_read_replica_lag_seconds", replica="0") >= 0.4
    finally:
        await control.execute("SELECT pg_wal_replay_resume()")
        await control.close()
    await caught_up_reads(client, reader)


async def test_connection_used_is_the_standby(cluster: Cluster, redis_url: str) -> None:
    """Database.read's connection is on the standby once it has caught up (``pg_is_in_recovery()``),
    and a write's transaction on the primary; the org's write LSN is in Redis under its hash tag."""
    from redis.asyncio import Redis

    from service.db import Database, create_pool
    from service.db.replicas import lsn_key, start_replicas
    from service.settings import DatabaseSettings

    tenant = await new_tenant(cluster)
    pool = await create_pool(cluster.app_dsn, min_size=1, max_size=2)
    redis = Redis.from_url(redis_url)
    db = Database(pool, statement_timeout_ms=5000, replicas=await start_replicas(
        DatabaseSettings(read_urls=(cluster.replica_app_dsn,), pool_max=2, read_poll_ms=20), pool, redis))
    try:
        async with db.tenant(tenant.org_id) as tx:
            assert not await tx.conn.fetchval("SELECT pg_is_in_recovery()")
            await tx.conn.execute("INSERT INTO memories (org_id, text) VALUES ($1, 'osprey')", tenant.org_id)
        shared = await redis.get(lsn_key(tenant.org_id))
        assert shared is not None and int(shared, 16) > 0
        standby = False
        for _ in range(200):
            standby = await db.read(tenant.org_id, lambda tx: tx.conn.fetchval("SELECT pg_is_in_recovery()"))
            if standby:
                break
            await asyncio.sleep(0.02)
        assert standby
        texts = await db.read(tenant.org_id, lambda tx: tx.conn.fetch("SELECT text FROM memories"))
        assert [r["text"] for r in texts] == ["osprey"]  # RLS on the standby too: the org's rows only
    finally:
        await db.close()
        await redis.aclose()


async def test_replica_stopped_mid_run(cluster: Cluster, replica_client: AsyncTestClient[Any]) -> None:
    client = replica_client
    tenant = await new_tenant(cluster)
    r = await client.post("/v1/memories", json={"memories": [{"text": f"kestrel {i} nests"} for i in range(20)]},
                          headers=tenant.headers)
    assert r.status_code == 201
    await caught_up_reads(client, tenant)
    statuses: list[int] = []

    async def requests() -> None:  # the test client blocks the loop per request: sequential, no tasks
        for request in (client.post("/v1/memories/search", json={"query": "kestrel nests"}, headers=tenant.headers),
                        client.get("/v1/memories", params={"limit": 5}, headers=tenant.headers),
                        client.post("/v1/context/assemble", headers=tenant.headers, json={
                            "agent_id": "a", "query": "kestrel", "model": "gpt-4o", "max_context_tokens": 2000})):
            statuses.append((await request).status_code)

    down = metric("pgcontext_read_replica_skips_total", reason="down")
    # pg_ctl stop -m fast in another thread (sessions terminated mid-query) while requests keep coming.
    stopper = threading.Thread(target=cluster.replica.stop)
    stopper.start()
    while stopper.is_alive():
        await requests()
    stopper.join()
    for _ in range(5):
        await requests()
    assert statuses and all(s < 500 for s in statuses), sorted(set(statuses))
    assert await served_by(client, tenant) == "primary"  # the primary now
    assert metric("pgcontext_read_replica_skips_total", reason="down") > down
    assert metric("pgcontext_read_replica_up", replica="0") == 0
    assert any(text.startswith("kestrel") for text in await search_texts(client, tenant, "kestrel"))

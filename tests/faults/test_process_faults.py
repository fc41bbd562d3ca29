"""Processes dying under writes: ``kill -9`` of the service and of Postgres while clients write
batches with an ``Idempotency-Key`` (retrying with the same key until acknowledged: 0 acknowledged
rows lost, 0 duplicated), no 500 while Postgres dies under document writes,
and SIGTERM under load (every request in flight completes)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.faults.conftest import Cluster, ServeProcess, service, tuned
from tests.faults.helpers import until

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.serial]

BATCH = 16
RETRYABLE = {409, 503}
"""409 ``idempotency_in_progress`` (the first attempt is still running) and 503 (database down)."""


class Writer:
    """Writes ``batches`` batches, each retried with its own Idempotency-Key until acknowledged."""

    def __init__(self, tenant: Tenant, prefix: str, batches: int, size: int = BATCH) -> None:
        self.tenant, self.prefix, self.batches, self.size = tenant, prefix, batches, size
        self.acknowledged: dict[str, list[str]] = {}
        self.statuses: Counter[int | str] = Counter()

    def body(self, i: int) -> dict[str, object]:
        # keep: a replay must be stopped by its Idempotency-Key, not hidden by merging duplicates; and fact
        # writers of one agent would queue on its scope lock, so held writes could not all reach their INSERT
        return {"on_duplicate": "keep", "memories": [{"text": f"{self.prefix} batch {i} item {j}", "agent_id": "writer"}
                                                     for j in range(self.size)]}

    async def run(self, base: Callable[[], str], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(headers=self.tenant.headers, timeout=15) as http:
            for i in range(self.batches):
                key = f"{self.prefix}-{i}"
                while True:
                    assert time.monotonic() < deadline, f"batch {i} never acknowledged: {self.statuses}"
                    try:
                        r = await http.post(f"{base()}/v1/memories", json=self.body(i),
                                            headers={"Idempotency-Key": key})
                    except httpx.TransportError as exc:
                        self.statuses[type(exc).__name__] += 1
                        await asyncio.sleep(0.1)
                        continue
                    self.statuses[r.status_code] += 1
                    if r.status_code == 201:
                        self.acknowledged[key] = r.json()["ids"]
                        break
                    assert r.status_code in RETRYABLE, r.text
                    await asyncio.sleep(0.1)

    async def check(self, cluster: Cluster) -> None:
        """Every acknowledged row is in Postgres exactly once, under the ids the service returned."""
        conn = await cluster.owner()
        try:
            rows = await conn.fetch("SELECT id, text FROM memories WHERE org_id = $1 AND text LIKE $2",
                                    self.tenant.org_id, f"{self.prefix} batch %")
        finally:
            await conn.close()
        counts = Counter(r["text"] for r in rows)
        expected = {f"{self.prefix} batch {i} item {j}" for i in range(self.batches) for j in range(self.size)}
        assert len(self.acknowledged) == self.batches
        assert set(counts) == expected, f"lost: {sorted(expected - set(counts))[:5]}"
        assert max(counts.values()) == 1, f"duplicated: {[t for t, n in counts.items() if n > 1][:5]}"
        returned = {UUID(i) for ids in self.acknowledged.values() for i in ids}
        assert returned == {r["id"] for r in rows}
        assert 500 not in self.statuses, self.statuses


async def replayed(base: str, writer: Writer, i: int) -> None:
    """A retry after acknowledgement is answered from the idempotency record: the same ids, no new rows."""
    async with httpx.AsyncClient(headers=writer.tenant.headers, timeout=15) as http:
        r = await http.post(f"{base}/v1/memories", json=writer.body(i),
                            headers={"Idempotency-Key": f"{writer.prefix}-{i}"})
    assert r.status_code == 201 and r.json()["ids"] == writer.acknowledged[f"{writer.prefix}-{i}"], r.text


async def test_kill_9_of_the_service_loses_nothing_then_sigterm_under_load_completes_what_is_in_flight(
        tmp_path: Path, settings: Settings, fault_endpoints: Endpoints, cluster: Cluster, fault_tenant: Tenant,
        serve_processes: list[ServeProcess]) -> None:
    """Two sections sharing their processes (every start of ``serve`` costs seconds): the clients fail
    over from a killed service to a second one, which then gets SIGTERM under load."""
    first = ServeProcess(tmp_path / "a", settings, fault_endpoints)
    second = ServeProcess(tmp_path / "b", settings, fault_endpoints)
    serve_processes += [first, second]
    await asyncio.gather(asyncio.to_thread(first.wait_ready), asyncio.to_thread(second.wait_ready))

    # kill -9 during idempotent batch writes: retried with the same key on the other instance.
    current = [first]
    writers = [Writer(fault_tenant, f"svc-{n}", batches=5) for n in range(2)]
    runs = asyncio.gather(*(w.run(lambda: current[0].base) for w in writers))
    await until(lambda: sum(len(w.acknowledged) for w in writers) >= 3 or runs.done(), 60, "3 batches written")
    first.kill()  # SIGKILL mid-stream: requests in flight are cut off, nothing is cleaned up
    current[0] = second
    await runs
    for writer in writers:
        await writer.check(cluster)
        await replayed(second.base, writer, 0)
    assert any(isinstance(k, str) for w in writers for k in w.statuses), "the kill cut no request off"

    # SIGTERM while batch writes are in flight: every one completes, then it exits 0. The writes are held
    # in flight by a lock on `memories` (their INSERTs wait on it), not by how long embedding takes: a
    # fast machine embeds four 64-text batches before any fixed sleep is over.
    loaded = Writer(fault_tenant, "term", batches=4, size=64)

    async def one(http: httpx.AsyncClient, i: int) -> httpx.Response:
        return await http.post(f"{second.base}/v1/memories", json=loaded.body(i),
                               headers={"Idempotency-Key": f"term-{i}"})

    holder = await cluster.owner()
    try:
        held = holder.transaction()
        await held.start()
        await holder.execute("LOCK TABLE memories IN SHARE MODE")  # INSERT (ROW EXCLUSIVE) waits on it
        async with httpx.AsyncClient(headers=fault_tenant.headers, timeout=60) as http:
            in_flight = [asyncio.ensure_future(one(http, i)) for i in range(loaded.batches)]
            deadline = time.monotonic() + 60
            while await holder.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"
                                        " AND relation = 'memories'::regclass") < loaded.batches:
                assert time.monotonic() < deadline, "the batch writes never reached their INSERT"
                assert not any(t.done() for t in in_flight), [t.result().text for t in in_flight if t.done()]
                await asyncio.sleep(0.05)
            stopping = asyncio.ensure_future(asyncio.to_thread(second.terminate))
            await asyncio.sleep(0.5)
            assert second.proc.poll() is None, "the service exited with requests in flight"
            assert not any(t.done() for t in in_flight), "a request was answered before its INSERT could run"
            await held.rollback()  # the writes go on; the stopping service lets them finish
            responses = await asyncio.gather(*in_flight)
            assert await stopping == 0, second.output.text()
    finally:
        await holder.close()
    for i, r in enumerate(responses):
        assert r.status_code == 201, r.text
        loaded.acknowledged[f"term-{i}"] = r.json()["ids"]
    await loaded.check(cluster)
    async with httpx.AsyncClient(timeout=2) as http:
        with pytest.raises(httpx.TransportError):  # and it is gone
            await http.get(f"{second.base}/healthz")


async def test_kill_9_of_postgres_during_batch_and_document_writes_loses_nothing_and_never_500s(
        settings: Settings, fault_endpoints: Endpoints, embedder: Embedder, cluster: Cluster,
        fault_tenant: Tenant) -> None:
    s = tuned(settings, database={"acquire_timeout_ms": 1000, "cleanup_timeout_ms": 2000})
    with service(s, fault_endpoints, embedder) as url:
        writer = Writer(fault_tenant, "pg", batches=6)
        documents: Counter[int | str] = Counter()
        stop = asyncio.Event()

        async def ingest() -> None:
            """Re-ingest a document tree in a loop: each file's chunks are replaced in one transaction."""
            files = [{"path": f"docs/file{n}.md", "content": ""} for n in range(4)]
            async with httpx.AsyncClient(base_url=url, headers=fault_tenant.headers, timeout=15) as http:
                version = 0
                while not stop.is_set():
                    version += 1
                    for f in files:
                        f["content"] = f"# Title v{version}\n\n" + "A line of prose.\n" * 20
                    try:
                        r = await http.post("/v1/documents", json={"files": files})
                        documents[r.status_code] += 1
                    except httpx.TransportError as exc:
                        documents[type(exc).__name__] += 1

        writing = asyncio.ensure_future(writer.run(lambda: url))
        ingesting = asyncio.ensure_future(ingest())
        try:
            await until(lambda: len(writer.acknowledged) >= 3 or writing.done(), 60, "3 batches written")
            cluster.crash()
            await asyncio.sleep(0.5)
            await asyncio.to_thread(cluster.restart)
            await writing
        finally:
            stop.set()
            await ingesting
        await writer.check(cluster)
        await replayed(url, writer, 0)
        assert 500 not in documents and 200 in documents, documents
        assert 503 in writer.statuses or 503 in documents, (writer.statuses, documents)  # the crash was felt

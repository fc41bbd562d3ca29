"""Optional model consolidation against a local stub of an OpenAI-compatible chat endpoint (started here):
queued with the write, decided after it commits (the write never waits for the model), retried on
failure, decided once however many workers run, recorded in the history and undone."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.app import build_services, close_services, create_app
from service.embeddings import Embedder
from service.memories.facts.consolidate import Consolidator
from service.memories.facts.model import ChatModel
from service.runtime import Endpoints
from service.settings import FactSettings, Settings
from tests.conftest import Tenant
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all


@dataclass
class Stub:
    """The chat endpoint: answers a decision by rule, can fail the next calls, can hold calls."""

    base: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0
    garbage_next: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    """Set when a call reaches the endpoint (before it waits for ``release``)."""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        new = prompt.split("\n", 1)[0]
        target = re.search(r"- id ([0-9a-f-]{36})", prompt)
        if "now" in new.split() and target:
            decision = {"decision": "supersede", "target": target.group(1), "reason": "a change of preference"}
        elif "same as before" in new and target:
            decision = {"decision": "merge", "target": target.group(1), "reason": "the same fact"}
        else:
            decision = {"decision": "add", "target": None, "reason": "different"}
        return {"choices": [{"message": {"role": "assistant", "content": json.dumps(decision)}}]}


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            stub.arrived.set()
            stub.release.wait(30)
            stub.calls.append(body)
            if stub.fail_next:
                stub.fail_next -= 1
                self._send(500, b'{"error": "overloaded"}')
            elif stub.garbage_next:
                stub.garbage_next -= 1
                self._send(200, json.dumps({"choices": [{"message": {"content": "I think merge?"}}]}).encode())
            else:
                self._send(200, json.dumps(stub.answer(body)).encode())

        def _send(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def stub() -> Iterator[Stub]:
    stub = Stub()
    stub.release.set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    stub.base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield stub
    stub.release.set()
    httpd.shutdown()
    httpd.server_close()


def _settings(settings: Settings, stub: Stub, **changes: Any) -> Settings:
    facts = FactSettings(**{"consolidation_api_base": stub.base, "consolidation_api_key": "test-key",
                            "consolidation_poll_s": 0.05, "consolidation_retry_s": 0.05,
                            "consolidation_timeout_s": 30.0, **changes})
    return dataclasses.replace(settings, facts=facts)


@pytest.fixture
async def consolidating(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                        stub: Stub) -> AsyncIterator[AsyncTestClient[Any]]:
    app = create_app(_settings(settings, stub), endpoints, embedder=embedder)
    async with AsyncTestClient(app=app, timeout=30) as client:
        yield client


async def _until(check: Any, timeout_s: float = 30.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        assert asyncio.get_running_loop().time() < deadline, "the worker did not decide in time"
        await asyncio.sleep(0.1)


async def test_a_model_supersedes_after_the_write_and_is_undone(consolidating: AsyncTestClient[Any], tenant: Tenant,
                                                               stub: Stub) -> None:
    client = consolidating
    (old,) = (await write(client, tenant, {"text": "The user prefers dark roast coffee.", "agent_id": "c",
                                           "occurred_at": "2024-01-01T00:00:00Z"}))["ids"]
    stub.release.clear()  # the model holds its answer: the write must not wait for it
    new = (await write(client, tenant, {"text": "The user now prefers medium roast coffee.", "agent_id": "c",
                                        "occurred_at": "2024-05-01T00:00:00Z"}))["items"][0]
    assert new["status"] == "created"
    assert {m["id"] for m in await list_all(client, tenant, agent_id="c")} == {old, new["id"]}  # committed as written
    stub.release.set()

    async def retired() -> bool:
        return [m["id"] for m in await list_all(client, tenant, agent_id="c")] == [new["id"]]

    await _until(retired)
    assert "Bearer test-key" not in json.dumps(stub.calls[-1])  # the key travels in a header, not the body
    event = next(e for e in await history(client, tenant, new["id"]) if e["event"] == "consolidated")
    assert event["detail"]["decision"] == "supersede" and event["detail"]["retired"] == [old]
    assert (await history(client, tenant, old))[-1]["event"] == "superseded"
    r = await client.post(f"/v1/memories/{new['id']}/history/{event['id']}/undo", json={"reason": "wrong"},
                          headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["reinstated"] == [old]
    assert {m["id"] for m in await list_all(client, tenant, agent_id="c")} == {old, new["id"]}


async def test_undoing_a_model_supersede_gives_back_the_end_the_memory_had(consolidating: AsyncTestClient[Any],
                                                                          tenant: Tenant) -> None:
    client = consolidating
    (old,) = (await write(client, tenant, {"text": "The user prefers dark roast coffee.", "agent_id": "e",
                                           "occurred_at": "2024-01-01T00:00:00Z",
                                           "valid_until": "2030-01-01T00:00:00Z"}))["ids"]
    (new,) = (await write(client, tenant, {"text": "The user now prefers medium roast coffee.", "agent_id": "e",
                                           "occurred_at": "2024-05-01T00:00:00Z"}))["ids"]

    async def decided() -> list[dict[str, Any]]:
        return [e for e in await history(client, tenant, new) if e["event"] == "consolidated"]

    (event,) = await _until(decided)
    assert event["detail"]["retired"] == [old]
    retired = await client.get(f"/v1/memories/{old}", headers=tenant.headers)
    assert retired.json()["valid_until"].startswith("2024-05-01"), retired.text
    r = await client.post(f"/v1/memories/{new}/history/{event['id']}/undo", json={}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["reinstated"] == [old], r.text
    back = (await client.get(f"/v1/memories/{old}", headers=tenant.headers)).json()
    assert back["current"] and back["valid_until"].startswith("2030-01-01"), back


async def test_a_decision_on_a_memory_retired_meanwhile_is_not_applied(consolidating: AsyncTestClient[Any],
                                                                       tenant: Tenant, stub: Stub) -> None:
    """The model decides on what it was shown; a write that retires the new memory before the decision
    lands wins: a retired memory retires nothing."""
    client = consolidating
    (old,) = (await write(client, tenant, {"text": "The user prefers dark roast coffee.", "agent_id": "r",
                                           "occurred_at": "2024-01-01T00:00:00Z"}))["ids"]
    stub.release.clear()
    stub.arrived.clear()
    (new,) = (await write(client, tenant, {"text": "The user now prefers medium roast coffee.", "agent_id": "r",
                                           "occurred_at": "2024-05-01T00:00:00Z"}))["ids"]
    assert await asyncio.to_thread(stub.arrived.wait, 30), "the worker never asked the model"
    (tea,) = (await write(client, tenant, {"text": "The user switched to green tea.", "agent_id": "r",
                                           "occurred_at": "2024-06-01T00:00:00Z", "supersedes": [new]}))["ids"]
    stub.release.set()

    async def decided() -> list[dict[str, Any]]:
        return [e for e in await history(client, tenant, new) if e["event"] == "consolidated"]

    (event,) = await _until(decided)
    assert event["detail"]["decision"] == "supersede" and event["detail"]["applied"] is False
    assert {m["id"] for m in await list_all(client, tenant, agent_id="r")} == {old, tea}


async def test_a_model_merge_is_recorded_and_undone(consolidating: AsyncTestClient[Any], tenant: Tenant) -> None:
    client = consolidating
    (kept,) = (await write(client, tenant, {"text": "Jo drives a blue hatchback.", "agent_id": "m"}))["ids"]
    (dup,) = (await write(client, tenant, {"text": "Jo drives a blue hatchback, same as before.",
                                           "agent_id": "m"}))["ids"]

    async def merged() -> bool:
        return [m["id"] for m in await list_all(client, tenant, agent_id="m")] == [kept]

    await _until(merged)
    event = next(e for e in await history(client, tenant, kept) if e["event"] == "consolidated")
    assert event["detail"]["decided_by"] == "model" and event["detail"]["item"]["id"] == dup
    r = await client.post(f"/v1/memories/{kept}/history/{event['id']}/undo", json={}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["restored"] == dup


async def test_failures_are_retried_and_a_job_is_decided_once(settings: Settings, endpoints: Endpoints,
                                                              embedder: Embedder, tenant: Tenant, stub: Stub) -> None:
    """The app only queues (no worker of its own); three workers of another process take turns."""
    queueing = _settings(settings, stub, consolidation_worker=False)
    async with AsyncTestClient(app=create_app(queueing, endpoints, embedder=embedder), timeout=30) as client:
        await write(client, tenant, {"text": "Kim works at the bakery downtown.", "agent_id": "r"})
        (new,) = (await write(client, tenant, {"text": "Kim now works at the bakery uptown.",
                                               "agent_id": "r"}))["ids"]
        stub.fail_next, stub.garbage_next = 1, 1
        services = await build_services(queueing, endpoints, embedder)
        workers = [Consolidator(services, ChatModel(services.settings.facts)) for _ in range(3)]
        events: list[dict[str, Any]] = []
        try:
            for _ in range(40):
                await asyncio.gather(*(w.run_once() for w in workers))
                events = [e for e in await history(client, tenant, new) if e["event"] == "consolidated"]
                if events:
                    break
                await asyncio.sleep(0.1)
            assert [await w.run_once() for w in workers] == [0, 0, 0]
        finally:
            for w in workers:
                await w.aclose()
            await close_services(services, close_embedder=False)
        assert len(events) == 1 and events[0]["detail"]["decision"] == "supersede"
        assert len(stub.calls) == 3  # a 500, an answer that is not JSON, then the decision: never twice
        assert [m["id"] for m in await list_all(client, tenant, agent_id="r")] == [new]

"""Org B against every tenant endpoint, aimed at org A's objects: nothing of A's is shown,
changed or deleted, and B's requests leave A's Redis keys alone.

The endpoints come from the app's route table (every handler that takes ``org_id``): a new endpoint
without a case in :data:`CASES` fails :func:`test_every_tenant_endpoint_has_a_cross_tenant_case`.
Org A's objects all carry a secret word; every response B gets is checked for it and for A's ids,
and A's state (memories with usefulness, directives, documents, index, export, hot set, Redis keys)
is snapshotted before B's attempts and compared after. The embedder circuit's per-org isolation is
pinned down in test_side_channels.py (it needs a failing embedder).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

import httpx
import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.app import create_app
from service.embeddings import Embedder
from service.http.deps import strip_param_types
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant

AGENT = "shared-agent"
"""An agent id both orgs use."""
A_ONLY = "a-only-agent"
"""An agent only org A has (memories and a directive)."""
DOC = "src/secret_module.py"
A_ONLY_DOC = "src/a_only.py"
CHAT = "shared-chat"
"""A conversation id of A's that B uses too."""
STRATEGIES = ("auto", "hybrid", "lexical", "semantic", "lexical_first")


@dataclass
class World:
    client: AsyncTestClient[Any]
    a: Tenant
    b: Tenant
    secret: str
    """A word in every object of A's that B searches for (and so sends)."""
    hidden: str
    """A word in every object of A's that B never sends: seeing it in an answer is a leak."""
    a_ids: list[str] = field(default_factory=list)
    b_ids: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)

    async def as_b(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """B's request; records a leak when A's secret or ids show in the answer, or a 5xx."""
        headers = {**self.b.headers, **kwargs.pop("headers", {})}
        sent = f"{url} {kwargs}"  # what B itself sent may be echoed (a query, the id of a 404)
        r = await self.client.request(method, url, headers=headers, **kwargs)
        where = f"{method} {url}"
        if r.status_code >= 500:
            self.leaks.append(f"{where}: {r.status_code} {r.text[:200]}")
        if self.hidden in r.text:
            self.leaks.append(f"{where}: A's content in the answer: {r.text[:300]}")
        shown = [i for i in self.a_ids if i in r.text and i not in sent]
        if shown:
            self.leaks.append(f"{where}: A's memory ids in the answer: {shown}")
        return r

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            self.leaks.append(what)


async def _ok(r: httpx.Response) -> Any:
    assert r.status_code < 300, r.text[:300]
    return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else r.text


async def seed(client: AsyncTestClient[Any], a: Tenant, b: Tenant) -> World:
    w = World(client, a, b, secret=f"zq{uuid4().hex[:10]}secret", hidden=f"hid{uuid4().hex[:10]}den")
    s = f"{w.secret} {w.hidden}"
    r = await client.post("/v1/memories", headers={**a.headers, "Idempotency-Key": "shared-key"}, json={"memories": [
        {"text": f"The vault code is {s} and launch is Tuesday", "agent_id": AGENT,
         "metadata": {"tag": w.secret, "note": w.hidden}},
        {"text": f"Org-wide rule {s}: badges at all times", "agent_id": None, "metadata": {"tag": w.secret}},
        {"text": f"Only A knows {s}", "agent_id": A_ONLY, "kind": "episode"}]})
    w.a_ids = [str(i) for i in (await _ok(r))["ids"]]
    # a duplicate merged into A's first memory (its history holds a merge B could try to undo), and A's default
    await _ok(await client.post("/v1/memories", headers=a.headers, json={
        "text": f"the vault code is {s} and launch is tuesday", "agent_id": AGENT}))
    await _ok(await client.patch("/v1/org/settings", headers=a.headers, json={"on_duplicate": "reject"}))
    r = await client.post("/v1/memories", headers=b.headers,
                          json={"text": "B's own note about launches", "agent_id": AGENT})
    w.b_ids = [str(i) for i in (await _ok(r))["ids"]]
    for agent in (AGENT, A_ONLY):
        await _ok(await client.put(f"/v1/agents/{agent}/directive", headers=a.headers,
                                   json={"content": f"Directive {s} for {agent}"}))
    files = [{"path": path, "content": f'"""Module {s}."""\n\ndef {w.secret}_fn():\n    return "{w.hidden}"\n'}
             for path in (DOC, A_ONLY_DOC)]
    await _ok(await client.post("/v1/documents", headers=a.headers, json={"files": files, "agent_id": AGENT}))
    await _ok(await client.post("/v1/memories/feedback", headers=a.headers,
                                json={"items": [{"id": w.a_ids[0], "helpful": True}]}))
    await _ok(await client.get("/v1/memories/hot", params={"agent_id": AGENT}, headers=a.headers))
    chat = f"/v1/conversations/{CHAT}/messages"
    r = await client.post(chat, headers=a.headers, json={"agent_id": AGENT, "messages": [
        {"speaker": "Ann", "content": f"The vault code is {s}", "session_id": "s1", "message_id": "m1",
         "metadata": {"tag": w.secret}},
        {"role": "assistant", "content": f"Noted: {s} opens the vault", "session_id": "s1", "message_id": "m2"}]})
    w.a_ids += [str(m["id"]) for m in (await _ok(r))["messages"]]
    for strategy in STRATEGIES:  # warms A's embedding cache and cold-limit stats with the secret query
        await _ok(await client.post("/v1/memories/search", headers=a.headers,
                                    json={"query": f"vault code {w.secret}", "strategy": strategy}))
    await _ok(await client.post("/v1/context/assemble", headers=a.headers, json={
        "agent_id": AGENT, "query": f"vault code {w.secret}", "model": "gpt-4o", "max_context_tokens": 2000}))
    return w


async def snapshot(w: World, redis: Redis) -> dict[str, Any]:
    """Everything of A's that B must not change (volatile fields such as access stats left out)."""
    c, h = w.client, w.a.headers
    memories = []
    for i in w.a_ids:
        m = await _ok(await c.get(f"/v1/memories/{i}", headers=h))
        memories.append({k: m[k] for k in ("id", "text", "agent_id", "kind", "metadata", "usefulness", "updated_at")})
    listed = await _ok(await c.get("/v1/memories", params={"limit": 200}, headers=h))
    directives = [await _ok(await c.get(f"/v1/agents/{a}/directive", headers=h)) for a in (AGENT, A_ONLY)]
    documents = await _ok(await c.get("/v1/documents", headers=h))
    index = await _ok(await c.get("/v1/documents/index", headers=h))
    export = await _ok(await c.get("/v1/export", params={"agent_id": AGENT}, headers=h))
    hot = await _ok(await c.get("/v1/memories/hot", params={"agent_id": AGENT}, headers=h))
    history = [await _ok(await c.get(f"/v1/memories/{i}/history", headers=h)) for i in w.a_ids]
    settings = await _ok(await c.get("/v1/org/settings", headers=h))
    conversations = await _ok(await c.get("/v1/conversations", headers=h))
    messages = await _ok(await c.get(f"/v1/conversations/{CHAT}/messages", headers=h))
    keys = {}
    async for key in redis.scan_iter(match=f"{{{w.a.org_id}}}:*", count=1000):
        name = key.decode()
        if not name.endswith(":ratelimit"):  # A's own requests above take from A's bucket
            keys[name] = await redis.dump(key)
    return {"memories": memories, "listed": sorted(m["id"] for m in listed["items"]), "directives": directives,
            "documents": documents["items"], "index": {k: index[k] for k in ("revision", "files", "chunks")},
            "export": sorted(_stable(export)), "hot": [i["id"] for i in hot["items"]], "redis": keys,
            "history": history, "settings": settings,
            "conversations": conversations["items"], "messages": messages["items"]}


VOLATILE = ("exported_at", "last_accessed_at", "access_count")
"""Export fields that change without anyone changing A's objects."""


def _stable(ndjson: str) -> list[str]:
    return [json.dumps({k: v for k, v in json.loads(line).items() if k not in VOLATILE}, sort_keys=True)
            for line in ndjson.splitlines()]


# -- one case per tenant endpoint: org B aims at org A's objects ----------------------------------------

async def memory_get(w: World) -> None:
    for i in w.a_ids:
        w.expect((await w.as_b("GET", f"/v1/memories/{i}")).status_code == 404, f"GET memory {i} not 404")


async def memory_patch(w: World) -> None:
    for i in w.a_ids:
        r = await w.as_b("PATCH", f"/v1/memories/{i}", json={"text": "overwritten by B", "importance": 1.0})
        w.expect(r.status_code == 404, f"PATCH memory {i}: {r.status_code}")


async def memory_delete(w: World) -> None:
    for i in w.a_ids:
        w.expect((await w.as_b("DELETE", f"/v1/memories/{i}")).status_code == 404, f"DELETE memory {i} not 404")


async def memory_list(w: World) -> None:
    for params in ({}, {"agent_id": AGENT}, {"agent_id": A_ONLY}, {"kind": "episode"},
                   {"metadata": f'{{"tag": "{w.secret}"}}'}):
        r = await w.as_b("GET", "/v1/memories", params={"limit": 200, **params})
        ids = {m["id"] for m in r.json()["items"]}
        w.expect(r.status_code == 200 and ids <= set(w.b_ids), f"list {params}: {ids}")


async def memory_create(w: World) -> None:
    # The key A used, with A's exact body: a new memory of B's, never A's replay.
    body = {"memories": [{"text": f"The vault code is {w.secret} and launch is Tuesday", "agent_id": AGENT}]}
    r = await w.client.post("/v1/memories", json=body, headers={**w.b.headers, "Idempotency-Key": "shared-key"})
    w.expect(r.status_code == 201 and "idempotent-replayed" not in r.headers, f"idempotent create: {r.status_code}")
    created = [str(i) for i in r.json()["ids"]]
    w.expect(not set(created) & set(w.a_ids), f"B's create answered A's ids {created}")
    for i in created:  # B's copy of the text is B's own; remove it so the secret stays A's alone
        await w.client.delete(f"/v1/memories/{i}", headers=w.b.headers)


async def memory_erase_agent(w: World) -> None:
    for agent in (AGENT, A_ONLY):
        r = await w.as_b("DELETE", "/v1/memories", params={"agent_id": agent})
        expected = len(w.b_ids) if agent == AGENT else 0
        w.expect(r.status_code == 200 and r.json()["deleted"] == expected, f"erase {agent}: {r.text[:200]}")
    r = await w.client.post("/v1/memories", headers=w.b.headers,
                            json={"text": "B's own note about launches", "agent_id": AGENT})
    w.b_ids = [str(i) for i in r.json()["ids"]]


async def search(w: World) -> None:
    queries = [w.secret, f"vault code {w.secret}", f'"{w.secret}"', f"{w.secret}_fn", DOC]
    for strategy in STRATEGIES:
        for query in queries:
            for filters in ({}, {"agent_id": AGENT}, {"metadata": {"tag": w.secret}}, {"source_prefix": "src/"}):
                r = await w.as_b("POST", "/v1/memories/search",
                                 json={"query": query, "strategy": strategy, "limit": 50, "filters": filters})
                w.expect(r.status_code == 200, f"search {strategy} {query!r} {filters}: {r.status_code}")
    for fusion in ("rrf", "convex"):
        await w.as_b("POST", "/v1/memories/search", json={"query": w.secret, "strategy": "hybrid",
                                                          "tuning": {"fusion": fusion}})
    for modes in (["exact", "path", "symbol", "lexical", "semantic"], "all"):
        for query in (w.secret, DOC, f"{w.secret}_fn"):
            r = await w.as_b("POST", "/v1/memories/search", json={"query": query, "modes": modes})
            w.expect(r.status_code == 200, f"search modes {modes} {query!r}: {r.status_code}")
    # No timing signal: A searched these phrases, B's first search of them is not a cache hit.
    for query in (f"vault code {w.secret}",):
        r = await w.as_b("POST", "/v1/memories/search", json={"query": query + " ", "strategy": "semantic"})
        w.expect(r.json()["metrics"].get("embedding_cached") is not True, "B hit A's query-embedding cache")


async def directive_get(w: World) -> None:
    for agent in (A_ONLY, AGENT):
        r = await w.as_b("GET", f"/v1/agents/{agent}/directive")
        w.expect(r.status_code == 404 or r.json()["content"].startswith("B:"), f"GET directive {agent}: {r.text}")


async def directive_put(w: World) -> None:
    r = await w.as_b("PUT", f"/v1/agents/{AGENT}/directive", json={"content": "B: be casual."})
    w.expect(r.status_code == 200 and r.json()["version"] == 1, f"PUT directive: {r.text[:200]}")


async def directive_delete(w: World) -> None:
    r = await w.as_b("DELETE", f"/v1/agents/{A_ONLY}/directive")
    w.expect(r.status_code == 404, f"DELETE A's directive: {r.status_code}")


async def documents_ingest(w: World) -> None:
    # Same path and content as A's file: B's ingest creates B's own copy (never "unchanged"/"updated").
    content = f'"""Module {w.secret}."""\n\ndef {w.secret}_fn():\n    return "{w.secret}"\n'
    r = await w.client.post("/v1/documents", headers=w.b.headers,
                            json={"files": [{"path": DOC, "content": content}], "agent_id": AGENT})
    statuses = [f["status"] for f in r.json().get("files", [])] if r.status_code == 200 else []
    w.expect(statuses == ["created"], f"ingest: {r.text[:300]}")
    d = await w.client.delete("/v1/documents", params={"path": DOC}, headers=w.b.headers)
    w.expect(d.status_code == 200, f"B deleting its own copy: {d.status_code}")


async def documents_list(w: World) -> None:
    for params in ({}, {"path_prefix": "src/"}, {"collection": "default"}):
        r = await w.as_b("GET", "/v1/documents", params=params)
        w.expect(r.status_code == 200 and r.json()["items"] == [], f"documents list {params}: {r.text[:200]}")


async def documents_delete(w: World) -> None:
    r = await w.as_b("DELETE", "/v1/documents", params={"path": A_ONLY_DOC})
    w.expect(r.status_code == 404, f"DELETE A's document: {r.status_code}")


async def documents_index(w: World) -> None:
    r = await w.as_b("GET", "/v1/documents/index")
    w.expect(r.status_code == 200 and r.json()["files"] == 0 and r.json()["chunks"] == 0,
             f"index: {r.text[:300]}")


async def assemble(w: World) -> None:
    for strategy in STRATEGIES:
        for agent in (AGENT, A_ONLY):
            r = await w.as_b("POST", "/v1/context/assemble", json={
                "agent_id": agent, "query": f"vault code {w.secret}", "model": "gpt-4o", "max_context_tokens": 4000,
                "retrieval": {"strategy": strategy}})
            used = {m["id"] for m in r.json().get("memories_used", [])}
            w.expect(r.status_code == 200 and used <= set(w.b_ids), f"assemble {strategy} {agent}: {r.text[:200]}")


async def hot(w: World) -> None:
    for agent in (AGENT, A_ONLY):
        r = await w.as_b("GET", "/v1/memories/hot", params={"agent_id": agent})
        ids = {i["id"] for i in r.json()["items"]}
        w.expect(r.status_code == 200 and ids <= set(w.b_ids), f"hot {agent}: {ids}")


async def feedback(w: World) -> None:
    for body in ({"items": [{"id": i, "helpful": False} for i in w.a_ids]},
                 {"memory_ids": w.a_ids, "helpful": False}):
        r = await w.client.post("/v1/memories/feedback", json=body, headers=w.b.headers)
        w.expect(r.status_code == 200 and sorted(r.json()["not_found"]) == sorted(w.a_ids), f"feedback: {r.text}")


async def export(w: World) -> None:
    for agent in (AGENT, A_ONLY):
        r = await w.as_b("GET", "/v1/export", params={"agent_id": agent})
        w.expect(r.status_code == 200, f"export {agent}: {r.status_code}")
    r = await w.as_b("GET", "/v1/export")  # the whole org: B's
    w.expect(r.status_code == 200 and r.text.count('"type": "memory"') + r.text.count('"type":"memory"') > 0,
             f"B's org export: {r.status_code}")


async def import_lines(w: World) -> None:
    """B imports lines naming A's ids (a memory, events on A's memory undoing A's event, a directive of A's
    agent, org defaults, a file at a path of A's): they become B's own rows; A's are untouched (the final
    snapshot, A's defaults).
    Runs last: B then holds rows under A's ids."""
    events = (await _ok(await w.client.get(f"/v1/memories/{w.a_ids[0]}/history", headers=w.a.headers)))["items"]
    lines = [{"type": "memory", "id": w.a_ids[0], "text": "B's own note.", "agent_id": AGENT},
             {"type": "event", "id": events[0]["id"], "memory_id": w.a_ids[0], "event": "undone",
              "at": "2024-01-01T00:00:00Z", "undoes": events[0]["id"], "detail": {}},
             {"type": "directive", "agent_id": A_ONLY, "content": "B's directive."},
             {"type": "settings", "on_duplicate": "reject"},
             {"type": "document", "path": A_ONLY_DOC, "content": "B's own file.\n"}]
    a_defaults = (await _ok(await w.client.get("/v1/org/settings", headers=w.a.headers)))["on_duplicate"]
    r = await w.as_b("POST", "/v1/import", json={"lines": lines})
    imported = {"directive": 1, "memory": 1, "event": 1, "settings": 1, "document": 1, "conversation": 0}
    w.expect(r.status_code == 200 and r.json()["imported"] == imported, f"B's import: {r.text}")
    r = await w.client.get("/v1/org/settings", headers=w.a.headers)
    w.expect(r.json()["on_duplicate"] == a_defaults, f"A's defaults after B's import: {r.text}")
    r = await w.as_b("GET", f"/v1/memories/{w.a_ids[0]}")
    w.expect(r.status_code == 200 and r.json()["text"] == "B's own note.", f"B's imported memory: {r.text}")
    r = await w.as_b("POST", "/v1/memories/search", json={"query": "B's own file", "modes": ["exact"]})
    w.expect(r.status_code == 200 and [x["path"] for x in r.json()["results"]] == [A_ONLY_DOC],
             f"B's imported file: {r.text}")


async def history(w: World) -> None:
    for i in w.a_ids:
        r = await w.as_b("GET", f"/v1/memories/{i}/history")
        w.expect(r.status_code == 404, f"history of A's memory: {r.status_code}")


async def undo(w: World) -> None:
    events = (await _ok(await w.client.get(f"/v1/memories/{w.a_ids[0]}/history", headers=w.a.headers)))["items"]
    for event in events:
        r = await w.as_b("POST", f"/v1/memories/{w.a_ids[0]}/history/{event['id']}/undo", json={})
        w.expect(r.status_code == 404, f"undo of A's event: {r.status_code}")


async def org_settings_get(w: World) -> None:
    r = await w.as_b("GET", "/v1/org/settings")
    w.expect(r.status_code == 200 and r.json()["on_duplicate"] == "merge", f"B's settings: {r.text}")


async def org_settings_patch(w: World) -> None:
    r = await w.as_b("PATCH", "/v1/org/settings", json={"on_duplicate": "keep"})
    w.expect(r.status_code == 200 and r.json()["on_duplicate"] == "keep", f"B's settings: {r.text}")


async def conversation_append(w: World) -> None:
    # A's conversation id, A's message ids and words: B's own new conversation, never A's replay.
    body = {"agent_id": AGENT, "messages": [{"speaker": "Ann", "content": f"The vault code is {w.secret}",
                                              "session_id": "s1", "message_id": "m1"}]}
    r = await w.as_b("POST", f"/v1/conversations/{CHAT}/messages", json=body)
    out = r.json() if r.status_code == 201 else {}
    w.expect(out.get("created") is True and [m["position"] for m in out.get("messages", [])] == [1]
             and all(m["created"] for m in out["messages"]), f"append to A's conversation id: {r.text[:300]}")
    d = await w.client.delete(f"/v1/conversations/{CHAT}", headers=w.b.headers)
    w.expect(d.status_code == 200 and d.json()["messages_deleted"] == 1, f"B deleting its own copy: {d.text[:200]}")


async def conversation_messages(w: World) -> None:
    for params in ({}, {"session_id": "s1"}, {"limit": 1}, {"order": "desc"}):
        r = await w.as_b("GET", f"/v1/conversations/{CHAT}/messages", params=params)
        w.expect(r.status_code == 404, f"GET A's messages {params}: {r.status_code}")


async def conversation_truncate(w: World) -> None:
    for params in ({"from_position": 1}, {"from_position": 1, "message_count": 1},
                   {"from_position": 1, "agent_id": AGENT}, {"from_position": 1, "agent_id": A_ONLY}):
        r = await w.as_b("DELETE", f"/v1/conversations/{CHAT}/messages", params=params)
        w.expect(r.status_code == 404, f"DELETE A's last messages {params}: {r.status_code}")


async def conversation_get(w: World) -> None:
    r = await w.as_b("GET", f"/v1/conversations/{CHAT}")
    w.expect(r.status_code == 404, f"GET A's conversation: {r.status_code}")


async def conversation_list(w: World) -> None:
    for params in ({}, {"agent_id": AGENT}):
        r = await w.as_b("GET", "/v1/conversations", params=params)
        w.expect(r.status_code == 200 and r.json()["items"] == [], f"list conversations {params}: {r.text[:200]}")


async def conversation_delete(w: World) -> None:
    for params in ({}, {"agent_id": AGENT}, {"agent_id": A_ONLY}):  # never a 409 naming A's agent
        r = await w.as_b("DELETE", f"/v1/conversations/{CHAT}", params=params)
        w.expect(r.status_code == 404, f"DELETE A's conversation {params}: {r.status_code}")


Case = Callable[[World], Awaitable[None]]
CASES: dict[tuple[str, str], Case] = {
    ("GET", "/v1/memories/{memory_id}"): memory_get,
    ("PATCH", "/v1/memories/{memory_id}"): memory_patch,
    ("DELETE", "/v1/memories/{memory_id}"): memory_delete,
    ("GET", "/v1/memories"): memory_list,
    ("POST", "/v1/memories"): memory_create,
    ("DELETE", "/v1/memories"): memory_erase_agent,
    ("POST", "/v1/memories/search"): search,
    ("GET", "/v1/agents/{agent_id}/directive"): directive_get,
    ("PUT", "/v1/agents/{agent_id}/directive"): directive_put,
    ("DELETE", "/v1/agents/{agent_id}/directive"): directive_delete,
    ("POST", "/v1/documents"): documents_ingest,
    ("GET", "/v1/documents"): documents_list,
    ("DELETE", "/v1/documents"): documents_delete,
    ("GET", "/v1/documents/index"): documents_index,
    ("POST", "/v1/context/assemble"): assemble,
    ("GET", "/v1/memories/hot"): hot,
    ("POST", "/v1/memories/feedback"): feedback,
    ("GET", "/v1/export"): export,
    ("GET", "/v1/memories/{memory_id}/history"): history,
    ("POST", "/v1/memories/{memory_id}/history/{event_id}/undo"): undo,
    ("GET", "/v1/org/settings"): org_settings_get,
    ("PATCH", "/v1/org/settings"): org_settings_patch,
    ("POST", "/v1/import"): import_lines,
    ("POST", "/v1/conversations/{conversation_id}/messages"): conversation_append,
    ("GET", "/v1/conversations/{conversation_id}/messages"): conversation_messages,
    ("DELETE", "/v1/conversations/{conversation_id}/messages"): conversation_truncate,
    ("GET", "/v1/conversations/{conversation_id}"): conversation_get,
    ("GET", "/v1/conversations"): conversation_list,
    ("DELETE", "/v1/conversations/{conversation_id}"): conversation_delete,
}
"""(method, route) -> org B's attempts on org A's objects. Order matters only in that the directive
GET runs before B's PUT (then B sees its own directive, never A's)."""


def tenant_routes(app: Any) -> set[tuple[str, str]]:
    """Every (method, route) whose handler takes the caller's org: the tenant endpoints."""
    return {(method, strip_param_types(route.path))
            for route in app.routes for handler in getattr(route, "route_handlers", [])
            if "org_id" in handler.parsed_fn_signature.parameters for method in handler.http_methods}


def test_every_tenant_endpoint_has_a_cross_tenant_case(settings: Settings, endpoints: Endpoints,
                                                       embedder: Embedder) -> None:
    routes = tenant_routes(create_app(settings, endpoints, embedder=embedder))
    assert routes == set(CASES), {"without a case": routes - set(CASES), "no such route": set(CASES) - routes}


@pytest.mark.slow
async def test_org_b_cannot_read_change_or_observe_org_a(client: AsyncTestClient[Any], redis_url: str,
                                                          tenant: Tenant, other_tenant: Tenant) -> None:
    w = await seed(client, tenant, other_tenant)
    redis = Redis.from_url(redis_url)
    try:
        before = await snapshot(w, redis)
        assert before["memories"] and before["documents"] and before["hot"] and before["redis"]
        for case in CASES.values():
            await case(w)
        assert not w.leaks, "\n".join(w.leaks)
        after = await snapshot(w, redis)
    finally:
        await redis.aclose()
    for part in before:
        assert after[part] == before[part], f"org B's requests changed org A's {part}"
    assert {UUID(i) for i in w.a_ids} <= {UUID(i) for i in before["listed"]}  # (document chunks are listed too)

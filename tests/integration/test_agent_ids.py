"""One agent-id rule everywhere an agent id is accepted: 1-200 of ``A-Za-z0-9_.:@-``, nothing else (a
trailing newline included: Python's ``$`` matches before one). Every endpoint answers a bad id with 400
``validation_error`` in the one error shape, and writes nothing; the MCP server refuses one at start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import asyncpg
import msgspec
import pytest
from litestar.testing import AsyncTestClient

from service.cli import main as cli
from service.memories.types import AgentId, is_agent_id
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_memories_api import ERROR_KEYS

BAD_IDS = ["a\n", "agent\r", "", "has space", "x" * 201, "semi;colon", "slash/ed", "caf\u00e9", "tab\t", "nul\x00"]
GOOD_IDS = ["a", "agent-7", "user@example.com", "team:ops_1.v2", "x" * 200]

Request = Callable[[AsyncTestClient[Any], Tenant, str, str], Awaitable[Any]]


async def _create_memory(client: AsyncTestClient[Any], tenant: Tenant) -> str:
    r = await client.post("/v1/memories", json={"text": "A memory to patch.", "agent_id": "owner"},
                          headers=tenant.headers)
    assert r.status_code == 201, r.text
    return str(r.json()["ids"][0])


async def _patch(client: AsyncTestClient[Any], tenant: Tenant, bad: str, _: str) -> Any:
    memory_id = await _create_memory(client, tenant)
    return await client.patch(f"/v1/memories/{memory_id}", json={"agent_id": bad}, headers=tenant.headers)


def _path(bad: str) -> str:
    return quote(bad, safe="")


ENDPOINTS: dict[str, Request] = {
    "create": lambda c, t, bad, marker: c.post("/v1/memories", json={"text": marker, "agent_id": bad},
                                               headers=t.headers),
    "create batch": lambda c, t, bad, marker: c.post("/v1/memories", headers=t.headers, json={
        "memories": [{"text": marker, "agent_id": "fine"}, {"text": marker, "agent_id": bad}]}),
    "patch": _patch,
    "list": lambda c, t, bad, _: c.get("/v1/memories", params={"agent_id": bad}, headers=t.headers),
    "delete agent": lambda c, t, bad, _: c.delete("/v1/memories", params={"agent_id": bad}, headers=t.headers),
    "search filter": lambda c, t, bad, _: c.post("/v1/memories/search", headers=t.headers, json={
        "query": "anything", "strategy": "lexical", "filters": {"agent_id": bad}}),
    "assemble": lambda c, t, bad, _: c.post("/v1/context/assemble", headers=t.headers, json={
        "agent_id": bad, "query": "anything", "model": "gpt-4o", "max_context_tokens": 1000}),
    "hot set": lambda c, t, bad, _: c.get("/v1/memories/hot", params={"agent_id": bad}, headers=t.headers),
    "directive put": lambda c, t, bad, _: c.put(f"/v1/agents/{_path(bad)}/directive", json={"content": "x"},
                                                headers=t.headers),
    "directive get": lambda c, t, bad, _: c.get(f"/v1/agents/{_path(bad)}/directive", headers=t.headers),
    "directive delete": lambda c, t, bad, _: c.delete(f"/v1/agents/{_path(bad)}/directive", headers=t.headers),
    "export": lambda c, t, bad, _: c.get("/v1/export", params={"agent_id": bad}, headers=t.headers),
    "documents": lambda c, t, bad, marker: c.post("/v1/documents", headers=t.headers, json={
        "files": [{"path": "notes/a.md", "content": f"# {marker}\n\ntext\n"}], "agent_id": bad}),
}

PATH_ENDPOINTS = {"directive put", "directive get", "directive delete"}


# An empty segment or a '/' (even as %2F) in a path makes another path: no agent id reaches the route.
CASES = [(endpoint, bad) for endpoint in sorted(ENDPOINTS) for bad in BAD_IDS
         if not (endpoint in PATH_ENDPOINTS and (bad == "" or "/" in bad))]


@pytest.mark.parametrize(("endpoint", "bad"), CASES, ids=repr)
async def test_a_bad_agent_id_is_400_validation_error_everywhere(
        client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str, endpoint: str, bad: str) -> None:
    marker = f"agent-id-probe {endpoint} {bad!r}"
    r = await ENDPOINTS[endpoint](client, tenant, bad, marker)
    assert r.status_code == 400, (endpoint, bad, r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    assert body["error"]["code"] == "validation_error", body
    conn = await asyncpg.connect(owner_dsn)
    try:  # nothing written, not even the good half of a batch
        assert await conn.fetchval("SELECT count(*) FROM memories WHERE org_id = $1 AND text LIKE $2",
                                   tenant.org_id, f"%{marker}%") == 0
    finally:
        await conn.close()


@pytest.mark.parametrize("good", GOOD_IDS)
async def test_every_good_agent_id_is_accepted(client: AsyncTestClient[Any], tenant: Tenant, good: str) -> None:
    r = await client.post("/v1/memories", json={"text": "fine", "agent_id": good}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    r = await client.put(f"/v1/agents/{_path(good)}/directive", json={"content": "hi"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
        "agent_id": good, "query": "anything", "model": "gpt-4o", "max_context_tokens": 1000})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("value", BAD_IDS + GOOD_IDS, ids=repr)
def test_the_type_and_the_helper_are_one_rule(value: str) -> None:
    try:
        msgspec.convert(value, AgentId)
        typed = True
    except msgspec.ValidationError:
        typed = False
    assert typed is is_agent_id(value) is (value in GOOD_IDS)


@pytest.mark.parametrize("bad", [b for b in BAD_IDS if b and "\x00" not in b], ids=repr)
def test_the_mcp_server_refuses_a_bad_agent_id_at_start(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], bad: str) -> None:
    monkeypatch.setenv("PGCONTEXT_API_KEY", "k")
    monkeypatch.delenv("PGCONTEXT_AGENT_ID", raising=False)
    args = cli.build_parser().parse_args(["mcp", "--agent-id", bad])
    assert cli.cmd_mcp(settings, args) == 2  # before anything runs: no server, no stdio protocol
    assert "agent id" in capsys.readouterr().err


SLASHED_PATHS = [
    ("GET", "/v1/conversations/a%2Fmessages"),  # decoded, it is conversation a's messages
    ("DELETE", "/v1/conversations/chat%2Fmessages?from_position=1"),
    ("GET", "/v1/conversations/user-42%2Fchat-1/messages"),  # decoded, no route at all
    ("POST", "/v1/conversations/user-42%2fchat-1/messages"),
    ("GET", "/v1/agents/team%2Fops/directive"),
    ("DELETE", "/v1/memories/x%2Fy"),
]


@pytest.mark.parametrize(("method", "path"), SLASHED_PATHS, ids=repr)
async def test_an_id_holding_an_escaped_slash_is_400_not_another_resource(
        client: AsyncTestClient[Any], tenant: Tenant, method: str, path: str) -> None:
    """No id holds '/': one sent escaped (%2F) is decoded before routing, where it reached another route
    (conversation ``a``'s messages for id ``a/messages``) or none (a bare 404 an adapter read as "no such
    conversation"). Either way the caller is told the id is the problem, and nothing is read or written."""
    r = await client.post("/v1/conversations/chat/messages", headers=tenant.headers,
                          json={"messages": [{"content": "kept", "role": "user"}]})
    assert r.status_code == 201, r.text
    body = {"messages": [{"content": "never written", "role": "user"}]} if method == "POST" else None
    r = await client.request(method, path, headers=tenant.headers, json=body)
    assert r.status_code == 400, (path, r.status_code, r.text)
    error = r.json()["error"]
    assert set(error) == ERROR_KEYS and error["code"] == "validation_error", error
    assert error["details"] == {"field": "path"} and "'/'" in error["message"], error
    r = await client.get("/v1/conversations/chat/messages", headers=tenant.headers)
    assert [m["content"] for m in r.json()["items"]] == ["kept"]
    r = await client.get("/v1/conversations", headers=tenant.headers)
    assert [c["id"] for c in r.json()["items"]] == ["chat"]


async def test_an_escaped_slash_in_the_query_is_a_value_like_any_other(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.get("/v1/memories?metadata=%7B%22path%22%3A%22a%2Fb%22%7D", headers=tenant.headers)
    assert r.status_code == 200, r.text

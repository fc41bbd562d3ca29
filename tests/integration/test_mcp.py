"""``pgcontext mcp`` end to end: the MCP SDK's own client session spawns the server (stdio) or connects to
it (streamable HTTP), and every tool call goes through the Python client to a live service."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from pgcontext_client import Client, SearchFilters

from service.cli import main as cli
from service.embedded.postgres import free_port
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.live import live_service
from tests.integration.test_assembly import metric_sample
from tests.integration.test_cli import PGCONTEXT, clean_env
from tests.processes import stop_process

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOOLS = {"remember", "append_messages", "recall", "assemble_context", "give_feedback", "set_directive",
         "get_directive", "forget"}


async def call(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(name, arguments)
    assert not result.is_error, (name, result.content)
    payload = result.structured_content
    assert isinstance(payload, dict), result
    # What a model reads is the text content: the same JSON.
    assert json.loads(result.content[0].text) == payload  # type: ignore[union-attr]
    return payload


async def exercise(session: ClientSession, url: str, key: str, agent: str) -> None:
    """Every tool, as a model would use them, checked against the service through the Python client."""
    await session.initialize()
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description and len(tool.description) > 100, tool.name  # written for a model
    assert "memories" in tools["remember"].input_schema["properties"]

    one = await call(session, "remember", text="The user is allergic to peanuts.", kind="preference",
                     occurred_at="2023-06-02T12:00:00Z", metadata={"source": "intake form"})
    many = await call(session, "remember", memories=[
        {"text": "The user's daughter is called Ada.", "importance": 0.9},
        {"text": "The user moved to Lisbon in March 2024.", "kind": "event", "occurred_at": "2024-03-01T00:00:00Z",
         "search_context": "Where does the user live now?"}])
    assert one["stored"] == 1 and many["stored"] == 2
    with Client(url, key) as pg:
        stored = {m.text: m for m in pg.list_memories(agent_id=agent).items}
    assert set(stored) == {"The user is allergic to peanuts.", "The user's daughter is called Ada.",
                           "The user moved to Lisbon in March 2024."}
    assert stored["The user is allergic to peanuts."].kind == "preference"
    assert stored["The user is allergic to peanuts."].occurred_at.isoformat() == "2023-06-02T12:00:00+00:00"
    assert stored["The user is allergic to peanuts."].metadata == {"source": "intake form"}
    assert stored["The user moved to Lisbon in March 2024."].occurred_at.year == 2024
    assert stored["The user moved to Lisbon in March 2024."].search_context == "Where does the user live now?"
    assert stored["The user is allergic to peanuts."].search_context is None
    again = await call(session, "remember", text="the user is allergic to peanuts", kind="preference")  # merged
    assert again["stored"] == 0 and again["outcomes"][0] == {"id": one["ids"][0], "status": "merged",
                                                              "superseded": []}
    city = await call(session, "remember", memories=[{"text": "The user lives in Porto.", "key": "user.city"}])
    moved = await call(session, "remember", memories=[{"text": "The user lives in Faro.", "key": "user.city"}])
    assert moved["outcomes"][0]["status"] == "superseded" and moved["outcomes"][0]["superseded"] == city["ids"]

    recalled = await call(session, "recall", query="peanut allergy", limit=3)
    assert recalled["memories"][0]["text"] == "The user is allergic to peanuts."
    assert recalled["memories"][0]["id"] == one["ids"][0]
    scores = [m["score"] for m in recalled["memories"]]  # the normalized score, not the fusion's
    assert all(0.0 <= v <= 1.0 for v in scores) and scores[0] > 0.3
    with Client(url, key) as pg:
        hits = pg.search("peanut allergy", limit=3, filters=SearchFilters(agent_id=agent)).results
    assert scores == [h.score for h in hits]

    assert await call(session, "get_directive") == {"version": 0, "content": None}
    assert (await call(session, "set_directive", content="Be warm and brief."))["version"] == 1
    assert await call(session, "get_directive") == {"version": 1, "content": "Be warm and brief."}

    ctx = await call(session, "assemble_context", query="what should I cook for the user's dinner? any allergies?",
                     recent_messages=[{"role": "user", "content": "Plan dinner for me."}], max_context_tokens=1500)
    assert "Be warm and brief." in ctx["context"] and "peanuts" in ctx["context"]
    assert "user: Plan dinner for me." in ctx["context"] and one["ids"][0] in ctx["refs"].values()
    selective = await call(session, "assemble_context", query="where does the user live?")
    assert "Lisbon" in selective["context"]

    with Client(url, key) as pg:
        theirs = pg.create_memory("Another agent's note.", agent_id=f"{agent}-other").ids[0]
        shared = pg.create_memory("An org-wide note about dinners.").ids[0]
    nobody = str(uuid4())
    feedback = await call(session, "give_feedback", helpful_ids=[*one["ids"], str(shared)],
                          unhelpful_ids=[nobody, str(theirs)])
    assert feedback["updated"] == 2 and sorted(feedback["not_found"]) == sorted([nobody, str(theirs)])
    with Client(url, key) as pg:
        assert pg.get_memory(one["ids"][0]).usefulness > 0 and pg.get_memory(shared).usefulness > 0
        assert pg.get_memory(theirs).usefulness == 0  # another agent's memory is not this one's to judge

    forgotten = await call(session, "forget", memory_ids=[many["ids"][0], "not-an-id"])
    assert forgotten == {"deleted": [many["ids"][0]], "not_found": ["not-an-id"]}
    after = await call(session, "recall", query="daughter Ada")
    assert many["ids"][0] not in {m["id"] for m in after["memories"]}

    turns = [{"role": "user", "content": "I just booked a trip to Kyoto for April.", "message_id": "u1"},
             {"role": "assistant", "content": "Lovely! Cherry blossoms peak then.", "message_id": "a1"}]
    appended = await call(session, "append_messages", conversation_id="trip", messages=turns)
    assert appended["message_count"] == 2 and [m["position"] for m in appended["messages"]] == [1, 2]
    # A turn goes with its conversation: refused with the reason, and what was deleted before it is said
    scratch = await call(session, "remember", text="A scratch note to forget.")
    mixed = await call(session, "forget", memory_ids=[scratch["ids"][0], appended["messages"][0]["id"]])
    assert mixed["deleted"] == scratch["ids"] and mixed["not_found"] == []
    assert [r["id"] for r in mixed["refused"]] == [appended["messages"][0]["id"]]
    assert mixed["refused"][0]["reason"].startswith("managed_by_conversations: ")
    again = await call(session, "append_messages", conversation_id="trip", messages=turns[:1])
    assert again["messages"][0] == {**appended["messages"][0], "stored": False}
    with Client(url, key) as pg:
        assert pg.get_conversation("trip").agent_id == agent
        assert [m.content for m in pg.list_messages("trip").items] == [t["content"] for t in turns]
    trip = await call(session, "assemble_context", query="When is the user's trip to Kyoto?", max_context_tokens=1500)
    assert "user: I just booked a trip to Kyoto for April." in trip["context"]
    seen = await call(session, "assemble_context", query="When is the user's trip to Kyoto?", max_context_tokens=1500,
                      recent_messages=turns[:1], conversation_id="trip")
    assert appended["messages"][0]["id"] not in seen["refs"].values()

    # recall's queries are the model's own words: its "I" does not make the user's turns the answer
    chat = [{"role": "assistant", "content": "The cherry blossoms peak in early April."},
            *({"role": "user", "content": f"Blossoms photo {n} from the trip."} for n in range(6))]
    said = await call(session, "append_messages", conversation_id="blossoms", messages=chat)
    recalled = await call(session, "recall", query="What did I say about the cherry blossoms?", limit=3)
    assert recalled["memories"][0]["id"] == said["messages"][0]["id"], (recalled, said)
    # only one conversation's turns: the other's blossoms are left out, a turn says where and by whom
    scoped = await call(session, "recall", query="cherry blossoms", limit=5, conversations=["trip"])
    turns_found = [m for m in scoped["memories"] if m["kind"] == "message"]
    assert turns_found and {m["conversation_id"] for m in turns_found} == {"trip"}, scoped
    best = {k: v for k, v in turns_found[0].items() if k not in ("score", "occurred_at")}
    assert best == {"id": appended["messages"][1]["id"], "text": turns[1]["content"], "kind": "message",
                    "conversation_id": "trip", "said_by": "assistant"}
    empty = await session.call_tool("recall", {"query": "cherry blossoms", "conversations": []})
    assert empty.is_error and empty.content[0].text == (  # type: ignore[union-attr]
        "Error executing tool recall: invalid arguments: `conversations` must have at least 1 item")
    with Client(url, key) as pg:  # the same words searched as a user's question rank the user's turns first
        assert pg.search("What did I say about the cherry blossoms?", limit=3).results[0].id != UUID(
            said["messages"][0]["id"])

    refused = await session.call_tool("set_directive", {"content": "   "})
    assert refused.is_error and "validation_error" in refused.content[0].text  # type: ignore[union-attr]


async def test_stdio(live_url: str, tenant: Tenant) -> None:
    agent = f"mcp-{uuid4().hex[:8]}"
    env = clean_env(PGCONTEXT_URL=live_url, PGCONTEXT_API_KEY=tenant.key, PGCONTEXT_AGENT_ID=agent)
    params = StdioServerParameters(command=PGCONTEXT[0], args=[*PGCONTEXT[1:], "mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await exercise(session, live_url, tenant.key, agent)


def test_stdio_needs_an_agent_and_a_key(settings: Settings, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("PGCONTEXT_AGENT_ID", "PGCONTEXT_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    parse = cli.build_parser().parse_args  # cmd_mcp itself: main() would reconfigure this process's logging
    monkeypatch.setenv("PGCONTEXT_API_KEY", "k")
    assert cli.cmd_mcp(settings, parse(["mcp"])) == 2 and "PGCONTEXT_AGENT_ID" in capsys.readouterr().err
    monkeypatch.delenv("PGCONTEXT_API_KEY")
    assert cli.cmd_mcp(settings, parse(["mcp", "--agent-id", "a"])) == 2
    assert "PGCONTEXT_API_KEY" in capsys.readouterr().err


@contextlib.contextmanager
def mcp_http_server(service_url: str, agent: str, **env_extra: str) -> Iterator[str]:
    """``pgcontext mcp --http`` on a free port for ``agent``; yields its MCP endpoint URL."""
    with mcp_http_process(service_url, agent, **env_extra) as (url, _pid):
        yield url


@contextlib.contextmanager
def mcp_http_process(service_url: str, agent: str, **env_extra: str) -> Iterator[tuple[str, int]]:
    """``pgcontext mcp --http`` on a free port for ``agent``; yields its MCP endpoint URL and pid."""
    port = free_port()
    env = clean_env(PGCONTEXT_URL=service_url, PGCONTEXT_AGENT_ID=agent, **env_extra)
    proc = subprocess.Popen([*PGCONTEXT, "mcp", "--http", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "pgcontext mcp --http did not start"
            try:
                httpx.post(url, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url, proc.pid
    finally:
        stop_process(proc, 30)


@pytest.fixture
def mcp_http(live_url: str) -> Iterator[tuple[str, str]]:
    agent = f"mcp-{uuid4().hex[:8]}"
    with mcp_http_server(live_url, agent) as url:
        yield url, agent


async def test_streamable_http_under_the_services_bearer_keys(mcp_http: tuple[str, str], live_url: str,
                                                              tenant: Tenant, other_tenant: Tenant) -> None:
    url, agent = mcp_http
    async with httpx.AsyncClient(timeout=10) as plain:
        anonymous = await plain.post(url, json={})
        assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"].lower().startswith("bearer")
        wrong = await plain.post(url, json={}, headers={"Authorization": "Bearer pgc_not_a_key"})
        assert wrong.status_code == 401

    headers = {"Authorization": f"Bearer {tenant.key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await exercise(session, live_url, tenant.key, agent)
    # Another org's key, through the same MCP server: same agent id, none of the first org's memories.
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {other_tenant.key}"}, timeout=30) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        assert (await call(session, "recall", query="peanut allergy"))["memories"] == []
        assert await call(session, "get_directive") == {"version": 0, "content": None}


def _usage(pid: int) -> tuple[int, int]:
    """(resident memory in kB, open descriptors) of a process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def test_strangers_bearer_tokens_cost_the_http_server_nothing_that_stays(live_url: str, tenant: Tenant) -> None:
    """Every token is checked with the service, but only one the service accepted gets state (a client,
    kept in a bounded LRU): 500 random tokens, each answered 401, leave memory and descriptors where
    50 left them, and a real key works the whole time."""
    agent = f"mcp-{uuid4().hex[:8]}"
    with mcp_http_process(live_url, agent, PGCONTEXT_MCP_MAX_CLIENTS="4") as (url, pid):
        async with httpx.AsyncClient(timeout=30) as plain:
            async def strangers(n: int) -> None:
                for _ in range(n):
                    r = await plain.post(url, json={}, headers={"Authorization": f"Bearer pgc_{uuid4().hex}"})
                    assert r.status_code == 401

            await strangers(50)
            before = _usage(pid)
            await strangers(500)
            after = _usage(pid)
        assert after[1] <= before[1] + 2, (before, after)  # descriptors
        assert after[0] - before[0] < 20_000, (before, after)  # kB: ~0.8 MB a token would be 400 MB
        headers = {"Authorization": f"Bearer {tenant.key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert (await call(session, "get_directive")) == {"version": 0, "content": None}


LIMITED = "pgcontext_auth_rate_limited_total"


async def test_a_flood_of_strangers_tokens_does_not_lock_other_clients_out(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """The service limits unknown keys per source address; the MCP server checks every token with the
    service, so it passes its client's address on (``X-Forwarded-For``, which the service's HTTP server
    takes from a loopback peer): a stranger flooding the MCP server exhausts its own address's budget,
    not the MCP server's, and a real key from another address still gets in. A check the service refuses
    that way is answered at once: one 429 per stranger's request, not a retry after each Retry-After."""
    server = dataclasses.replace(settings.server, auth_failure_burst=5, auth_failure_rate_per_s=0.05)
    with live_service(dataclasses.replace(settings, server=server), endpoints, embedder) as service_url, \
            mcp_http_server(service_url, f"mcp-{uuid4().hex[:8]}") as url:
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
        async with httpx.AsyncClient(timeout=30, transport=transport) as stranger:
            before = metric_sample((await stranger.get(f"{service_url}/metrics")).text, LIMITED)
            for _ in range(20):
                sent = time.monotonic()
                r = await stranger.post(url, json={}, headers={"Authorization": f"Bearer pgc_{uuid4().hex}"})
                assert r.status_code == 401
                # Not after waiting out the service's Retry-After (1 / 0.05 = 20 s) to ask again.
                assert time.monotonic() - sent < 10, "the token check waited out a Retry-After"
            refused = metric_sample((await stranger.get(f"{service_url}/metrics")).text, LIMITED) - before
        assert refused == 15, refused  # the burst's 5 were looked up; the rest refused once each
        headers = {"Authorization": f"Bearer {tenant.key}"}
        async with httpx2.AsyncClient(headers=headers, timeout=30,
                                      transport=httpx2.AsyncHTTPTransport(local_address="127.0.0.3")) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert (await call(session, "get_directive")) == {"version": 0, "content": None}

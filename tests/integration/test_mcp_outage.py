"""``pgcontext mcp --http`` while the service is down and after it is back: a client whose key the
service accepted keeps its session and reads a tool error saying the service could not be reached (not
a 401 that sends it to re-authenticate); a key never seen is answered 503 with ``Retry-After``; and all
works again, in the same session, once the service answers. The MCP server reaches the live service
through a TCP relay these tests switch off and on, or that loses an answer; a service that never answers
is a tool error at the tool call's deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pgcontext_client import Client as Pgcontext

from service.embedded.postgres import free_port
from service.mcp import McpConfig
from service.mcp.server import KEY_CACHE_S
from tests.conftest import Tenant
from tests.integration.test_mcp import call, mcp_http_server
from tests.integration.test_mcp_arguments import session

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class Relay:
    """A TCP relay on a fixed loopback port to ``target``: ``down()`` closes it and every connection
    through it (nothing answers on the port), ``up()`` listens again."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.port = free_port()
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.lose_answer_to: bytes | None = None
        """A request line's start (``b"DELETE "``): the next such request reaches the service, and the
        connection breaks before its answer comes back (the answer is lost, once)."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def up(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()
        self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers |= {writer, up_writer}

        lose = asyncio.Event()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, request: bool) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    if request and self.lose_answer_to and data.startswith(self.lose_answer_to):
                        self.lose_answer_to = None
                        lose.set()
                    if not request and lose.is_set():
                        break  # the answer arrived: the client never gets it
                    dst.write(data)
                    await dst.drain()
            dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        finally:
            self.writers -= {writer, up_writer}


@contextlib.asynccontextmanager
async def relayed(target: str) -> AsyncIterator[Relay]:
    relay = Relay(target)
    await relay.up()
    try:
        yield relay
    finally:
        if relay.server is not None:
            await relay.down()


async def test_a_service_outage_is_a_tool_error_and_then_over(live_url: str, tenant: Tenant,
                                                              other_tenant: Tenant) -> None:
    async with relayed(live_url) as relay:
        with mcp_http_server(relay.url, "mcp-outage") as url:
            headers = {"Authorization": f"Bearer {tenant.key}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                await call(session, "set_directive", content="Be brief.")
                await relay.down()
                await asyncio.sleep(KEY_CACHE_S + 0.5)  # past the MCP server's own trust in the key
                down = await session.call_tool("get_directive", {})
                assert down.is_error, down
                text = down.content[0].text  # type: ignore[union-attr]
                assert text.startswith("Error executing tool get_directive: pgcontext could not be reached"), text

                async with httpx.AsyncClient(timeout=30) as plain:
                    # A key this MCP server never saw cannot be checked: 503, try again later (not 401).
                    unseen = await plain.post(url, json={}, headers={"Authorization": f"Bearer {other_tenant.key}"})
                    assert unseen.status_code == 503 and unseen.headers["Retry-After"] == "5", unseen.text
                    assert "could not be reached" in json.loads(unseen.text)["error"]["message"]
                    # The service being down makes nobody's token good: no token is still a 401.
                    anonymous = await plain.post(url, json={})
                    assert anonymous.status_code == 401

                await relay.up()
                assert await call(session, "get_directive") == {"version": 1, "content": "Be brief."}
            theirs = {"Authorization": f"Bearer {other_tenant.key}"}
            async with httpx2.AsyncClient(headers=theirs, timeout=30) as http, \
                    streamable_http_client(url, http_client=http) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                assert await call(session, "get_directive") == {"version": 0, "content": None}


async def test_forget_counts_a_delete_whose_answer_was_lost_as_deleted(live_url: str, tenant: Tenant) -> None:
    """The client sends a DELETE again when the connection broke before its answer; the second answer is
    404 since the first deleted it. That memory was deleted by this call, not "not found"."""
    with Pgcontext(live_url, tenant.key) as pg:
        ident = str(pg.create_memory("A note to forget.", agent_id="mcp-lost").ids[0])
    async with relayed(live_url) as relay, \
            session(McpConfig(url=relay.url, agent_id="mcp-lost", api_key=tenant.key)) as client:
        relay.lose_answer_to = b"DELETE "
        result = await client.call_tool("forget", {"memory_ids": [ident]})
        assert relay.lose_answer_to is None  # the answer was lost
        assert result.structured_content == {"deleted": [ident], "not_found": []}, result
    with Pgcontext(live_url, tenant.key) as pg:
        assert pg.list_memories(agent_id="mcp-lost").items == []


async def test_a_service_that_never_answers_is_a_tool_error_within_the_deadline() -> None:
    """Something takes the connections and never answers (a hung service or proxy): each call used to
    wait 4 tries of 30 s, past the 60 s MCP clients on the TypeScript SDK wait. Now a tool error at the
    deadline, and the session goes on."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    port = free_port()
    silent = await asyncio.start_server(hold, "127.0.0.1", port)
    config = McpConfig(url=f"http://127.0.0.1:{port}", agent_id="mcp-hung", api_key="pgc_unused", tool_deadline_s=2)
    try:
        async with session(config) as client:
            for tool, arguments, written in [("recall", {"query": "x"}, False), ("remember", {"text": "y"}, True)]:
                sent = time.monotonic()
                with anyio.fail_after(30):
                    result = await client.call_tool(tool, arguments)
                assert time.monotonic() - sent < 10
                assert result.is_error, result
                text = result.content[0].text  # type: ignore[union-attr]
                assert text.startswith(f"Error executing tool {tool}: pgcontext did not answer within 2 s"), text
                assert ("check with `recall` before repeating it" in text) is written, text
            assert held  # the requests did reach it
    finally:
        for writer in held:
            writer.close()
        silent.close()
        await silent.wait_closed()

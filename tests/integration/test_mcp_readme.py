"""The MCP configuration snippets of docs/clients.md, extracted from the Markdown and used as a runtime
would: each ``mcpServers`` entry is started (``command``) or connected to (``url``) with the SDK's client
session."""

from __future__ import annotations

import json
from urllib.parse import urlsplit, urlunsplit
from uuid import uuid4

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Tenant
from tests.integration.test_cli import PGCONTEXT, clean_env
from tests.integration.test_client_readme import fenced
from tests.integration.test_mcp import TOOLS, call, mcp_http_server

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def use(session: ClientSession) -> None:
    await session.initialize()
    assert {tool.name for tool in (await session.list_tools()).tools} == TOOLS
    note = f"The documented snippet works ({uuid4().hex[:6]})."
    stored = await call(session, "remember", text=note)
    found = await call(session, "recall", query=note)
    assert found["memories"][0]["id"] == stored["ids"][0]


async def test_every_mcp_servers_entry_in_the_docs_works(live_url: str, tenant: Tenant) -> None:
    blocks = [json.loads(block) for block in fenced("MCP", "json")]
    entries = [entry for block in blocks for entry in block["mcpServers"].values()]
    assert {"command" in entry for entry in entries} == {True, False}, "a stdio and an HTTP entry"
    for entry in entries:
        if "command" in entry:
            # As written, with the service's address and a real key in place of the placeholders.
            env = clean_env(**{**entry["env"], "PGCONTEXT_URL": live_url, "PGCONTEXT_API_KEY": tenant.key})
            command = PGCONTEXT if entry["command"] == "pgcontext" else [entry["command"]]
            params = StdioServerParameters(command=command[0], args=[*command[1:], *entry["args"]], env=env)
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await use(session)
        else:
            assert entry["headers"]["Authorization"] == "Bearer pgc_..."
            with mcp_http_server(live_url, f"readme-{uuid4().hex[:6]}") as served:
                # The snippet's path on the port this test's server got.
                url = urlunsplit(urlsplit(entry["url"])._replace(netloc=urlsplit(served).netloc))
                headers = {"Authorization": f"Bearer {tenant.key}"}
                async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                        streamable_http_client(url, http_client=http) as (read, write), \
                        ClientSession(read, write) as session:
                    await use(session)

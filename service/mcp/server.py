"""``pgcontext mcp``: the MCP server, over stdio (one key from configuration) or streamable HTTP.

Over streamable HTTP (``pgcontext mcp --http``) the MCP endpoint is ``/mcp`` and every request needs
``Authorization: Bearer <pgcontext API key>``, the same key the service takes: the SDK's bearer middleware
asks ``ServiceKeyVerifier``, which asks the service (401 with ``WWW-Authenticate: Bearer`` otherwise).
Each caller's tools then act with its own key, so its org is its own; the agent is configuration.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pgcontext_client import AsyncClient, PgcontextError, RetryPolicy, Unauthorized
from starlette.applications import Starlette

from service import __version__
from service.mcp.tools import McpConfig, register

INSTRUCTIONS = """Long-term memory for this agent, kept by pgcontext. Before answering a message that may
depend on earlier conversations, call `assemble_context` with it; when you learn something lasting, call
`remember`; after answering, `give_feedback` on the memories you were given. `recall` searches
explicitly, `forget` deletes, `set_directive`/`get_directive` hold the agent's standing instructions."""

KEY_CACHE_S = 5.0
"""How long a key the service accepted is trusted without asking again (the service's own auth cache is
``PGCONTEXT_AUTH_CACHE_TTL_S``, default 5 s: a revoked key stops working here within about the same)."""


class Clients:
    """One ``AsyncClient`` per API key (stdio: just the configured one), created on first use."""

    def __init__(self, config: McpConfig, retry: RetryPolicy | None = None) -> None:
        self.config = config
        self.retry = retry or RetryPolicy()
        self._by_key: dict[str, AsyncClient] = {}

    def get(self, key: str | None) -> AsyncClient:
        slot = key or ""
        client = self._by_key.get(slot)
        if client is None:
            client = self._by_key[slot] = AsyncClient(self.config.url, key or "", retry=self.retry)
        return client

    async def for_call(self) -> AsyncClient:
        """The HTTP caller's key when there is one (streamable HTTP), else the configured key (stdio)."""
        token = get_access_token()
        return self.get(token.token if token is not None else self.config.api_key)

    async def aclose(self) -> None:
        for client in self._by_key.values():
            await client.aclose()
        self._by_key.clear()


class ServiceKeyVerifier:
    """The SDK's ``TokenVerifier``: a bearer token is valid when the pgcontext service accepts it as a key."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self._accepted: dict[str, float] = {}

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        if self._accepted.get(digest, 0.0) > now:
            return AccessToken(token=token, client_id=digest[:16], scopes=[])
        try:
            await self.clients.get(token).list_memories(limit=1)
        except Unauthorized:
            return None
        except PgcontextError:
            return None  # the service cannot vouch for the key right now: refuse rather than guess
        self._accepted[digest] = now + KEY_CACHE_S
        return AccessToken(token=token, client_id=digest[:16], scopes=[])


def build_server(config: McpConfig, clients: Clients, *, http: bool = False) -> MCPServer[Any]:
    auth: dict[str, Any] = {}
    if http:
        # Resource-server only: tokens are pgcontext API keys, checked by the service (no OAuth flows).
        auth = {"auth": AuthSettings(issuer_url=config.url, resource_server_url=None),  # type: ignore[arg-type]
                "token_verifier": ServiceKeyVerifier(clients)}
    server: MCPServer[Any] = MCPServer("pgcontext", instructions=INSTRUCTIONS, version=__version__,
                                       log_level="WARNING", **auth)
    register(server, config, clients.for_call)
    return server


def run_stdio(config: McpConfig) -> None:
    clients = Clients(config)
    build_server(config, clients).run("stdio")


def http_app(config: McpConfig, *, host: str = "127.0.0.1") -> Starlette:
    """The streamable HTTP app: the MCP endpoint at ``/mcp``, behind the service's bearer keys."""
    clients = Clients(config)
    return build_server(config, clients, http=True).streamable_http_app(host=host)

"""``pgcontext mcp``: the MCP server, over stdio (one key from configuration) or streamable HTTP.

Over streamable HTTP (``pgcontext mcp --http``) the MCP endpoint is ``/mcp`` and every request needs
``Authorization: Bearer <pgcontext API key>``, the same key the service takes: the SDK's bearer middleware
asks ``ServiceKeyVerifier``, which asks the service (401 with ``WWW-Authenticate: Bearer`` otherwise).
Each caller's tools then act with its own key, so its org is its own; the agent is configuration.

While the service is down (or failing), a key it accepted before is let through, and each tool call says
the service could not be reached; a key never seen is answered 503 with ``Retry-After``, not 401: the key
may well be good, and a 401 would send an MCP client into re-authentication.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import OrderedDict
from contextvars import ContextVar
from typing import Any

import httpx
from mcp.server import MCPServer
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from pgcontext_client import AsyncClient, PgcontextError, RateLimited, RetryPolicy, Unauthorized
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from service import __version__
from service.mcp.arguments import ToolServer
from service.mcp.tools import McpConfig, register

logger = logging.getLogger(__name__)

INSTRUCTIONS = """Long-term memory for this agent, kept by pgcontext. Before answering a message that may
depend on earlier conversations, call `assemble_context` with it; when you learn something lasting, call
`remember`; after answering, `give_feedback` on the memories you were given. `recall` searches
explicitly, `forget` deletes, `set_directive`/`get_directive` hold the agent's standing instructions."""

KEY_CACHE_S = 5.0
"""How long a key the service accepted is trusted without asking again (the service's own auth cache is
``PGCONTEXT_AUTH_CACHE_TTL_S``, default 5 s: a revoked key stops working here within about the same)."""

CLIENT_ADDRESS: ContextVar[str | None] = ContextVar("pgcontext_mcp_client_address", default=None)
"""The address of the HTTP request being served (set by :class:`ClientAddress`)."""

CHECK_RETRY = RetryPolicy(attempts=2, statuses=frozenset({503}), max_retry_after_s=2.0)
"""A token check's retries: none for a 429, one for a 503 (see :meth:`Clients.accepts`). A stranger's
request waiting out Retry-After several times kept it open for seconds; a flood of them then held that
many requests in this server."""

MAX_CLIENTS = 256
"""Keys the service accepted that keep a client here (least recently used dropped first)."""

UNREACHABLE_RETRY_AFTER_S = 5
"""``Retry-After`` of the 503 for a key that could not be checked because the service did not answer."""


class ServiceUnreachable(Exception):
    """The service could not say whether a bearer token is a key (not reached, or a 5xx answer)."""


class Clients:
    """A client per API key the service accepted (stdio: just the configured one), in a bounded LRU.

    Every client sends through one shared connection pool (at most ``max_connections`` sockets to the
    service), so a key's client is a few kB and holds no descriptor of its own: dropping one from the
    LRU frees all it had. A token is checked with a throw-away client on the same pool; only a key
    the service accepted is remembered, so strangers' tokens leave nothing behind."""

    def __init__(self, config: McpConfig, retry: RetryPolicy | None = None, *, max_connections: int = 32) -> None:
        self.config = config
        self.retry = retry or RetryPolicy()
        self.max_clients = max(1, config.max_clients)
        self._pool = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=max_connections,
                                                                  max_keepalive_connections=max_connections))
        self._by_key: OrderedDict[str, AsyncClient] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_key)

    def _new(self, key: str, forwarded_for: str | None = None, retry: RetryPolicy | None = None) -> AsyncClient:
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json",
                   "User-Agent": f"pgcontext-mcp/{__version__}"}
        if forwarded_for:
            headers["X-Forwarded-For"] = forwarded_for
        http = httpx.AsyncClient(base_url=self.config.url.rstrip("/"), timeout=30.0, transport=self._pool,
                                 headers=headers)
        return AsyncClient(retry=retry or self.retry, http=http)  # its base URL and key are the http client's

    def get(self, key: str | None) -> AsyncClient:
        """The client of a key already accepted (made for the configured key on first use)."""
        slot = key or ""
        client = self._by_key.get(slot)
        if client is None:
            client = self._by_key[slot] = self._new(slot)
            while len(self._by_key) > self.max_clients:
                self._by_key.popitem(last=False)  # its sockets are the shared pool's: nothing to close
        else:
            self._by_key.move_to_end(slot)
        return client

    async def accepts(self, key: str) -> bool | None:
        """Whether the service takes ``key`` (a request with it; no state kept for it here); None when it
        could not say (not reached, or a 5xx answer). The HTTP
        caller's address goes along (``X-Forwarded-For``, which the service's HTTP server takes from a
        loopback peer): the service limits unknown keys per address, and a stranger flooding this
        server must spend its own address's budget, not this server's.

        Answered at once: a 429 is not retried (``auth_rate_limited``: this address sent too many unknown
        keys, refused without waiting out its ``Retry-After``; any other 429 is the key's own org over
        its limit, so the key was accepted), and a 503 is tried once more, soon."""
        try:
            await self._new(key, CLIENT_ADDRESS.get(), CHECK_RETRY).list_memories(limit=1)
        except Unauthorized:
            return False
        except RateLimited as exc:
            return bool(exc.code != "auth_rate_limited")
        except PgcontextError as exc:
            if exc.status is None or exc.status >= 500:
                logger.warning("pgcontext could not check an MCP client's key: %s", exc)
                return None
            return False
        return True

    async def for_call(self) -> AsyncClient:
        """The HTTP caller's key when there is one (streamable HTTP), else the configured key (stdio)."""
        token = get_access_token()
        return self.get(token.token if token is not None else self.config.api_key)

    async def aclose(self) -> None:
        self._by_key.clear()
        await self._pool.aclose()


class ServiceKeyVerifier:
    """The SDK's ``TokenVerifier``: a bearer token is valid when the pgcontext service accepts it as a key."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self._accepted: OrderedDict[str, float] = OrderedDict()
        """Digests of keys the service accepted, until when that holds without asking again (as many as the
        clients kept; one past its time is still let in while the service cannot be asked)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        if self._accepted.get(digest, 0.0) > now:
            self._accepted.move_to_end(digest)
            return AccessToken(token=token, client_id=digest[:16], scopes=[])
        verdict = await self.clients.accepts(token)
        if verdict is None:
            if digest not in self._accepted:
                raise ServiceUnreachable
            # Accepted before: the service checks the key again on every tool call (which says, for now,
            # that the service could not be reached), so letting it in risks nothing and keeps the
            # MCP client's session, instead of a 401 that sends it back to authenticate.
            self._accepted.move_to_end(digest)
            return AccessToken(token=token, client_id=digest[:16], scopes=[])
        if not verdict:
            self._accepted.pop(digest, None)
            return None
        self._accepted[digest] = now + KEY_CACHE_S
        self._accepted.move_to_end(digest)
        while len(self._accepted) > self.clients.max_clients:
            self._accepted.popitem(last=False)
        return AccessToken(token=token, client_id=digest[:16], scopes=[])


def build_server(config: McpConfig, clients: Clients, *, http: bool = False) -> MCPServer[Any]:
    auth: dict[str, Any] = {}
    if http:
        # Resource-server only: tokens are pgcontext API keys, checked by the service (no OAuth flows).
        auth = {"auth": AuthSettings(issuer_url=config.url, resource_server_url=None),  # type: ignore[arg-type]
                "token_verifier": ServiceKeyVerifier(clients)}
    server = ToolServer("pgcontext", instructions=INSTRUCTIONS, version=__version__, log_level="WARNING", **auth)
    server.deadline_s = config.tool_deadline_s
    register(server, config, clients.for_call)
    return server


def run_stdio(config: McpConfig) -> None:
    clients = Clients(config)
    build_server(config, clients).run("stdio")


class ClientAddress:
    """Outermost middleware: the request's client address, for the token check (:meth:`Clients.accepts`),
    and a 503 for a token the service could not check (:class:`ServiceUnreachable`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        reset = CLIENT_ADDRESS.set(client[0] if client else None)
        try:
            await self.app(scope, receive, send)
        except ServiceUnreachable:
            await unreachable(send)
        finally:
            CLIENT_ADDRESS.reset(reset)


async def unreachable(send: Send) -> None:
    """503 with a JSON-RPC error (which the SDK's client hands to the caller as the request's error)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
        "code": -32603, "message": "the pgcontext service could not be reached to check this API key; "
                                   f"try again in {UNREACHABLE_RETRY_AFTER_S} s"}}).encode()
    await send({"type": "http.response.start", "status": 503,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", str(UNREACHABLE_RETRY_AFTER_S).encode())]})
    await send({"type": "http.response.body", "body": body})


def http_app(config: McpConfig, *, host: str = "127.0.0.1") -> Starlette:
    """The streamable HTTP app: the MCP endpoint at ``/mcp``, behind the service's bearer keys."""
    clients = Clients(config)
    app = build_server(config, clients, http=True).streamable_http_app(host=host)
    app.add_middleware(ClientAddress)
    return app

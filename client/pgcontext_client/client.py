"""``Client`` (sync) and ``AsyncClient``: the endpoints of ``endpoints`` as methods, sent with retries.

Each endpoint is written once, in ``endpoints``; the ``Endpoint`` descriptor makes it a method that
returns the result on a ``Client`` and an awaitable of it on an ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload

import httpx
import msgspec

from pgcontext_client import endpoints as ep
from pgcontext_client import errors
from pgcontext_client._http import Call, RetryPolicy, auth_headers, transport_error

P = ParamSpec("P")
T = TypeVar("T")

__version__ = "0.1.0"
USER_AGENT = f"pgcontext-client/{__version__}"
DEFAULT_PORT = 8080


def default_url() -> str:
    """``$PGCONTEXT_URL``, else the service's own default address on ``$PGCONTEXT_PORT`` (8080 when unset),
    the port ``pgcontext serve`` listens on."""
    url = os.environ.get("PGCONTEXT_URL")
    if url:
        return url
    port = os.environ.get("PGCONTEXT_PORT") or str(DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"PGCONTEXT_PORT must be a TCP port number, got {port!r}")
    return f"http://127.0.0.1:{int(port)}"


class Endpoint(Generic[P, T]):
    """A method made from an ``endpoints`` function: ``Client`` returns ``T``, ``AsyncClient`` ``Awaitable[T]``."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> Self: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any] | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type[Any] | None = None) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, obj: _Api | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj._execute(build(*args, **kwargs))

        return method


def _settings(url: str | None, api_key: str | None) -> tuple[str, str | None]:
    return (url or default_url()).rstrip("/"), (
        api_key if api_key is not None else os.environ.get("PGCONTEXT_API_KEY"))


class _Api:
    """The endpoints, shared by both clients (see ``endpoints`` for each one's arguments)."""

    create_memory = Endpoint(ep.create_memory)
    create_memories = Endpoint(ep.create_memories)
    get_memory = Endpoint(ep.get_memory)
    list_memories = Endpoint(ep.list_memories)
    update_memory = Endpoint(ep.update_memory)
    delete_memory = Endpoint(ep.delete_memory)
    erase_agent = Endpoint(ep.erase_agent)
    memory_history = Endpoint(ep.memory_history)
    undo_event = Endpoint(ep.undo_event)
    org_settings = Endpoint(ep.org_settings)
    set_org_settings = Endpoint(ep.set_org_settings)
    import_lines = Endpoint(ep.import_lines)
    hot_set = Endpoint(ep.hot_set)
    feedback = Endpoint(ep.feedback)
    search = Endpoint(ep.search)
    assemble = Endpoint(ep.assemble)
    append_messages = Endpoint(ep.append_messages)
    list_messages = Endpoint(ep.list_messages)
    get_conversation = Endpoint(ep.get_conversation)
    list_conversations = Endpoint(ep.list_conversations)
    delete_conversation = Endpoint(ep.delete_conversation)
    put_directive = Endpoint(ep.put_directive)
    get_directive = Endpoint(ep.get_directive)
    delete_directive = Endpoint(ep.delete_directive)
    ingest_documents = Endpoint(ep.ingest_documents)
    list_documents = Endpoint(ep.list_documents)
    delete_documents = Endpoint(ep.delete_documents)
    documents_index = Endpoint(ep.documents_index)
    health = Endpoint(ep.health)
    ready = Endpoint(ep.ready)

    def _execute(self, call: Call[Any]) -> Any:
        raise NotImplementedError


def _export_call(agent_id: str | None) -> Call[None]:
    params = [("agent_id", agent_id)] if agent_id is not None else []
    return Call("GET", ep.EXPORT_PATH, None, params=params, repeatable=True)


class Client(_Api):
    """Synchronous client. ``url`` defaults to ``$PGCONTEXT_URL``, else ``http://127.0.0.1:$PGCONTEXT_PORT``
    (port 8080 when unset); ``api_key`` to ``$PGCONTEXT_API_KEY``.

    Use it as a context manager (or call ``close()``); one client is safe to share between threads.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, http: httpx.Client | None = None) -> None:
        base, key = _settings(url, api_key)
        self.retry = retry or RetryPolicy()
        self._http = http or httpx.Client(base_url=base, timeout=timeout, headers=auth_headers(key, USER_AGENT))
        self._owns_http = http is None

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def _send(self, call: Call[Any], *, stream: bool = False) -> httpx.Response:
        headers = call.prepared_headers()
        content = call.content()
        attempt = 0
        while True:
            attempt += 1
            request = call.request(self._http, headers, content)
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                wait = self.retry.after_transport_error(call, attempt)
                if wait is None:
                    raise transport_error(exc, call, self._http.base_url) from exc
            else:
                wait = self.retry.after_response(call, response, attempt)
                if wait is None:
                    return response
                response.close()
            time.sleep(wait)

    def _execute(self, call: Call[Any]) -> Any:
        return call.decode(self._send(call))

    def execute(self, call: Call[T]) -> T:
        """Send a call built by a ``pgcontext_client.endpoints`` function (what each method does), so code
        written once over calls runs on both clients."""
        return call.decode(self._send(call))

    def export(self, agent_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Data-subject export: every line of the agent's NDJSON export as a dict (``type`` says which kind),
        streamed; the last is ``{"type": "end", ...}``. An export that broke off raises ``TransportError``.
        Without ``agent_id``, the whole org's (``import_lines`` writes it back)."""
        call = _export_call(agent_id)
        response = self._send(call, stream=True)
        try:
            if not response.is_success:
                response.read()
                raise errors.from_response(response)
            try:
                for line in response.iter_lines():
                    if line:
                        yield msgspec.json.decode(line)
            except httpx.TransportError as exc:
                raise transport_error(exc, call, self._http.base_url) from exc
        finally:
            response.close()


class AsyncClient(_Api):
    """Asynchronous client (``await client.search(...)``); same methods and arguments as ``Client``."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, http: httpx.AsyncClient | None = None) -> None:
        base, key = _settings(url, api_key)
        self.retry = retry or RetryPolicy()
        self._make_http = functools.partial(httpx.AsyncClient, base_url=base, timeout=timeout,
                                            headers=auth_headers(key, USER_AGENT))
        self._http = http or self._make_http()
        self._owns_http = http is None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _bound_http(self) -> httpx.AsyncClient:
        """The httpx client for the running event loop. Its pooled connections belong to the loop that
        opened them: one this client made is made anew on another loop (``asyncio.run`` twice, a
        notebook's cells, a framework's worker threads), instead of failing with "Event loop is closed"."""
        loop = asyncio.get_running_loop()
        if self._owns_http and self._loop is not None and self._loop is not loop:
            self._http = self._make_http()  # the old one's connections died with their loop
        self._loop = loop
        return self._http

    async def aclose(self) -> None:
        if not self._owns_http:
            return
        if self._loop in (None, asyncio.get_running_loop()):
            await self._http.aclose()
        else:  # its connections belong to another loop, closed or not this one's to drive: let them go
            self._http = self._make_http()
            self._loop = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def _send(self, call: Call[Any], *, stream: bool = False) -> httpx.Response:
        headers = call.prepared_headers()
        content = call.content()
        attempt = 0
        http = self._bound_http()
        while True:
            attempt += 1
            request = call.request(http, headers, content)
            try:
                response = await http.send(request, stream=stream)
            except httpx.TransportError as exc:
                wait = self.retry.after_transport_error(call, attempt)
                if wait is None:
                    raise transport_error(exc, call, http.base_url) from exc
            else:
                wait = self.retry.after_response(call, response, attempt)
                if wait is None:
                    return response
                await response.aclose()
            await asyncio.sleep(wait)

    async def _run(self, call: Call[T]) -> T:
        return call.decode(await self._send(call))

    async def execute(self, call: Call[T]) -> T:
        """Like ``Client.execute``: send a call built by a ``pgcontext_client.endpoints`` function."""
        return await self._run(call)

    def _execute(self, call: Call[Any]) -> Any:
        return self._run(call)

    async def export(self, agent_id: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Like ``Client.export``, as an async iterator."""
        call = _export_call(agent_id)
        response = await self._send(call, stream=True)
        try:
            if not response.is_success:
                await response.aread()
                raise errors.from_response(response)
            try:
                async for line in response.aiter_lines():
                    if line:
                        yield msgspec.json.decode(line)
            except httpx.TransportError as exc:
                raise transport_error(exc, call, self._http.base_url) from exc
        finally:
            await response.aclose()

"""``Client`` (sync) and ``AsyncClient``: the endpoints of ``endpoints`` as methods, sent with retries.

Each endpoint is written once, in ``endpoints``; the ``Endpoint`` descriptor makes it a method that
returns the result on a ``Client`` and an awaitable of it on an ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, ParamSpec, Protocol, Self, TypeVar, overload

import httpx

from pgcontext_client import endpoints as ep
from pgcontext_client import errors
from pgcontext_client._export import ExportReader
from pgcontext_client._http import Call, RetryPolicy, auth_headers, transport_error
from pgcontext_client._tries import Tries

P = ParamSpec("P")
T = TypeVar("T")
Item = TypeVar("Item", covariant=True)


class Page(Protocol[Item]):
    """A page of a listing (``list_memories``, ``list_messages``, ``list_conversations``,
    ``list_documents``, ``memory_history``)."""

    @property
    def items(self) -> Sequence[Item]: ...
    @property
    def next_cursor(self) -> str | None: ...


def _next_cursor(page: Page[Any], cursor: str | None) -> str | None:
    if page.next_cursor is not None and page.next_cursor == cursor:
        raise errors.PgcontextError(f"the listing answered its own cursor again ({cursor!r})", code="cursor_loop")
    return page.next_cursor

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
    """A method made from an ``endpoints`` function: ``Client`` returns ``T``, ``AsyncClient`` a coroutine of
    it (for ``await``, ``asyncio.run`` and ``asyncio.create_task`` alike)."""

    def __init__(self, build: Callable[P, Call[T]]) -> None:
        self.build = build
        self.__doc__ = build.__doc__

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> Self: ...
    @overload
    def __get__(self, obj: Client, owner: type[Any] | None = None) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type[Any] | None = None) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, obj: _Api | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        build = self.build

        @functools.wraps(build)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj._execute(build, *args, **kwargs)

        return method


def _settings(url: str | None, api_key: str | None, http: object | None) -> tuple[str, str | None]:
    """The base URL and API key; none to find when ``http`` (an httpx client with its own base URL and
    headers) is given, and an error to give both, since ``url`` and ``api_key`` would go unused."""
    if http is not None:
        if url is not None or api_key is not None:
            raise TypeError("give url and api_key, or http= (an httpx client with its own base_url and "
                            "Authorization header), not both: they would be ignored")
        return "", None
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
    truncate_conversation = Endpoint(ep.truncate_conversation)
    put_directive = Endpoint(ep.put_directive)
    get_directive = Endpoint(ep.get_directive)
    delete_directive = Endpoint(ep.delete_directive)
    ingest_documents = Endpoint(ep.ingest_documents)
    list_documents = Endpoint(ep.list_documents)
    delete_documents = Endpoint(ep.delete_documents)
    documents_index = Endpoint(ep.documents_index)
    health = Endpoint(ep.health)
    ready = Endpoint(ep.ready)

    def _execute(self, build: Callable[..., Call[Any]], /, *args: Any, **kwargs: Any) -> Any:
        """Build the call and send it (``AsyncClient``: a coroutine that does, so even a call refused as it
        is built raises where it is awaited)."""
        raise NotImplementedError


EXPORT_READ_TIMEOUT_S = 75.0
"""How long an export waits for its next bytes at least: the service may take up to its 60 s statement
limit to sort a large org's lines before the first leaves."""


def _export_call(agent_id: str | None) -> Call[None]:
    params = [("agent_id", agent_id)] if agent_id is not None else []
    return Call("GET", ep.EXPORT_PATH, None, params=params, repeatable=True, min_read_timeout_s=EXPORT_READ_TIMEOUT_S)


class Client(_Api):
    """Synchronous client. ``url`` defaults to ``$PGCONTEXT_URL``, else ``http://127.0.0.1:$PGCONTEXT_PORT``
    (port 8080 when unset); ``api_key`` to ``$PGCONTEXT_API_KEY``. Or give ``http``, an httpx client of
    your own with its base URL and ``Authorization`` header (used as it is, and left open by ``close()``).

    Use it as a context manager (or call ``close()``); one client is safe to share between threads.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, http: httpx.Client | None = None) -> None:
        base, key = _settings(url, api_key, http)
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
        tries = Tries(call)
        while True:
            request = tries.request(self._http)
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                wait = tries.fits(self.retry.after_transport_error(call, tries.number, exc))
                if wait is None:
                    raise transport_error(exc, call, self._http.base_url) from exc
            else:
                wait = tries.fits(self.retry.after_response(call, response, tries.number))
                if wait is None:
                    return response
                response.close()
            time.sleep(wait)

    def _execute(self, build: Callable[..., Call[Any]], /, *args: Any, **kwargs: Any) -> Any:
        return self.execute(build(*args, **kwargs))

    def execute(self, call: Call[T]) -> T:
        """Send a call built by a ``pgcontext_client.endpoints`` function (what each method does), so code
        written once over calls runs on both clients."""
        return call.decode(self._send(call))

    def iterate(self, listing: Callable[..., Page[T]], /, *args: Any, **kwargs: Any) -> Iterator[T]:
        """Every item of a listing, page after page (each page is fetched as the one before runs out):
        ``for memory in pg.iterate(pg.list_memories, agent_id="barista"): ...``. ``listing`` is one of the
        client's list methods, called with ``args`` and ``kwargs`` (``cursor=``: start there)."""
        cursor = kwargs.pop("cursor", None)
        while True:
            page = listing(*args, cursor=cursor, **kwargs)
            yield from page.items
            cursor = _next_cursor(page, cursor)
            if cursor is None:
                return

    def export(self, agent_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Data-subject export: every line of the agent's NDJSON export as a dict (``type`` says which kind),
        streamed; the last is ``{"type": "end", ...}``. An export that stopped before its end line raises
        ``IncompleteExport`` (the service's ``error`` line, or a stream cut short), one whose connection
        broke ``TransportError``. Without ``agent_id``, the whole org's (``import_lines`` writes it back)."""
        call = _export_call(agent_id)
        response = self._send(call, stream=True)
        try:
            if not response.is_success:
                response.read()
                raise errors.from_response(response)
            reader = ExportReader(str(response.url))
            try:
                for chunk in response.iter_bytes():
                    yield from reader.feed(chunk)
            except httpx.TransportError as exc:
                raise transport_error(exc, call, self._http.base_url) from exc
            yield from reader.finish()
        finally:
            response.close()


class AsyncClient(_Api):
    """Asynchronous client (``await client.search(...)``); same methods and arguments as ``Client``.

    One client serves any event loop, and several at once (``asyncio.run`` twice, a notebook's cells, a
    framework's worker threads each running a loop of its own): it keeps a connection pool per loop.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, http: httpx.AsyncClient | None = None) -> None:
        base, key = _settings(url, api_key, http)
        self.retry = retry or RetryPolicy()
        self._make_http = functools.partial(httpx.AsyncClient, base_url=base, timeout=timeout,
                                            headers=auth_headers(key, USER_AGENT))
        self._given = http
        self._pools: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    def _bound_http(self) -> httpx.AsyncClient:
        """The httpx client for the running event loop. Its pooled connections belong to the loop that
        opened them, so a client this one made serves only its own loop: each loop gets one, instead of
        failing with "Event loop is closed" (or sharing another loop's connections) on a second loop.
        One given as ``http=`` is always used."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        http = self._pools.get(loop)
        if http is None:
            for other in list(self._pools):  # one list() and each pop are atomic: loops in threads are safe
                if other.is_closed():
                    self._pools.pop(other, None)  # its connections died with their loop
            http = self._pools.setdefault(loop, self._make_http())
        return http

    async def aclose(self) -> None:
        """Close the connections of the running loop; those of other loops are let go (they are not this
        loop's to close, and die with their own loop)."""
        if self._given is not None:
            return
        http = self._pools.pop(asyncio.get_running_loop(), None)
        self._pools.clear()
        if http is not None:
            await http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def _send(self, call: Call[Any], *, stream: bool = False) -> httpx.Response:
        tries = Tries(call)
        http = self._bound_http()
        while True:
            request = tries.request(http)
            try:
                response = await http.send(request, stream=stream)
            except httpx.TransportError as exc:
                wait = tries.fits(self.retry.after_transport_error(call, tries.number, exc))
                if wait is None:
                    raise transport_error(exc, call, http.base_url) from exc
            else:
                wait = tries.fits(self.retry.after_response(call, response, tries.number))
                if wait is None:
                    return response
                await response.aclose()
            await asyncio.sleep(wait)

    async def _run(self, call: Call[T]) -> T:
        return call.decode(await self._send(call))

    async def execute(self, call: Call[T]) -> T:
        """Like ``Client.execute``: send a call built by a ``pgcontext_client.endpoints`` function."""
        return await self._run(call)

    async def _execute(self, build: Callable[..., Call[Any]], /, *args: Any, **kwargs: Any) -> Any:
        return await self._run(build(*args, **kwargs))

    async def iterate(self, listing: Callable[..., Awaitable[Page[T]]], /, *args: Any, **kwargs: Any
                      ) -> AsyncIterator[T]:
        """Like ``Client.iterate``, as an async iterator: ``async for m in pg.iterate(pg.list_memories)``."""
        cursor = kwargs.pop("cursor", None)
        while True:
            page = await listing(*args, cursor=cursor, **kwargs)
            for item in page.items:
                yield item
            cursor = _next_cursor(page, cursor)
            if cursor is None:
                return

    async def export(self, agent_id: str | None = None) -> AsyncIterator[dict[str, Any]]:
        """Like ``Client.export``, as an async iterator."""
        call = _export_call(agent_id)
        response = await self._send(call, stream=True)
        try:
            if not response.is_success:
                await response.aread()
                raise errors.from_response(response)
            reader = ExportReader(str(response.url))
            try:
                async for chunk in response.aiter_bytes():
                    for line in reader.feed(chunk):
                        yield line
            except httpx.TransportError as exc:
                raise transport_error(exc, call, self._bound_http().base_url) from exc
            for line in reader.finish():
                yield line
        finally:
            await response.aclose()

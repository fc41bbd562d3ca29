"""``PgcontextStore``: LangGraph's ``BaseStore`` (``batch`` and ``abatch``) over the pgcontext client."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Self, TypedDict

from langgraph.store.base import BaseStore, Op, Result, TTLConfig
from pgcontext_client import AsyncClient, Client
from pgcontext_client.plans import arun, run

from pgcontext_langgraph.ops import plan


class IndexFields(TypedDict, total=False):
    """Which fields of a value search reads (LangGraph path syntax, e.g. ``["text", "tags[*]"]``; default:
    the whole value as JSON). pgcontext embeds the text itself: no ``embed`` or ``dims`` is needed."""

    fields: list[str]


class PgcontextStore(BaseStore):
    """A LangGraph long-term memory store whose items are pgcontext memories.

    ``namespace[0]`` is the pgcontext agent id; the rest of the namespace, the key and the value are kept
    in the memory's metadata (see ``pgcontext_langgraph.mapping``). ``search(..., query=...)`` runs the
    service's hybrid retrieval (BM25 and vectors) and gives each item the hit's ``score`` in [0, 1]; TTLs
    (minutes) become the memory's expiry, restarted by reads unless ``refresh_ttl=False``.

    ``url`` and ``api_key`` default as the client's do (``PGCONTEXT_URL``/``PGCONTEXT_PORT``,
    ``PGCONTEXT_API_KEY``); or pass your own ``client`` (sync calls) and ``aclient`` (async calls).
    """

    supports_ttl = True

    def __init__(self, url: str | None = None, api_key: str | None = None, *, client: Client | None = None,
                 aclient: AsyncClient | None = None, index: IndexFields | None = None,
                 ttl: TTLConfig | None = None) -> None:
        self._url, self._api_key = url, api_key
        self._client, self._aclient = client, aclient
        self._owned: list[Client | AsyncClient] = []
        self.fields = None if index is None else index.get("fields")
        self.ttl_config = ttl

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._url, self._api_key)
            self._owned.append(self._client)
        return self._client

    @property
    def aclient(self) -> AsyncClient:
        if self._aclient is None:
            self._aclient = AsyncClient(self._url, self._api_key)
            self._owned.append(self._aclient)
        return self._aclient

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs the ops in order (a put is seen by a later get of the same batch)."""
        return [run(self.client, plan(op, self.fields)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return [await arun(self.aclient, plan(op, self.fields)) for op in ops]

    def close(self) -> None:
        """Close the clients the store made (not those passed in); ``aclose`` for the async one."""
        for owned in self._owned:
            if isinstance(owned, Client):
                owned.close()
        self._owned = [c for c in self._owned if isinstance(c, AsyncClient)]

    async def aclose(self) -> None:
        for owned in self._owned:
            await owned.aclose() if isinstance(owned, AsyncClient) else owned.close()
        self._owned = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"PgcontextStore(url={self._url!r})"


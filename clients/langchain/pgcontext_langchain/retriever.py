"""``PgcontextRetriever``: documents from pgcontext's hybrid search, or from a budgeted context assembly."""

from __future__ import annotations

from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pgcontext_client import AssembleFilters, AsyncClient, Client, SearchFilters, endpoints
from pgcontext_client.plans import Plan, arun, run
from pgcontext_client.types import AssembledContext, RetrievalOptions, SearchResponse
from pydantic import ConfigDict, Field, PrivateAttr


class PgcontextRetriever(BaseRetriever):
    """Memories (and document chunks) relevant to a query, as LangChain ``Document``s.

    ``mode="search"`` (default): the best ``k`` hits of hybrid search (``POST /v1/memories/search``),
    ``agent_id``/``kinds``/``metadata``/``conversations`` narrowing it. ``mode="assemble"``: the memories
    context assembly packs for the query into ``max_context_tokens`` (``POST /v1/context/assemble``; ``k``
    caps them), in packing order. Each document's ``metadata`` has the memory ``id``, its ``score`` (0-1,
    comparable across calls) and ``kind``, ``agent_id``, ``occurred_at``; assembled ones also ``tag`` and
    ``origin``; search hits also the memory's own metadata, under those. ``invoke(query, k=3)`` overrides
    ``k`` for one call (0: no documents). ``conversations``, in both modes: conversation messages only from
    these conversations (one person's chat, for an agent that talks with many)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    agent_id: str | None = None
    mode: Literal["search", "assemble"] = "search"
    k: int = 4
    kinds: list[str] | None = None
    metadata: dict[str, Any] | None = None
    conversations: list[str] | None = None
    model: str = "gpt-4o"
    """``assemble``: whose tokenizer counts the budget."""
    max_context_tokens: int = 2000
    """``assemble``: the whole context's budget."""
    client: Client | None = None
    aclient: AsyncClient | None = None
    _made: dict[str, Client | AsyncClient] = PrivateAttr(default_factory=dict)

    def _sync(self) -> Client:
        if self.client is None:
            self.client = Client(self.url, self.api_key)
        return self.client

    def _async(self) -> AsyncClient:
        if self.aclient is None:
            self.aclient = AsyncClient(self.url, self.api_key)
        return self.aclient

    def _plan(self, query: str, k: int | None) -> Plan[list[Document]]:
        limit = self.k if k is None else k
        if limit <= 0:
            return []
        if self.mode == "search":
            found: SearchResponse = yield endpoints.search(query, limit=limit, filters=SearchFilters(
                agent_id=self.agent_id, kinds=self.kinds, metadata=self.metadata, conversations=self.conversations))
            return [Document(page_content=r.text, id=str(r.id), metadata={
                **r.metadata, "id": str(r.id), "score": r.score, "kind": r.kind, "agent_id": r.agent_id,
                "occurred_at": r.occurred_at.isoformat() if r.occurred_at else None})
                for r in found.results]
        if self.agent_id is None:
            raise ValueError("mode='assemble' needs agent_id (whose memories and directive to assemble)")
        chats = None if self.conversations is None else RetrievalOptions(
            filters=AssembleFilters(conversations=self.conversations))
        ctx: AssembledContext = yield endpoints.assemble(self.agent_id, query, model=self.model,
                                                         max_context_tokens=self.max_context_tokens, retrieval=chats)
        return [Document(page_content=m.text, id=str(m.id), metadata={
            "id": str(m.id), "score": m.score, "tag": m.tag, "origin": m.origin,
            "occurred_at": m.occurred_at.isoformat() if m.occurred_at else None})
            for m in ctx.memories_used[:limit]]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None) -> list[Document]:
        return run(self._sync(), self._plan(query, k))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None) -> list[Document]:
        return await arun(self._async(), self._plan(query, k))

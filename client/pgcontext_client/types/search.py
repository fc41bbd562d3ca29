"""Search: one request shape and one result shape for every strategy and mode."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

from pgcontext_client.types._base import In
from pgcontext_client.types.conversations import MessageRef

Strategy = Literal["auto", "hybrid", "lexical_first", "semantic", "lexical"]
Mode = Literal["exact", "path", "symbol", "lexical", "semantic"]




class _Filters(In):
    """What search and assembly filters share."""

    kinds: list[str] | None = None
    metadata: dict[str, Any] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    occurred_after: datetime | None = None
    occurred_before: datetime | None = None
    source_prefix: str | None = None
    levels: list[int] | None = None
    sources: list[Literal["memories", "messages", "documents"]] | None = None
    """Only these sources (default: all): ``memories`` (every kind but the next two), ``messages``
    (conversation turns), ``documents`` (document chunks)."""
    collections: list[str] | None = None
    """Document chunks only from these collections. Search: absent = every collection; assembly:
    absent = only the agent's own documents (org-wide ones only from collections you name)."""
    conversations: list[str] | None = None
    """Conversation messages only from these conversations (other sources are not affected)."""
    as_of: datetime | None = None
    """What was current then (valid time), retired memories included."""
    include_superseded: bool | None = None
    """Also retired memories, marked ``current=False``."""


class AssembleFilters(_Filters):
    """Filters on an assembly's cold search (its agent comes from the request, not from here)."""

    agent_id: None = None
    """Always empty: the request's ``agent_id`` scopes an assembly."""


class SearchFilters(_Filters):
    agent_id: str | None = None


class SearchTuning(In):
    rrf_k: int | None = None
    lexical_candidates: int | None = None
    semantic_candidates: int | None = None
    cascade_width: int | None = None
    fusion: Literal["auto", "rrf", "convex"] | None = None
    convex_alpha: float | None = None
    ef_search: int | None = None
    lookup_candidates: int | None = None
    speaker_boost: float | None = None
    first_person: Literal["user", "assistant"] | None = "user"
    """Whose messages a query in the first person is about, one in the second being about the other
    side's (``assistant``: the agent asking about itself; None: both are ignored)."""


class SearchRequest(In):
    query: str
    strategy: Strategy | None = None
    limit: int | None = None
    filters: SearchFilters | None = None
    tuning: SearchTuning | None = None
    modes: list[Mode] | Literal["all"] | None = None
    case_sensitive: bool | None = None


class ModeRank(msgspec.Struct, kw_only=True):
    mode: str
    rank: int
    score: float


class SearchResult(msgspec.Struct, kw_only=True):
    id: UUID
    text: str
    kind: str
    source: str | None
    level: int | None
    breadcrumb: str | None
    score: float
    """How strongly it matches the query, in [0, 1], comparable across calls and fusion methods."""
    final_score: float
    """The ranking score (its scale depends on the fusion method)."""
    lexical_rank: int | None
    semantic_rank: int | None
    lexical_score: float | None
    semantic_score: float | None
    fusion_method: str
    agent_id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    occurred_at: datetime | None = None
    current: bool = True
    superseded_by: UUID | None = None
    valid_until: datetime | None = None
    message: MessageRef | None = None
    """A conversation's message: its conversation, position, session, speaker and role."""
    fused_score: float | None = None
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None
    excerpt: str | None = None
    excerpt_line_start: int | None = None
    excerpt_line_end: int | None = None
    mode: str | None = None
    modes: list[ModeRank] | None = None


class ModeMetrics(msgspec.Struct, kw_only=True):
    ms: float
    candidates: int | None
    error: str | None = None


class SearchMetrics(msgspec.Struct, kw_only=True):
    total_ms: float
    embedding_ms: float | None
    lexical_ms: float | None
    semantic_ms: float | None
    fusion_ms: float
    lexical_candidates: int | None
    semantic_candidates: int | None
    final_count: int
    modes: dict[str, ModeMetrics] | None = None
    embedding_cached: bool | None = None
    rerank_ms: float | None = None


class RerankReport(msgspec.Struct, kw_only=True):
    provider: str
    outcome: str
    detail: str
    candidates: int


class RetrievalReport(msgspec.Struct, kw_only=True):
    """Which retrieval was planned, which ran (null: an assembly's cold search gave no answer), and
    why they differ: ``reason`` is ``planned`` when nothing was reduced, else e.g. ``light``,
    ``embedder_circuit_open``, ``embedder_busy``, ``embedder_timeout``, ``branch_timeout``."""

    planned: str
    ran: str | None
    reduced: bool
    reason: str


class SearchResponse(msgspec.Struct, kw_only=True):
    query: str
    requested_strategy: str
    strategy: str
    reason: str
    fallback_reason: str | None
    results: list[SearchResult]
    metrics: SearchMetrics
    modes: list[str] | None = None
    rerank: RerankReport | None = None
    retrieval: RetrievalReport

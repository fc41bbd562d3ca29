"""Request and response objects of the pgcontext API (msgspec Structs).

Response structs ignore fields they do not know, so a newer service does not break an older client;
request structs leave out every field you did not set (``omit_defaults``), so the service's own
defaults apply. ``tests/integration/test_client_schema.py`` checks both against the service's
published OpenAPI schema.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import msgspec

Strategy = Literal["auto", "hybrid", "lexical_first", "semantic", "lexical"]
Mode = Literal["exact", "path", "symbol", "lexical", "semantic"]


class _In(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A request body: fields left at their default are not sent."""


# --- memories -------------------------------------------------------------------------------------


class MemoryIn(_In):
    """One memory to store (``Client.create_memories`` takes a list of these)."""

    text: str
    agent_id: str | None = None
    """The agent it belongs to (1-200 letters, digits and ``_.:@-``); none: org-wide."""
    kind: str | None = None
    metadata: dict[str, Any] | None = None
    importance: float | None = None
    """0..1 (service default 0.5)."""
    pinned: bool | None = None
    expires_at: datetime | None = None
    occurred_at: datetime | None = None
    """When the recorded thing happened (timezone-aware); default: the write time."""
    embedding: list[float] | None = None


class MemoryBatchIn(_In):
    memories: list[MemoryIn]


class MemoryPatch(_In):
    """A partial update: only the fields set are changed (``agent_id=None`` makes it org-wide)."""

    text: str | msgspec.UnsetType = msgspec.UNSET
    agent_id: str | msgspec.UnsetType | None = msgspec.UNSET
    kind: str | msgspec.UnsetType = msgspec.UNSET
    metadata: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    importance: float | msgspec.UnsetType = msgspec.UNSET
    pinned: bool | msgspec.UnsetType = msgspec.UNSET
    expires_at: datetime | msgspec.UnsetType | None = msgspec.UNSET
    occurred_at: datetime | msgspec.UnsetType = msgspec.UNSET


class CreatedMemories(msgspec.Struct, kw_only=True):
    ids: list[UUID]


class DeletedAgentMemories(msgspec.Struct, kw_only=True):
    agent_id: str
    deleted: int


class Memory(msgspec.Struct, kw_only=True):
    id: UUID
    agent_id: str | None
    kind: str
    text: str
    metadata: dict[str, Any]
    importance: float
    usefulness: float
    pinned: bool
    created_at: datetime
    updated_at: datetime
    occurred_at: datetime
    last_accessed_at: datetime | None
    access_count: int
    expires_at: datetime | None
    source_path: str | None
    line_start: int | None
    line_end: int | None
    section_title: str | None
    breadcrumb: str | None
    level: int | None


class MemoryPage(msgspec.Struct, kw_only=True):
    items: list[Memory]
    next_cursor: str | None


class HotMemory(msgspec.Struct, kw_only=True):
    id: UUID
    agent_id: str | None
    kind: str
    text: str
    importance: float
    usefulness: float
    pinned: bool
    created_at: datetime
    occurred_at: datetime
    last_accessed_at: datetime | None
    access_count: int


class HotSet(msgspec.Struct, kw_only=True):
    agent_id: str
    source: str
    built_at: datetime
    items: list[HotMemory]


class FeedbackItem(_In):
    id: UUID
    helpful: bool


class FeedbackIn(_In):
    items: list[FeedbackItem] | None = None
    memory_ids: list[UUID] | None = None
    helpful: bool | None = None


class FeedbackUpdated(msgspec.Struct, kw_only=True):
    id: UUID
    usefulness: float
    feedback_count: int


class FeedbackOut(msgspec.Struct, kw_only=True):
    updated: list[FeedbackUpdated]
    not_found: list[UUID]


# --- search ---------------------------------------------------------------------------------------


class SearchFilters(_In):
    agent_id: str | None = None
    kinds: list[str] | None = None
    metadata: dict[str, Any] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    occurred_after: datetime | None = None
    occurred_before: datetime | None = None
    source_prefix: str | None = None
    levels: list[int] | None = None


class SearchTuning(_In):
    rrf_k: int | None = None
    lexical_candidates: int | None = None
    semantic_candidates: int | None = None
    cascade_width: int | None = None
    fusion: Literal["auto", "rrf", "convex"] | None = None
    convex_alpha: float | None = None
    ef_search: int | None = None
    lookup_candidates: int | None = None


class SearchRequest(_In):
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
    final_score: float
    lexical_rank: int | None
    semantic_rank: int | None
    lexical_score: float | None
    semantic_score: float | None
    fusion_method: str
    agent_id: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    occurred_at: datetime | None = None
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


# --- context assembly -----------------------------------------------------------------------------


class Message(_In):
    role: str
    content: str


class RetrievalOptions(_In):
    strategy: Strategy | None = None
    limit: int | None = None
    include_org_wide: bool | None = None
    use_hot: bool | None = None
    filters: SearchFilters | None = None
    tuning: SearchTuning | None = None


class AssembleRequest(_In):
    agent_id: str
    query: str
    model: str
    recent_messages: list[Message] | None = None
    max_context_tokens: int | None = None
    selective: bool | None = None
    reserve_tokens: int | None = None
    retrieval: RetrievalOptions | None = None


class DirectiveUsed(msgspec.Struct, kw_only=True):
    content: str
    version: int
    updated_at: datetime


class Scores(msgspec.Struct, kw_only=True):
    relevance: float
    recency: float
    usefulness: float
    informativeness: float
    uniqueness: float
    composite: float


class MemoryUsed(msgspec.Struct, kw_only=True):
    id: UUID
    tag: str
    text: str
    tokens: int
    origin: str
    in_hot_and_cold: bool
    scores: Scores
    justification: str
    occurred_at: datetime | None = None


class DroppedMemory(msgspec.Struct, kw_only=True):
    id: UUID
    reason: str
    detail: str
    tokens: int
    composite: float


class Budget(msgspec.Struct, kw_only=True):
    mode: str
    max_context_tokens: int | None
    directive_tokens: int
    history_tokens: int
    reserve_tokens: int
    overhead_tokens: int
    memories_budget_tokens: int
    memories_tokens: int
    tag_tokens: int
    context_tokens: int
    history_messages: int
    history_messages_dropped: int
    intent: str
    complexity: str
    tier: str | None
    multiplier: float
    encoding: str
    reasons: list[str]


class Branch(msgspec.Struct, kw_only=True):
    outcome: str
    ms: float
    detail: str | None = None
    count: int | None = None
    source: str | None = None


class Branches(msgspec.Struct, kw_only=True):
    directive: Branch
    hot: Branch
    cold: Branch


class AssemblyMetrics(msgspec.Struct, kw_only=True):
    budget_calculation_ms: float
    directive_load_ms: float
    hot_memory_retrieval_ms: float
    cold_memory_retrieval_ms: float
    ranking_ms: float
    packing_ms: float
    formatting_ms: float
    total_ms: float
    candidates_evaluated: int
    queued_ms: float = 0.0


class AssembledContext(msgspec.Struct, kw_only=True):
    context: str
    """The block to put before the model call: ``<directive>``, ``<memories>`` (``n text`` lines) and ``<history>``."""
    refs: dict[str, UUID]
    """Tag -> memory id, to map a model's citation of memory n back."""
    directive: DirectiveUsed | None
    memories_used: list[MemoryUsed]
    dropped: list[DroppedMemory]
    budget: Budget
    degradation_level: str
    sources_available: list[str]
    branches: Branches
    metrics: AssemblyMetrics


# --- directives -----------------------------------------------------------------------------------


class DirectiveIn(_In):
    content: str


class Directive(msgspec.Struct, kw_only=True):
    agent_id: str
    content: str
    version: int
    updated_at: datetime


# --- documents ------------------------------------------------------------------------------------


class FileIn(_In):
    path: str
    """Relative posix path (``service/app.py``)."""
    content: str
    metadata: dict[str, Any] | None = None


class IngestRequest(_In):
    files: list[FileIn]
    agent_id: str | None = None
    collection: str | None = None


class ChunkCounts(msgspec.Struct, kw_only=True):
    l0: int
    l1: int
    l2: int


class FileResult(msgspec.Struct, kw_only=True):
    path: str
    status: str
    content_hash: str
    language: str
    chunks: ChunkCounts


class IngestTimings(msgspec.Struct, kw_only=True):
    chunking_ms: float
    embedding_ms: float
    database_ms: float
    total_ms: float


class IngestResponse(msgspec.Struct, kw_only=True):
    collection: str
    revision: int
    files: list[FileResult]
    created: int
    updated: int
    unchanged: int
    chunks_written: int
    timings: IngestTimings


class Document(msgspec.Struct, kw_only=True):
    collection: str
    path: str
    agent_id: str | None
    content_hash: str
    language: str
    line_count: int
    byte_count: int
    chunks: ChunkCounts
    embedder: str | None
    metadata: dict[str, Any]
    created_at: datetime
    indexed_at: datetime


class DocumentPage(msgspec.Struct, kw_only=True):
    items: list[Document]
    next_cursor: str | None


class DeletedDocuments(msgspec.Struct, kw_only=True):
    collection: str
    deleted: list[str]
    missing: list[str]
    chunks_deleted: int
    revision: int


class LanguageCounts(msgspec.Struct, kw_only=True):
    files: int
    lines: int
    chunks: int


class CollectionCounts(msgspec.Struct, kw_only=True):
    files: int
    lines: int
    bytes: int
    last_indexed_at: datetime | None


class SemanticStatus(msgspec.Struct, kw_only=True):
    available: bool
    embedder: str
    chunks_embedded: int
    chunks_missing_embedding: int
    files_other_embedder: int


class DirtyPath(msgspec.Struct, kw_only=True):
    collection: str
    path: str
    reasons: list[str]


class IndexSummary(msgspec.Struct, kw_only=True):
    revision: int
    status: str
    last_indexed_at: datetime | None
    files: int
    chunks: int
    chunks_by_level: dict[str, int]
    by_language: dict[str, LanguageCounts]
    collections: dict[str, CollectionCounts]
    semantic: SemanticStatus
    dirty_count: int
    dirty_paths: list[DirtyPath]
    orphan_chunks: int


# --- health ---------------------------------------------------------------------------------------


class Health(msgspec.Struct, kw_only=True):
    status: str
    checks: dict[str, str] = msgspec.field(default_factory=dict)

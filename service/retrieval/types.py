"""Request and response types of the search API: one query shape, one result shape, for every strategy."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal
from uuid import UUID

import msgspec

from service.documents.types import Collection
from service.memories.types import AGENT_ID_PATTERN, AgentId, AwareDatetime, Kind, MessageRef, holds_in_utc

Strategy = Literal["auto", "hybrid", "lexical_first", "semantic", "lexical"]
UsedStrategy = Literal["hybrid", "lexical_first", "semantic", "lexical", "modes"]
"""``modes``: the request named ``modes`` and the results are an RRF fusion over those modes."""
Mode = Literal["exact", "path", "symbol", "lexical", "semantic"]
"""A retrieval mode of ``modes`` search. ``exact`` (substring), ``path`` (glob/prefix) and ``symbol``
(symbol names in breadcrumbs) only ever return document chunks; ``lexical`` (BM25) and ``semantic``
(HNSW) search every kind the filters allow."""
MODES: tuple[Mode, ...] = ("exact", "path", "symbol", "lexical", "semantic")
FusionMethod = Literal["auto", "rrf", "convex"]
"""``auto``: z-score fusion, or RRF when a branch has too few candidates to normalise (the response's
``reason`` says which and why); ``rrf`` and ``convex`` as named (see :mod:`service.retrieval.fusion`)."""
ResultFusion = Literal["zscore", "rrf", "convex", "cascade", "none"]
"""How a result's ``final_score`` was made: fused (zscore/rrf/convex), cascade (exact vector rank of
lexical candidates) or none (a single branch's own score)."""

CONVERSATION_ID_MAX_LENGTH: Final = 200
CONVERSATION_ID_CHARS: Final = AGENT_ID_PATTERN
"""The characters of a conversation, session or message id (the agent-id rule's): every id ever
stored is made of them."""
CONVERSATION_ID_PATTERN: Final = r"^(?!\.+$)" + AGENT_ID_PATTERN.removeprefix("^")
"""The one rule for conversation, session and message ids: :data:`CONVERSATION_ID_CHARS`, and not dots
only ("." and ".." are path segments that HTTP clients resolve away, so ``/v1/conversations/../messages``
never reaches the conversation)."""
ConversationId = Annotated[str, msgspec.Meta(min_length=1, max_length=CONVERSATION_ID_MAX_LENGTH,
                                             pattern=CONVERSATION_ID_PATTERN)]
"""A conversation's id as the caller gave it (``POST /v1/conversations/{id}/messages``): 1-200 letters,
digits and ``_.:@-``, not only dots; session and message ids follow the same rule."""
Source = Literal["memories", "messages", "documents"]
"""Where a memory comes from, for ``filters.sources``: ``documents`` are document chunks (kind
``document_chunk``), ``messages`` conversation turns (kind ``message``), ``memories`` every other
kind (facts, episodes, instructions, ...)."""
SOURCE_KINDS: Final[dict[str, Source]] = {"document_chunk": "documents", "message": "messages"}
"""The kinds that are not ``memories`` (every other kind is)."""


def source_of(kind: str) -> Source:
    return SOURCE_KINDS.get(kind, "memories")


MAX_CANDIDATES: Final = 1000
Candidates = Annotated[int, msgspec.Meta(ge=1, le=MAX_CANDIDATES)]

RetrievalReason = Literal[
    "planned", "light", "embedder_circuit_open", "embedder_busy", "embedder_timeout", "embedder_error",
    "branch_timeout", "branch_error", "no_lexical_candidates", "cold_timeout", "cold_error", "cold_skipped",
]
"""Why the retrieval that ran is what it is (see :class:`RetrievalReport`, docs/retrieval.md)."""


class RetrievalReport(msgspec.Struct, kw_only=True):
    """Which retrieval was planned, which actually ran, and why they differ (``reason``).

    ``planned``: the caller's strategy, or what ``auto`` chooses for this query and filters with a
    healthy embedder (``modes`` for a modes search). ``ran``: the strategy that produced the results
    (null when an assembly's cold search gave no answer). ``reduced``: the retrieval was less than
    planned (a branch or mode left out, or fewer postings read). ``reason``: ``planned`` when nothing
    was reduced, otherwise the first cause: ``light`` (assembly under load: lexical with fewer
    postings), ``embedder_circuit_open`` (the org's query embeddings failed moments ago),
    ``embedder_busy`` (query embeddings queued past their deadline), ``embedder_timeout`` /
    ``embedder_error`` (this query's embedding), ``branch_timeout`` / ``branch_error`` (a lexical,
    vector or lookup query), ``no_lexical_candidates`` (the cascade had nothing to re-rank),
    ``cold_timeout`` / ``cold_error`` / ``cold_skipped`` (an assembly's cold branch gave no answer)."""

    planned: UsedStrategy
    ran: UsedStrategy | None
    reduced: bool
    reason: RetrievalReason


class SearchFilters(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agent_id: AgentId | None = None
    kinds: list[Kind] | None = None
    metadata: dict[str, Any] | None = None
    """Rows whose metadata contains this object (jsonb ``@>``)."""
    created_after: AwareDatetime | None = None
    """Inclusive lower bound on ``created_at`` (RFC 3339 with timezone)."""
    created_before: AwareDatetime | None = None
    """Exclusive upper bound on ``created_at``."""
    occurred_after: AwareDatetime | None = None
    """Inclusive lower bound on ``occurred_at`` (when the memory's event happened; RFC 3339 with timezone)."""
    occurred_before: AwareDatetime | None = None
    """Exclusive upper bound on ``occurred_at``."""
    source_prefix: Annotated[str, msgspec.Meta(min_length=1, max_length=1000)] | None = None
    """Rows whose ``source_path`` starts with this (a literal prefix, no wildcards)."""
    levels: list[Annotated[int, msgspec.Meta(ge=0, le=2)]] | None = None
    sources: Annotated[list[Source], msgspec.Meta(min_length=1, max_length=3)] | None = None
    """Only these sources (absent: all three): ``memories`` (every kind but the next two),
    ``messages`` (conversation turns, kind ``message``), ``documents`` (document chunks)."""
    collections: Annotated[list[Collection], msgspec.Meta(min_length=1, max_length=50)] | None = None
    """Document chunks only from these collections; other sources are not affected. Absent, a search
    considers every collection; an assembly only the agent's own documents (org-wide ones only from
    the collections it names: see ``POST /v1/context/assemble``)."""
    conversations: Annotated[list[ConversationId], msgspec.Meta(min_length=1, max_length=50)] | None = None
    """Conversation messages only from these conversations; other sources are not affected (with
    ``sources: ["messages"]``, those conversations' messages only)."""
    as_of: AwareDatetime | None = None
    """Only memories valid at this time (valid time: ``occurred_at`` at or before it, ``valid_until``
    after it), retired ones included: what was current then. Default: the current memories only."""
    include_superseded: bool = False
    """Also retired memories (superseded, or past their ``valid_until``), marked ``current: false``."""

    def __post_init__(self) -> None:
        """What PostgreSQL cannot take is rejected here (a 400), not as a database error: NUL in text and
        jsonb, a time outside years 1-9999 in UTC (``0001-01-01T00:00:00+05:00``)."""
        if self.source_prefix is not None and "\x00" in self.source_prefix:
            raise ValueError("filters.source_prefix must not contain NUL characters")
        if self.metadata is not None and b"\\u0000" in msgspec.json.encode(self.metadata):
            raise ValueError("filters.metadata must not contain NUL characters")
        for name in ("created_after", "created_before", "occurred_after", "occurred_before", "as_of"):
            value = getattr(self, name)
            if value is not None and not holds_in_utc(value):
                raise ValueError(f"filters.{name} is out of range: in UTC it must fall in the years 1-9999")

    def is_empty(self) -> bool:
        """No filter beyond the default (current memories only)."""
        return all(getattr(self, name) in (None, False) for name in self.__struct_fields__)


class SearchTuning(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    rrf_k: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 60
    lexical_candidates: Candidates = 50
    """Fewest rows the lexical branch contributes to fusion (a search ranks at least twice ``limit``)."""
    semantic_candidates: Candidates = 50
    """Fewest rows the semantic branch contributes to fusion (a search ranks at least twice ``limit``)."""
    cascade_width: Annotated[int, msgspec.Meta(ge=1, le=2000)] = 200
    """lexical_first: how many lexical ids the exact vector step ranks."""
    fusion: FusionMethod = "auto"
    convex_alpha: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.5
    """convex fusion: weight of the semantic score (1 - alpha goes to lexical)."""
    ef_search: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
    """HNSW candidate list size; unset uses the service default."""
    speaker_boost: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)] | None = None
    """``auto`` fusion: standard deviations added to candidates whose speaker (``metadata.speaker``)
    the query names; 0 turns it off; unset uses the service default (1.5)."""
    first_person: Literal["user", "assistant"] | None = "user"
    """``auto`` fusion: whose messages a query in the first person ("What did I say ...?") is about, a
    query in the second person ("What did you suggest?") being about the other side's; the messages of
    other roles lose ``speaker_boost``. ``user`` (default) when the query is the user's words,
    ``assistant`` when the agent asks about itself, null when neither (both persons are then
    ignored)."""
    lookup_candidates: Candidates = 50
    """``modes`` search: how many rows each of ``exact``/``path``/``symbol`` contributes to fusion."""


class SearchRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    query: str
    strategy: Strategy = "auto"
    limit: Annotated[int, msgspec.Meta(ge=1)] = 10
    filters: SearchFilters = msgspec.field(default_factory=SearchFilters)
    tuning: SearchTuning = msgspec.field(default_factory=SearchTuning)
    modes: list[Mode] | Literal["all"] | None = None
    """Run these retrieval modes concurrently and RRF-fuse them by memory id (``strategy`` must then be
    ``auto``). ``"all"``: every mode that applies to the query (the lookup modes
    :func:`~service.documents.lookup.applicable_modes` picks, plus lexical and semantic). Absent: the
    ``strategy`` search, unchanged."""
    case_sensitive: bool = False
    """``exact`` mode: case-sensitive substring match (default: case-insensitive)."""


class ModeRank(msgspec.Struct, kw_only=True):
    """One mode's view of a result: its 1-based rank in that mode's list and the mode's own score."""

    mode: Mode
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
    """How strongly it matches the query, in [0, 1], comparable across calls and fusion methods: the best
    of its semantic evidence (cosine similarity), lexical evidence (BM25 saturated as ``bm25 / (bm25 + 10)``)
    and, in ``modes`` search, a literal match (see docs/retrieval.md, "Scores")."""
    final_score: float
    """The ranking score: the fusion's (its scale depends on the method), or the reranker's."""
    lexical_rank: int | None
    semantic_rank: int | None
    lexical_score: float | None
    semantic_score: float | None
    fusion_method: ResultFusion
    agent_id: str | None = None
    """The memory's agent (null: org-wide)."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    occurred_at: datetime | None = None
    """When the memory's event happened (its write time unless the writer said otherwise)."""
    current: bool = True
    """False for a retired memory (shown with ``include_superseded`` or ``as_of``)."""
    superseded_by: UUID | None = None
    valid_until: datetime | None = None
    """Valid time's end (null: still true)."""
    message: MessageRef | None = None
    """A conversation's message: its conversation, position, session, speaker and role (null otherwise)."""
    fused_score: float | None = None
    """Set when the reranker re-ordered the results: the score fusion gave (``final_score`` is then the
    reranker's relevance score)."""
    # A document chunk's file and lines (null for other memories):
    path: str | None = None
    """The document path (``source``)."""
    line_start: int | None = None
    line_end: int | None = None
    """The chunk's 1-based, inclusive line span in its file."""
    # Filled by ``modes`` search (null from the strategy search):
    excerpt: str | None = None
    """``exact``/``symbol``: the matched lines with one line of context; otherwise the chunk's first lines."""
    excerpt_line_start: int | None = None
    excerpt_line_end: int | None = None
    """The excerpt's line span in the file (L0 summaries: the file's span, their text being generated)."""
    mode: Mode | None = None
    """The mode that ranked this result best (ties: exact, symbol, path, lexical, semantic)."""
    modes: list[ModeRank] | None = None
    """Every mode that found this result, best rank first."""


class ModeMetrics(msgspec.Struct, kw_only=True):
    ms: float
    """Wall time of the mode (semantic: embedding included), on its own pooled connection."""
    candidates: int | None
    """Rows the mode contributed to fusion; null when it failed."""
    error: str | None = None
    """Why the mode failed or timed out (the other modes' results are still returned)."""


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
    """``modes`` search: time and candidate count per mode (``lexical_*``/``semantic_*`` above mirror
    those two modes)."""
    embedding_cached: bool | None = None
    """Whether the query's embedding came from this org's query cache (null when the search embedded
    nothing). The cache is per org: another org's searches never make this true."""
    rerank_ms: float | None = None
    """Wall time of the reranker call (null when none is configured or it was skipped)."""


class RerankReport(msgspec.Struct, kw_only=True):
    """What the optional reranker stage did with this search's fused results."""

    provider: str
    outcome: Literal["applied", "skipped", "failed"]
    """``applied``: results in the reranker's order; otherwise they keep the fused order."""
    detail: str
    """Why: how many candidates were reranked, or why it was skipped (not enough time left) or failed."""
    candidates: int
    """Fused results offered to the reranker."""


class SearchResponse(msgspec.Struct, kw_only=True):
    query: str
    requested_strategy: Strategy
    strategy: UsedStrategy
    """The strategy that produced the results (after auto's choice and any fallback)."""
    reason: str
    """Why this strategy: the caller asked for it, auto's rule, or the fallback."""
    fallback_reason: str | None
    results: list[SearchResult]
    metrics: SearchMetrics
    modes: list[Mode] | None = None
    """``modes`` search: the modes that ran (``"all"`` resolved for the query)."""
    rerank: RerankReport | None = None
    """The reranker stage (null when no reranker is configured, ``PGCONTEXT_RERANK_PROVIDER``)."""
    retrieval: RetrievalReport
    """Planned vs ran, and why (the same report an assembly carries for its cold search)."""

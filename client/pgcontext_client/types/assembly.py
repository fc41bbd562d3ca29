"""Context assembly: the request and the assembled context with its accounting."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import msgspec

from pgcontext_client.types._base import In
from pgcontext_client.types.conversations import MessageRef
from pgcontext_client.types.search import AssembleFilters, RetrievalReport, SearchTuning, Strategy


class Message(In):
    role: str
    content: str


class RetrievalOptions(In):
    strategy: Strategy | None = None
    limit: int | None = None
    include_org_wide: bool | None = None
    use_hot: bool | None = None
    complete_from_history: bool | None = None
    """Search for a query that leans on the conversation ("what does she paint?") after the names in
    the latest of the last four messages of ``recent_messages`` that has any (the service's default: true)."""
    filters: AssembleFilters | None = None
    tuning: SearchTuning | None = None


class AssembleRequest(In):
    agent_id: str
    query: str
    model: str
    recent_messages: list[Message] | None = None
    max_context_tokens: int | None = None
    selective: bool | None = None
    reserve_tokens: int | None = None
    retrieval: RetrievalOptions | None = None
    encoding: str | None = None
    """Count with this tiktoken encoding (``cl100k_base``, ``o200k_base``), trusted as exact."""
    explain: bool | None = None
    """Also return each dropped candidate's text, origin and scores."""
    timeout_ms: int | None = None
    """Your deadline in ms, for when you cannot send ``X-Timeout-Ms`` (``Client.assemble`` sends the
    header); longer than the service's 40 ms it buys a longer wall, up to its maximum (1,000 ms by
    default), so the full planned retrieval runs."""
    conversation_id: str | None = None
    """The conversation this call continues: its messages already in ``recent_messages`` are not packed."""
    history_turns: int | None = None
    """With ``conversation_id``: its last this many messages are in the model's history (not packed)."""


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
    score: float
    """How strongly it matches the query, in [0, 1], comparable across calls."""
    scores: Scores
    justification: str
    occurred_at: datetime | None = None
    message: MessageRef | None = None
    path: str | None = None
    """A document chunk: its file, and the lines it covers."""
    line_start: int | None = None
    line_end: int | None = None
    collection: str | None = None
    """A document chunk: its file's collection."""


class DroppedMemory(msgspec.Struct, kw_only=True):
    id: UUID
    reason: str
    detail: str
    tokens: int
    composite: float
    score: float
    text: str | None = None
    origin: str | None = None
    scores: Scores | None = None
    message: MessageRef | None = None
    path: str | None = None
    line_start: int | None = None
    line_end: int | None = None
    collection: str | None = None


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
    model_family: str = "openai"
    safety_factor: float = 1.0


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
    deadline_ms: float = 0.0
    """The deadline the assembly ran under: the service's, or yours up to its maximum."""


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
    """L0: hot and cold memories both usable; L1: one of them; L2: neither."""
    degradation_reasons: list[str]
    """What the context lacks of what was planned (empty: complete): ``directive_missing``,
    ``directive_unconfirmed``, ``hot_unavailable``, ``cold_unavailable``, ``retrieval_reduced``,
    ``history_turns_unread``."""
    sources_available: list[str]
    branches: Branches
    metrics: AssemblyMetrics
    retrieval: RetrievalReport
    """The cold search planned vs what ran, and why (``reason: planned`` when nothing was reduced)."""

    @property
    def directive_missing(self) -> bool:
        """The agent's directive could not be read in time: this context may lack its standing
        instructions (``directive`` is None). An agent without a directive is not missing one."""
        return "directive_missing" in self.degradation_reasons

    @property
    def directive_unconfirmed(self) -> bool:
        """The directive's read did not answer in time and the service's last copy of it stands in
        (at most ``PGCONTEXT_ASSEMBLY_DIRECTIVE_LAST_KNOWN_S`` old): present, possibly not the newest."""
        return "directive_unconfirmed" in self.degradation_reasons

    @property
    def complete(self) -> bool:
        """Nothing planned is missing: the directive (if the agent has one), both memory sources and
        the full planned retrieval."""
        return not self.degradation_reasons

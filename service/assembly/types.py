"""Request and response types of context assembly, the hot set and feedback (msgspec, validated at the edge)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

import msgspec

from service.memories.types import AgentId, MessageRef
from service.retrieval.types import ConversationId, RetrievalReport, SearchFilters, SearchTuning, Strategy

Outcome = Literal["ok", "timeout", "error", "skipped"]
Level = Literal["L0", "L1", "L2"]
DegradationReason = Literal["directive_missing", "directive_unconfirmed", "hot_unavailable", "cold_unavailable",
                            "retrieval_reduced", "history_turns_unread"]
"""What an assembly's context lacks of what was planned (see ``AssembleResponse.degradation_reasons``)."""
Tokens = Annotated[int, msgspec.Meta(ge=0)]


class Message(msgspec.Struct, forbid_unknown_fields=True):
    role: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    content: str


class RetrievalOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """How the cold branch searches. ``filters.agent_id`` is not accepted: the request's agent scopes it."""

    strategy: Strategy = "auto"
    limit: Annotated[int, msgspec.Meta(ge=1, le=100)] | None = None
    """Cold candidates (default: as many as the memory budget can use, see ``PGCONTEXT_ASSEMBLY_COLD_LIMIT``)."""
    include_org_wide: bool = True
    """Also consider org-wide memories (agent_id null); false searches the agent's own memories only."""
    use_hot: bool = True
    """Consider the agent's hot set (false: the hot branch is ``skipped``)."""
    complete_from_history: bool = True
    """Search for a query that leans on the conversation (no name of its own, and a third-person pronoun or
    at most two content words) after the names in the latest of the last four messages of
    ``recent_messages`` that has any (:mod:`service.assembly.followup`)."""
    filters: SearchFilters = msgspec.field(default_factory=SearchFilters)
    tuning: SearchTuning = msgspec.field(default_factory=SearchTuning)


class AssembleRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    agent_id: AgentId
    query: str
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    """Selects the tiktoken encoding: OpenAI models (gpt-4o*, gpt-4.1*, gpt-5*, o1/o3/o4*, gpt-4*,
    gpt-3.5*) exactly; claude*, gemini*/gemma*, llama*, mistral*/mixtral*/codestral*..., qwen* with
    cl100k_base and a safety margin on the window (``budget.safety_factor``); or an encoding name."""
    encoding: Literal["cl100k_base", "o200k_base"] | None = None
    """Count with this encoding, trusted as exact (no margin); ``model`` is then only a label."""
    recent_messages: list[Message] = msgspec.field(default_factory=list)
    max_context_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """The whole window the block must fit (with ``reserve_tokens`` kept free). Omit for selective mode."""
    selective: bool = False
    """Size the memory budget from the query (intent, complexity, tier, multipliers); with
    ``max_context_tokens`` too, the smaller of the two wins."""
    reserve_tokens: Tokens | None = None
    """Kept free for the answer (default: the service's ``default_reserve_tokens``)."""
    retrieval: RetrievalOptions = msgspec.field(default_factory=RetrievalOptions)
    explain: bool = False
    """Also return each dropped candidate's text, origin and score breakdown (the explain page asks for
    them); off by default, which keeps the response small."""
    timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=3_600_000)] | None = None
    """Your deadline in ms from the request's arrival, for clients that cannot set ``X-Timeout-Ms``
    (the sooner of this and the headers wins). Longer than ``PGCONTEXT_DEADLINE_MS`` (40) it buys a
    longer wall, up to ``PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS`` (1000), so the full planned retrieval
    runs; past it the answer is a 504."""
    conversation_id: ConversationId | None = None
    """The conversation this model call continues: its messages that ``recent_messages`` already hold
    (and, with ``history_turns``, its last turns) are not packed again (``dropped``: ``in_history``)."""
    history_turns: Annotated[int, msgspec.Meta(ge=0, le=100_000)] | None = None
    """With ``conversation_id``: the model sees the conversation's last ``history_turns`` messages
    already (sent by the caller, in ``recent_messages`` or otherwise), so they are not packed."""


class DirectiveUsed(msgspec.Struct):
    content: str
    version: int
    updated_at: datetime


class Scores(msgspec.Struct):
    relevance: float
    recency: float
    usefulness: float
    informativeness: float
    uniqueness: float
    composite: float


class MemoryUsed(msgspec.Struct):
    id: UUID
    tag: str
    """Its number in ``context``, which opens the memory's line (1, 2, ... in packing order)."""
    text: str
    tokens: int
    """Exact tokens of its line in ``context``, the tag included."""
    origin: Literal["hot", "cold"]
    in_hot_and_cold: bool
    score: float
    """How strongly it matches the query, in [0, 1], comparable across calls: a search hit's ``score``
    (cold), the cosine similarity to the query (hot; the share of the query's content words it contains
    when there are no embeddings), the best of both when both offered it. ``scores`` holds the ranking."""
    scores: Scores
    justification: str
    occurred_at: datetime | None = None
    """When the memory's event happened (its write time unless the writer said otherwise)."""
    message: MessageRef | None = None
    """A conversation's message: its conversation, position, session, speaker and role."""
    path: str | None = None
    """A document chunk: its file, and the lines it covers (``line_start``-``line_end``, 1-based)."""
    line_start: int | None = None
    line_end: int | None = None
    collection: str | None = None
    """A document chunk: its file's collection (the same path in two collections is two files)."""


class DroppedMemory(msgspec.Struct):
    id: UUID
    reason: Literal["empty", "duplicate", "below_threshold", "over_budget", "nested", "in_history"]
    """``nested``: a document chunk whose lines are already in the context (in a summary, section or
    chunk of the same file that was packed); ``in_history``: a message of the request's conversation
    that the model already sees (in ``recent_messages``, or among its last ``history_turns``)."""
    detail: str
    tokens: int
    """Tokens of its memory line without a tag."""
    composite: float
    """Its composite score when it was dropped; 0 for ``in_history`` (left out before ranking, unscored)."""
    score: float
    """How strongly it matches the query, in [0, 1] (as a used memory's ``score``)."""
    text: str | None = None
    """With ``explain: true``: the memory's text."""
    origin: Literal["hot", "cold"] | None = None
    """With ``explain: true``: the branch that offered it."""
    scores: Scores | None = None
    """With ``explain: true``: its score breakdown when it was dropped (none for ``in_history``)."""
    message: MessageRef | None = None
    """A conversation's message: its conversation, position, session, speaker and role."""
    path: str | None = None
    """A document chunk: its file, and the lines it covers (``line_start``-``line_end``, 1-based)."""
    line_start: int | None = None
    line_end: int | None = None
    collection: str | None = None
    """A document chunk: its file's collection (the same path in two collections is two files)."""



@dataclass(frozen=True, slots=True)
class LeftOut:
    """What history-aware packing left out before ranking."""

    dropped: list[DroppedMemory]
    """Each memory left out as in the model's history (reason ``in_history``)."""
    turns_unread: bool = False
    """``history_turns`` was asked but the conversation's length was not read in time: its last turns
    were not left out (only those matching ``recent_messages`` were)."""

class BudgetOut(msgspec.Struct):
    """Token accounting: every ``*_tokens`` field is a tiktoken count in ``encoding``."""

    mode: Literal["fixed", "selective"]
    max_context_tokens: int | None
    """The request's window (null: selective mode without one)."""
    directive_tokens: int
    history_tokens: int
    reserve_tokens: int
    overhead_tokens: int
    """Chat envelope of the block sent as one message."""
    memories_budget_tokens: int
    """What was left for memories: the window less the parts above, or the selective budget."""
    memories_tokens: int
    """What the memories section took (its open/close tags and every line, tag included)."""
    tag_tokens: int
    """Of ``memories_tokens``, those of the memories' tags (one each for the first 999)."""
    context_tokens: int
    """Exact tokens of ``context`` as returned."""
    history_messages: int
    """Recent messages in the history section."""
    history_messages_dropped: int
    """Oldest recent_messages left out so the fixed parts fit."""
    intent: str
    """Intent used for the scoring weights (classified in both modes)."""
    complexity: str
    tier: str | None
    multiplier: float
    encoding: str
    reasons: list[str]
    """How the budget was reached: selective mode's intent, complexity, tier and multiplier, and the
    model family's safety margin when its tokens are estimated."""
    model_family: str = "openai"
    """openai, claude, gemini, llama, mistral, qwen, or the encoding named by the request."""
    safety_factor: float = 1.0
    """The share of the request's window and reserve budgeted in ``encoding`` tokens (1: exact count);
    ``max_context_tokens`` and ``reserve_tokens`` above are already multiplied by it."""


class Branch(msgspec.Struct):
    outcome: Outcome
    ms: float
    detail: str | None = None
    count: int | None = None
    """Directive: 1/0; hot and cold: candidates returned."""
    source: str | None = None
    """Directive and hot: ``cache`` or ``postgres`` (directive also ``memory``: this instance's last copy
    stood in for a read that did not answer); cold: the search strategy used."""


class Branches(msgspec.Struct):
    directive: Branch
    hot: Branch
    cold: Branch


class Metrics(msgspec.Struct):
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
    """Time waiting to be admitted (``PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT``) before ``total_ms`` began."""
    deadline_ms: float = 0.0
    """The deadline this assembly ran under, from its admission: ``PGCONTEXT_DEADLINE_MS``, or what
    was left of the caller's (``X-Timeout-Ms``, ``X-Deadline-Ms``, ``timeout_ms``) up to
    ``PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS``."""


class AssembleResponse(msgspec.Struct):
    context: str
    refs: dict[str, UUID]
    """Tag -> memory id for every memory line in ``context`` (a model citing memory n: ``refs["n"]``)."""
    directive: DirectiveUsed | None
    memories_used: list[MemoryUsed]
    dropped: list[DroppedMemory]
    budget: BudgetOut
    degradation_level: Level
    """L0: hot and cold memories both usable; L1: one of them; L2: neither (directive and history only).
    The level counts the memory sources; what else is missing is in ``degradation_reasons``."""
    degradation_reasons: list[DegradationReason]
    """Everything this context lacks of what was planned, in this order (empty: complete):
    ``directive_missing`` (the agent's directive could not be read in time, so the context may lack
    its standing instructions: ``directive`` is null and ``branches.directive`` says why; an agent
    that has no directive is not missing one), ``directive_unconfirmed`` (the read did not answer in
    time and the copy this instance last read, at most ``PGCONTEXT_ASSEMBLY_DIRECTIVE_LAST_KNOWN_S``
    old, stands in: ``branches.directive.source`` is ``memory`` and its ``detail`` gives the age),
    ``hot_unavailable`` (the hot set could not be read),
    ``cold_unavailable`` (the cold search gave no answer), ``retrieval_reduced`` (the cold search
    ran less than planned: ``retrieval.reason``), ``history_turns_unread`` (the conversation's length
    was not read in time, so its last ``history_turns`` messages were not left out and may be packed
    again)."""
    sources_available: list[str]
    branches: Branches
    metrics: Metrics
    retrieval: RetrievalReport
    """The cold search planned vs what ran, and why (``reason``: ``planned``, ``light``,
    ``embedder_circuit_open``, ... see :class:`service.retrieval.types.RetrievalReport`)."""


class HotMemoryOut(msgspec.Struct):
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


class HotSetOut(msgspec.Struct):
    agent_id: str
    source: Literal["cache", "postgres"]
    built_at: datetime
    items: list[HotMemoryOut]


class FeedbackItem(msgspec.Struct, forbid_unknown_fields=True):
    id: UUID
    helpful: bool


class FeedbackIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Either ``items`` (each helpful or not) or ``memory_ids`` with one ``helpful`` for all."""

    items: list[FeedbackItem] | None = None
    memory_ids: list[UUID] | None = None
    helpful: bool | None = None


class FeedbackUpdated(msgspec.Struct):
    id: UUID
    usefulness: float
    feedback_count: int


class FeedbackOut(msgspec.Struct):
    updated: list[FeedbackUpdated]
    not_found: list[UUID]
    """Ids that are not memories of the caller's org (another org's ids look exactly like these)."""

"""What one search collects while it runs (:class:`SearchRun`), and how deep a hybrid search's branches rank."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID

import asyncpg

from service.retrieval import branches
from service.retrieval.types import MAX_CANDIDATES, ModeMetrics, RetrievalReason
from service.settings import RetrievalSettings


@dataclass(frozen=True, slots=True)
class StepTimeouts:
    """One search's own step deadlines (ms) instead of the engine's settings: context assembly sizes
    them to each assembly's cold budget, which a caller's deadline can lengthen."""

    lexical_ms: int
    embedding_ms: int
    semantic_ms: int


@dataclass(slots=True)
class SearchRun:
    """Timings and counts collected while one search runs."""

    started: float = field(default_factory=time.perf_counter)
    embedding_ms: float | None = None
    embedding_cached: bool | None = None
    lexical_ms: float | None = None
    semantic_ms: float | None = None
    lexical_candidates: int | None = None
    semantic_candidates: int | None = None
    fallbacks: list[str] = field(default_factory=list)
    modes: dict[str, ModeMetrics] = field(default_factory=dict)
    deadline: float | None = None
    """``time.perf_counter()`` after which no fallback work starts (the caller has stopped waiting)."""
    postings_per_term: int | None = None
    """Overrides the settings' BM25 postings per query term for this search (a lighter lexical query)."""
    rows_scope: branches.RowsScope | None = None
    """Branches also return the scoring fields (see
    :meth:`~service.retrieval.engine.RetrievalEngine.search_rows`); their rows are collected in ``rows`` by id."""
    rows: dict[UUID, asyncpg.Record] = field(default_factory=dict)
    semantic_query: str | None = None
    """The text the semantic branch of a hybrid search embedded when it was not the query (speakers' names
    left out, see :meth:`~service.retrieval.engine.RetrievalEngine._speaker_semantic`)."""
    fusion_reason: str | None = None
    """How hybrid fused its branches and why (``tuning.fusion`` ``auto``), appended to the response's reason."""
    reduction: RetrievalReason | None = None
    """The first reason the search ran less than planned (``retrieval.reason``; None: as planned)."""

    timeouts: StepTimeouts | None = None
    """This search's step deadlines (None: the engine's settings)."""

    def timeout_ms(self, step: Literal["lexical", "embedding", "semantic"], settings: RetrievalSettings) -> int:
        """The deadline of one step of this search."""
        if self.timeouts is not None:
            return int(getattr(self.timeouts, f"{step}_ms"))
        return int(getattr(settings, f"{step}_timeout_ms"))

    def left_ms(self, step: Literal["lexical", "embedding", "semantic"], settings: RetrievalSettings) -> int:
        """The step's deadline, cut to what is left of the search's own (a step that starts after
        another, like the vector query after the embedding, must not outlast the search)."""
        timeout = self.timeout_ms(step, settings)
        if self.deadline is None:
            return timeout
        return max(1, min(timeout, int((self.deadline - time.perf_counter()) * 1000)))

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() >= self.deadline

    def fell_back(self, note: str, reason: RetrievalReason) -> None:
        self.fallbacks.append(note)
        if self.reduction is None:
            self.reduction = reason


FUSION_DEPTH = 2
"""Hybrid search fuses at least this many times ``limit`` rows of each branch (``*_candidates`` is a
floor). Cut at ``limit``, each branch offers only rows it ranks that high, and a row that one branch
puts 150th and the other 60th can never make a fused top 100, though its two scores together may
well earn it a place; the dense branch's deeper rows carry most of that recall (SciFact train,
limit 100: semantic Recall@200 0.959 against 0.926 at 100; docs/retrieval.md "Decisions"). At
the default limit (10) the 50-row floor is deeper already, so nothing changes there. Context
assembly (:meth:`~service.retrieval.engine.RetrievalEngine.search_rows`) keeps
``max(candidates, limit)``: it sizes ``limit`` to its budget, re-ranks the candidates with its own
scores and packs the first few dozen, which a deeper tail does not change (LoCoMo, 60 vs 100 per
branch: the same evidence within the first 25), while a twice deeper HNSW walk would cost every
assembly."""


def fusion_depth(candidates: int, limit: int, run: SearchRun) -> int:
    """Rows one branch of a hybrid search ranks (see :data:`FUSION_DEPTH`)."""
    if run.rows_scope is not None:  # context assembly
        return max(candidates, limit)
    return min(MAX_CANDIDATES, max(candidates, FUSION_DEPTH * limit))


ASSEMBLY_SEMANTIC_FLOOR = 20
"""Fewest rows the semantic branch of an assembly's hybrid search ranks (:func:`semantic_depth`)."""


def semantic_depth(candidates: int, limit: int, run: SearchRun) -> int:
    """Rows the semantic branch of a hybrid search ranks: :func:`fusion_depth`, but for context
    assembly half of it (at least :data:`ASSEMBLY_SEMANTIC_FLOOR`). An assembly's HNSW walk passes over
    other agents' rows to find the agent's own and the org-wide ones, so each row it ranks costs more
    the more agents the org holds (at 100K memories over 20 agents: 7.3 ms of Postgres for 60 rows,
    3.7 ms for 30), and the deeper half moved no evidence (LoCoMo dev, 1,000 tokens: 0.8170 with 60,
    0.8189 and 0.8170 with 30): the lexical branch keeps the whole depth."""
    depth = fusion_depth(candidates, limit, run)
    return depth if run.rows_scope is None else max(ASSEMBLY_SEMANTIC_FLOOR, -(-depth // 2))

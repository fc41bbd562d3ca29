"""The assembly's answer: the response body from the ranked, packed context, and its log line."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

import structlog

from service.assembly.branches import BranchRun
from service.assembly.budget import Budget
from service.assembly.candidates import ColdResult
from service.assembly.hot import HotRead
from service.assembly.hot_scope import left_out
from service.assembly.intent import SelectiveBudget
from service.assembly.packing import PackResult
from service.assembly.scoring import LineSpan, ScoreBreakdown, ScoredCandidate
from service.assembly.types import (
    AssembleRequest,
    AssembleResponse,
    Branches,
    BudgetOut,
    DegradationReason,
    DirectiveUsed,
    DroppedMemory,
    LeftOut,
    Level,
    MemoryUsed,
    Metrics,
    Scores,
)
from service.directives.types import DirectiveOut
from service.retrieval.types import RetrievalReport
from service.text.model_families import ModelTokens
from service.text.tokens import TokenCounter
from service.timing import elapsed_ms

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class Ranked:
    """What ranking, packing and formatting made of the candidates (``Orchestrator._rank_pack_format``)."""

    scored: list[ScoredCandidate]
    result: PackResult
    budget: Budget
    context: str
    context_tokens: int
    ranking_ms: float
    packing_ms: float
    formatting_ms: float


def degradation_reasons(req: AssembleRequest, directive_run: BranchRun[Any], hot_run: BranchRun[HotRead],
                        cold_run: BranchRun[ColdResult], retrieval: RetrievalReport, *,
                        turns_unread: bool = False) -> list[DegradationReason]:
    """What the context lacks of what was planned (``AssembleResponse.degradation_reasons``)."""
    reasons: list[DegradationReason] = []
    if directive_run.outcome != "ok":
        reasons.append("directive_missing" if directive_run.value is None else "directive_unconfirmed")
    if hot_run.outcome != "ok" and left_out(req) is None:  # a hot set the request left out is not missing
        reasons.append("hot_unavailable")
    if cold_run.outcome != "ok":
        reasons.append("cold_unavailable")
    elif retrieval.reduced:
        reasons.append("retrieval_reduced")
    if turns_unread:
        reasons.append("history_turns_unread")
    return reasons


COMPLETED_NOTE: Final = ("the query leans on the conversation: searched after the names {names} of "
                         "recent_messages (retrieval.complete_from_history)")


def _lines(span: LineSpan | None) -> dict[str, Any]:
    """A document chunk's file and lines, as the response names them (nothing for other memories)."""
    return {} if span is None else {"path": span.path, "line_start": span.start, "line_end": span.end,
                                    "collection": span.collection}


def build_response(req: AssembleRequest, ranked: Ranked, directive: DirectiveOut | None, level: Level,
                   sources: list[str], directive_run: BranchRun[Any], hot_run: BranchRun[HotRead],
                   cold_run: BranchRun[ColdResult], budget_ms: float, started: float,
                   counting: tuple[TokenCounter, ModelTokens], sel: SelectiveBudget,
                   retrieval: RetrievalReport, in_history: LeftOut) -> AssembleResponse:
    """The response body: memories used and dropped (with their scores; ``in_history``: those left out
    before ranking, :mod:`service.assembly.history`), budget, branches, metrics. ``budget_ms``: the
    budget's calculation, all of it (before and after the branches)."""
    shaping = time.perf_counter()
    counter, model = counting
    margin = model.reason()
    b = ranked.budget
    chosen = ranked.result.chosen
    ids = [UUID(p.id) for p in chosen]
    hot_value, cold_value = hot_run.value, cold_run.value
    said = {} if cold_value is None else {r.id: r.message for r in cold_value.search.results if r.message}
    memories = [
        MemoryUsed(id=memory_id, tag=p.tag, text=p.candidate.text, tokens=p.tokens, origin=p.candidate.origin,
                   in_hot_and_cold=p.candidate.in_hot_and_cold, score=round(p.candidate.score, 4),
                   scores=_scores(p.scores),
                   justification=p.justification,
                   occurred_at=p.candidate.occurred_at or p.candidate.created_at, message=said.get(memory_id),
                   **_lines(p.candidate.lines))
        for memory_id, p in zip(ids, chosen, strict=True)
    ]
    offered = {c.candidate.id: c.candidate for c in ranked.scored}
    dropped = [DroppedMemory(id=UUID(d.id), reason=d.reason, detail=d.detail, tokens=d.tokens,
                             composite=round(d.scores.composite, 4), score=round(offered[d.id].score, 4),
                             message=said.get(UUID(d.id)), **_lines(offered[d.id].lines))
               for d in ranked.result.dropped]
    for gone in in_history.dropped:
        gone.message = said.get(gone.id)
    if req.explain:
        for out, d in zip(dropped, ranked.result.dropped, strict=True):
            out.text, out.origin, out.scores = offered[d.id].text, offered[d.id].origin, _scores(d.scores)
    budget = BudgetOut(
        mode=b.mode, max_context_tokens=b.total, directive_tokens=b.directive, history_tokens=b.history,
        reserve_tokens=b.reserve, overhead_tokens=b.overhead, memories_budget_tokens=b.memories_available,
        memories_tokens=b.memories_tokens, tag_tokens=ranked.result.tag_tokens,
        context_tokens=ranked.context_tokens, history_messages=b.history_messages,
        history_messages_dropped=b.history_dropped, intent=str(sel.intent), complexity=str(sel.complexity),
        tier=b.tier, multiplier=b.multiplier, encoding=counter.encoding_name,
        reasons=(list(sel.reasons) if req.selective else []) + [r for r in (b.cap_reason(), margin) if r],
        model_family=model.family, safety_factor=model.safety_factor,
    )
    branches = Branches(
        directive=directive_run.report(count=None if directive_run.value is None else int(directive is not None),
                                       source=None if directive_run.value is None else directive_run.value[1]),
        hot=hot_run.report(count=None if hot_value is None else len(hot_value.items),
                           source=None if hot_value is None else hot_value.source),
        cold=cold_run.report(count=None if cold_value is None else len(cold_value.candidates),
                             source=None if cold_value is None else cold_value.search.strategy),
    )
    if cold_value is not None:  # why this strategy (e.g. auto went lexical after an embedder failure)
        search = cold_value.search
        rerank = None if search.rerank is None else f"rerank {search.rerank.outcome}: {search.rerank.detail}"
        names = search.query.removesuffix(f" {req.query}")
        completed = None if search.query == req.query else COMPLETED_NOTE.format(names=repr(names))
        branches.cold.detail = "; ".join(filter(None, (search.reason, search.fallback_reason, rerank, completed)))
    formatting_ms = ranked.formatting_ms + elapsed_ms(shaping)
    metrics = Metrics(
        budget_calculation_ms=round(budget_ms, 3),
        directive_load_ms=directive_run.ms, hot_memory_retrieval_ms=hot_run.ms,
        cold_memory_retrieval_ms=cold_run.ms, ranking_ms=ranked.ranking_ms, packing_ms=ranked.packing_ms,
        formatting_ms=round(formatting_ms, 3), total_ms=elapsed_ms(started),
        candidates_evaluated=ranked.result.candidates_evaluated,
    )
    return AssembleResponse(
        context=ranked.context, refs={p.tag: memory_id for memory_id, p in zip(ids, chosen, strict=True)},
        directive=None if directive is None else DirectiveUsed(directive.content, directive.version,
                                                               directive.updated_at),
        memories_used=memories, dropped=in_history.dropped + dropped, budget=budget, degradation_level=level,
        degradation_reasons=degradation_reasons(req, directive_run, hot_run, cold_run, retrieval,
                                                turns_unread=in_history.turns_unread),
        sources_available=sources, branches=branches, metrics=metrics, retrieval=retrieval,
    )

def log_assembled(org_id: UUID, req: AssembleRequest, r: AssembleResponse) -> None:
    # Ids, levels and timings only: memory text and queries never reach the logs.
    log.info(
        "context_assembled", org_id=str(org_id), agent_id=req.agent_id, degradation_level=r.degradation_level,
        degradation_reasons=r.degradation_reasons, deadline_ms=r.metrics.deadline_ms,
        directive=r.branches.directive.outcome, hot=r.branches.hot.outcome, cold=r.branches.cold.outcome,
        cold_strategy=r.branches.cold.source, retrieval_planned=r.retrieval.planned,
        retrieval_ran=r.retrieval.ran, retrieval_reason=r.retrieval.reason, total_ms=r.metrics.total_ms,
        directive_ms=r.metrics.directive_load_ms, hot_ms=r.metrics.hot_memory_retrieval_ms,
        cold_ms=r.metrics.cold_memory_retrieval_ms, ranking_ms=r.metrics.ranking_ms,
        packing_ms=r.metrics.packing_ms, formatting_ms=r.metrics.formatting_ms,
        candidates=r.metrics.candidates_evaluated, tokens=r.budget.context_tokens, queued_ms=r.metrics.queued_ms,
        memory_ids=[str(m.id) for m in r.memories_used], dropped=len(r.dropped),
    )


def _scores(s: ScoreBreakdown) -> Scores:
    return Scores(relevance=round(s.relevance, 4), recency=round(s.recency, 4), usefulness=round(s.usefulness, 4),
                  informativeness=round(s.informativeness, 4), uniqueness=round(s.uniqueness, 4),
                  composite=round(s.composite, 4))

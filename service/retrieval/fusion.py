"""Turning branch hits into ranked results: z-score fusion, RRF, convex combination, or one branch as is.

Pure functions over in-memory lists (no I/O), so they are unit-tested without a database.

Why z-score fusion is the default (``auto``; measured in docs/retrieval.md "Decisions"): RRF throws the
scores away, so a weak branch's rank 1 counts as much as a strong branch's rank 1 — on conversations,
where the dense branch is weak, RRF scored below plain BM25. Min-max normalisation keeps the scores
but stretches every branch to [0, 1] whatever its shape, so a branch with no clear match still hands
its best candidate a full 1. Expressing each score in standard deviations of its own branch's
candidate scores for this query keeps that shape: a branch whose best hits stand far out of its
candidates counts for more on this query than one whose candidates all look alike. That is the
per-query confidence weighting, at the cost of a mean and a standard deviation per branch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from uuid import UUID

from service.retrieval.hits import Hit
from service.retrieval.score import hit_score
from service.retrieval.speakers import SpeakerBoost
from service.retrieval.types import ResultFusion, SearchResult


@dataclass(slots=True)
class _Entry:
    hit: Hit
    lexical_rank: int | None = None
    semantic_rank: int | None = None
    lexical_score: float | None = None
    semantic_score: float | None = None


def _merge(lexical: Sequence[Hit], semantic: Sequence[Hit]) -> dict[UUID, _Entry]:
    entries: dict[UUID, _Entry] = {}
    for rank, hit in enumerate(lexical, start=1):
        entry = entries.setdefault(hit.id, _Entry(hit))
        if entry.lexical_rank is None:  # a branch lists an id once; keep its best rank if not
            entry.lexical_rank, entry.lexical_score = rank, hit.score
    for rank, hit in enumerate(semantic, start=1):
        entry = entries.setdefault(hit.id, _Entry(hit))
        if entry.semantic_rank is None:
            entry.semantic_rank, entry.semantic_score = rank, hit.score if math.isfinite(hit.score) else 0.0
    return entries


_UNRANKED: Final = 1 << 30


def _best_rank(entry: _Entry) -> int:
    lexical, semantic = entry.lexical_rank or _UNRANKED, entry.semantic_rank or _UNRANKED
    return lexical if lexical < semantic else semantic


def _ranked(entries: dict[UUID, _Entry], scores: dict[UUID, float], method: ResultFusion,
            limit: int) -> list[SearchResult]:
    # Ties (common in RRF: rank 3 lexical-only vs rank 3 semantic-only) break by best rank, then id
    # (its 128-bit value: the order of its text, without formatting one per candidate), so the order
    # is deterministic.
    scores = {i: s if math.isfinite(s) else 0.0 for i, s in scores.items()}  # never a NaN -> null score
    order = sorted(entries, key=lambda i: (-scores[i], _best_rank(entries[i]), i.int))[:limit]
    return [_result(entries[i], scores[i], method) for i in order]


def _result(entry: _Entry, score: float, method: ResultFusion) -> SearchResult:
    hit = entry.hit
    start, end = hit.lines
    return SearchResult(
        id=hit.id, text=hit.text, kind=hit.kind, source=hit.source, level=hit.level, breadcrumb=hit.breadcrumb,
        score=hit_score(entry.lexical_score, entry.semantic_score),
        final_score=score, lexical_rank=entry.lexical_rank, semantic_rank=entry.semantic_rank,
        lexical_score=entry.lexical_score, semantic_score=entry.semantic_score, fusion_method=method,
        agent_id=hit.agent_id, metadata=hit.metadata, occurred_at=hit.occurred_at, message=hit.message,
        current=hit.current, superseded_by=hit.superseded_by, valid_until=hit.valid_until,
        path=None if start is None else hit.source, line_start=start, line_end=end,
    )


def rrf(lexical: Sequence[Hit], semantic: Sequence[Hit], *, k: int, limit: int) -> list[SearchResult]:
    """Reciprocal Rank Fusion: sum over branches of 1 / (k + rank), ranks starting at 1."""
    entries = _merge(lexical, semantic)
    scores = {
        i: sum(1.0 / (k + r) for r in (e.lexical_rank, e.semantic_rank) if r is not None)
        for i, e in entries.items()
    }
    return _ranked(entries, scores, "rrf", limit)


def _min_max(values: list[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    return low, (high - low) or 1.0


def convex(lexical: Sequence[Hit], semantic: Sequence[Hit], *, alpha: float, limit: int) -> list[SearchResult]:
    """alpha * semantic + (1 - alpha) * lexical, each min-max normalised over its branch's candidates.

    BM25 scores are unbounded and cosine similarities are not, so raw scores cannot be added; a row a
    branch did not return contributes 0 from that branch (it scored below that branch's cut-off).
    """
    entries = _merge(lexical, semantic)
    lex_low, lex_span = _min_max([h.score for h in lexical]) if lexical else (0.0, 1.0)
    sem_low, sem_span = _min_max([h.score for h in semantic]) if semantic else (0.0, 1.0)
    scores: dict[UUID, float] = {}
    for i, e in entries.items():
        lex = 0.0 if e.lexical_score is None else (e.lexical_score - lex_low) / lex_span
        sem = 0.0 if e.semantic_score is None else (e.semantic_score - sem_low) / sem_span
        scores[i] = alpha * sem + (1.0 - alpha) * lex
    return _ranked(entries, scores, "convex", limit)


ZSCORE_SEMANTIC_WEIGHT: Final = 0.4
"""``auto``'s weight of the semantic branch's z-scores (0.6 to lexical). BM25 was the stronger branch
on both SciFact and conversations; of 0.3-0.6, 0.4 scored best on both (docs/retrieval.md "Decisions")."""
NEIGHBOUR_WEIGHT: Final = 0.15
"""``auto``: share of the better of a message's two neighbours' fused scores added to its own (a
window of three turns scored at query time; docs/retrieval.md "Decisions")."""
MIN_CANDIDATES_TO_NORMALISE: Final = 5
"""Below this many candidates a branch's mean and standard deviation are noise: ``auto`` uses RRF."""


@dataclass(frozen=True, slots=True)
class _Spread:
    low: float
    mean: float
    std: float

    @classmethod
    def of(cls, hits: Sequence[Hit]) -> _Spread:
        values = [h.score for h in hits]
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        return cls(min(values), mean, std)

    def above_low(self, score: float | None) -> float:
        """Standard deviations above the weakest candidate (0 for a row the branch did not return)."""
        return 0.0 if score is None else (score - self.low) / self.std

    def top_z(self, hits: Sequence[Hit]) -> float:
        return (hits[0].score - self.mean) / self.std


def zscore(lexical: Sequence[Hit], semantic: Sequence[Hit], *, semantic_weight: float,
           limit: int) -> list[SearchResult]:
    """``w * z_semantic + (1 - w) * z_lexical``, each branch's scores standardised over its own candidates.

    A score counts as standard deviations above its branch's weakest candidate, ``(s - min) / std``:
    the same order as plain z-scores with a missing row given the branch's minimum (it ranked below
    every returned candidate), but never negative, so the final scores stay usable as relevances.
    Raises ValueError when a branch has fewer than :data:`MIN_CANDIDATES_TO_NORMALISE` candidates or
    all with one score (:func:`auto` then uses RRF).
    """
    lex, sem = _spread_or_problem("lexical", lexical), _spread_or_problem("semantic", semantic)
    if isinstance(lex, str) or isinstance(sem, str):
        raise ValueError(lex if isinstance(lex, str) else sem)
    entries = _merge(lexical, semantic)
    return _ranked(entries, _zscores(entries, lex, sem, semantic_weight), "zscore", limit)


def _zscores(entries: dict[UUID, _Entry], lex: _Spread, sem: _Spread, semantic_weight: float) -> dict[UUID, float]:
    return {i: (1.0 - semantic_weight) * lex.above_low(e.lexical_score)
            + semantic_weight * sem.above_low(e.semantic_score) for i, e in entries.items()}


def _spread_or_problem(name: str, hits: Sequence[Hit]) -> _Spread | str:
    if len(hits) < MIN_CANDIDATES_TO_NORMALISE:
        return f"the {name} branch returned {len(hits)} candidates (z-scores need {MIN_CANDIDATES_TO_NORMALISE})"
    spread = _Spread.of(hits)
    return spread if spread.std > 0.0 else f"the {name} branch scored all {len(hits)} candidates alike"


def auto(lexical: Sequence[Hit], semantic: Sequence[Hit], *, rrf_k: int, limit: int,
         query: str = "", speaker: SpeakerBoost | None = None) -> tuple[list[SearchResult], str]:
    """The default fusion and why: z-score fusion (:func:`zscore`, semantic weight
    :data:`ZSCORE_SEMANTIC_WEIGHT`) when both branches returned enough distinct scores to estimate
    their spread, else RRF (ranks need no spread). The reason names the choice and, for z-scores,
    how far each branch's best hit stands out of its candidates (its per-query say in the fusion).
    With ``speaker``, the candidates whose speaker ``query`` names get its boost, and when ``query``
    speaks in the first person (or the second) the messages of other roles than its asker's (or the
    other side's) lose it once their neighbours' support is counted (an assistant's question still
    lends its support to the answer after it). Z-scores only: a rank has no unit to add it in. The
    reason says how many."""
    lex, sem = _spread_or_problem("lexical", lexical), _spread_or_problem("semantic", semantic)
    if isinstance(lex, str) or isinstance(sem, str):
        problem = lex if isinstance(lex, str) else sem
        return rrf(lexical, semantic, k=rrf_k, limit=limit), f"fusion rrf (k {rrf_k}): {problem}"
    boosted = speaker.named(query, [*lexical, *semantic]) if speaker is not None else set()
    entries = _merge(lexical, semantic)
    scores = _zscores(entries, lex, sem, ZSCORE_SEMANTIC_WEIGHT)
    reason = (f"fusion zscore (semantic weight {ZSCORE_SEMANTIC_WEIGHT}): best hit "
              f"{lex.top_z(lexical):.1f} sd above the lexical candidates' mean, "
              f"{sem.top_z(semantic):.1f} sd above the semantic ones'")
    if boosted:
        assert speaker is not None
        for i in boosted:
            scores[i] += speaker.boost
        reason += (f"; {len(boosted)} candidates said by someone the query names "
                   f"(speaker or metadata.{speaker.key}) +{speaker.boost:g} sd")
    supported = with_neighbours(entries, scores, NEIGHBOUR_WEIGHT)
    if supported:
        reason += f"; {supported} messages +{NEIGHBOUR_WEIGHT:g} of their best neighbour's score"
    lowered = speaker.not_asked_about(query, [*lexical, *semantic]) if speaker is not None else None
    if lowered is not None and lowered[2]:
        assert speaker is not None
        person, role, others = lowered
        for i in others:
            scores[i] -= speaker.boost
        reason += (f"; asked in the {person} person: {len(others)} messages of other roles than "
                   f"{role} -{speaker.boost:g} sd")
    return _ranked(entries, scores, "zscore", limit), reason


def with_neighbours(entries: dict[UUID, _Entry], scores: dict[UUID, float], weight: float) -> int:
    """Add to each conversation message's score ``weight`` times the better of its neighbours' scores
    (the turns right before and after it in the same conversation and session, when they are
    candidates too); returns how many messages gained. The neighbours' scores are taken before any
    is raised, so support does not travel further than one turn. Other memories are untouched."""
    if weight <= 0.0:
        return 0
    messages = [(i, m, scores[i]) for i, e in entries.items() if (m := e.hit.message) is not None]
    if len(messages) < 2:
        return 0
    place = {(m.conversation_id, m.session_id, m.position): score for _, m, score in messages}
    gained = 0
    for i, m, _ in messages:
        before = place.get((m.conversation_id, m.session_id, m.position - 1))
        after = place.get((m.conversation_id, m.session_id, m.position + 1))
        best = after if before is None or (after is not None and after > before) else before
        if best is not None and best > 0.0:
            scores[i] += weight * best
            gained += 1
    return gained


def single(hits: Sequence[Hit], *, branch: str, method: ResultFusion, limit: int) -> list[SearchResult]:
    """One branch's hits as results, its own score as the final score (lexical/semantic/cascade)."""
    lexical = hits if branch == "lexical" else ()
    semantic = hits if branch == "semantic" else ()
    entries = _merge(lexical, semantic)
    scores = {h.id: h.score for h in reversed(hits)}
    return _ranked(entries, scores, method, limit)


def cascade(lexical: Sequence[Hit], by_vector: Sequence[Hit], *, limit: int) -> list[SearchResult]:
    """lexical_first: rows ordered by exact vector similarity, keeping their lexical rank and score."""
    entries = _merge(lexical, by_vector)
    scores = {h.id: h.score for h in by_vector}
    kept = {i: entries[i] for i in scores}
    return _ranked(kept, scores, "cascade", limit)

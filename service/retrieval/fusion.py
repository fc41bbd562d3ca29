"""Turning branch hits into ranked results: RRF, convex combination, or one branch as is.

Pure functions over in-memory lists (no I/O), so they are unit-tested without a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from service.retrieval.hits import Hit
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
            entry.semantic_rank, entry.semantic_score = rank, hit.score
    return entries


def _best_rank(entry: _Entry) -> int:
    return min(r for r in (entry.lexical_rank, entry.semantic_rank, 1 << 30) if r is not None)


def _ranked(entries: dict[UUID, _Entry], scores: dict[UUID, float], method: ResultFusion,
            limit: int) -> list[SearchResult]:
    # Ties (common in RRF: rank 3 lexical-only vs rank 3 semantic-only) break by best rank, then id,
    # so the order is deterministic.
    order = sorted(entries, key=lambda i: (-scores[i], _best_rank(entries[i]), str(i)))[:limit]
    return [_result(entries[i], scores[i], method) for i in order]


def _result(entry: _Entry, score: float, method: ResultFusion) -> SearchResult:
    hit = entry.hit
    return SearchResult(
        id=hit.id, text=hit.text, kind=hit.kind, source=hit.source, level=hit.level, breadcrumb=hit.breadcrumb,
        final_score=score, lexical_rank=entry.lexical_rank, semantic_rank=entry.semantic_rank,
        lexical_score=entry.lexical_score, semantic_score=entry.semantic_score, fusion_method=method,
        agent_id=hit.agent_id, metadata=hit.metadata, occurred_at=hit.occurred_at,
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

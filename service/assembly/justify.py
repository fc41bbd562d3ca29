"""The one-line justification of a packed or dropped memory: the factors that weighed most, with numbers."""

from __future__ import annotations

from service.assembly.redundancy import Overlap, overlap_of
from service.assembly.scoring import ScoreBreakdown, ScoredCandidate, Weights, clamp


def humanize_hours(hours: float) -> str:
    if hours < 1:
        return f"{max(1, round(hours * 60))}m"
    if hours < 48:
        return f"{round(hours)}h"
    if hours < 24 * 60:
        return f"{round(hours / 24)}d"
    return f"{round(hours / (24 * 30))}mo"


_RELEVANCE, _RECENCY, _USEFULNESS, _INFORMATIVE, _OVERLAP = range(5)
"""The factors :func:`justify` can name, in its tie-breaking order."""


def _factor_text(factor: int, item: ScoredCandidate, scores: ScoreBreakdown, overlap: Overlap | None) -> str:
    cand = item.candidate
    if factor == _RELEVANCE:
        where = cand.origin if not cand.in_hot_and_cold else "hot+cold"
        rel_note = f"rank {cand.rank} {where}" if cand.rank is not None else where
        return f"relevance {scores.relevance:.2f} ({rel_note})"
    if factor == _RECENCY:
        if item.recency_from_access and item.access_age_hours is not None:
            recency_note = f"accessed {humanize_hours(item.access_age_hours)} ago"
        else:
            recency_note = f"{humanize_hours(item.age_hours)} old"
        recent = "recent" if scores.recency >= 0.5 else "recency"
        return f"{recent} {scores.recency:.2f} ({recency_note})"
    if factor == _USEFULNESS:
        if cand.usefulness > 0.05:
            useful_note = f"helpful feedback {cand.usefulness:+.1f}"
        elif cand.usefulness < -0.05:
            useful_note = f"unhelpful feedback {cand.usefulness:+.1f}"
        else:
            useful_note = f"importance {clamp(cand.importance, 0.0, 1.0):.2f}"
        return f"usefulness {scores.usefulness:.2f} ({useful_note})"
    if factor == _INFORMATIVE:
        return f"informative {scores.informativeness:.2f} ({item.content_terms} terms/{item.text_tokens} tokens)"
    assert overlap is not None, "the overlap is named only when there is one"
    return str(overlap)


def justify(
    item: ScoredCandidate,
    scores: ScoreBreakdown,
    weights: Weights,
    *,
    similar_to: str | None = None,
    top: int = 3,
) -> str:
    """One line: the ``top`` factors that contributed most to the composite, with numbers, plus
    whatever is notable regardless of size (pinned, clear feedback, overlap with a chosen item,
    ``similar_to`` its tag: see :func:`~service.assembly.redundancy.overlap_of`).
    """
    contributions = [
        weights.relevance * scores.relevance,
        weights.recency * scores.recency,
        weights.usefulness * scores.usefulness,
        weights.informativeness * scores.informativeness,
    ]
    overlap = overlap_of(scores.uniqueness, similar_to)
    if overlap is not None:
        contributions.append(weights.uniqueness * scores.uniqueness)
    # Largest contribution first; equal ones keep the order above (the sort is stable).
    ranked = sorted(range(len(contributions)), key=contributions.__getitem__, reverse=True)
    named = ranked[:top]
    if abs(item.candidate.usefulness) >= 0.3 and _USEFULNESS in ranked[top:]:
        named.append(_USEFULNESS)  # clear feedback is always named
    if overlap is not None and overlap.notable and _OVERLAP not in ranked[:top]:
        named.append(_OVERLAP)
    parts = [_factor_text(f, item, scores, overlap) for f in named]
    if item.candidate.pinned:
        parts.insert(0, "pinned")
    return f"score {scores.composite:.2f}: " + ", ".join(parts)

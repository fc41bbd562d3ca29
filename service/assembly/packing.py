"""Greedy MMR packing of scored memories into a token budget, never over it.

Each step takes the candidate with the highest composite score, where uniqueness is recomputed
against everything chosen so far (so composites only fall as the context fills). Pinned
candidates go first. A candidate then ends in exactly one place:

* ``chosen`` — it fits: its exact memory-line tokens (plus, for the first one, the memories
  section's open/close tags) are within what is left of the budget;
* dropped ``empty`` — nothing but whitespace;
* dropped ``duplicate`` — similarity to a chosen item above ``duplicate_cosine`` (embeddings)
  or ``duplicate_jaccard`` (word features), decided as soon as that item is chosen;
* dropped ``below_threshold`` — its composite is, or after overlaps with chosen items fell, under
  ``min_composite`` (pinned candidates are exempt);
* dropped ``over_budget`` — it does not fit what is left; packing goes on with smaller ones.

Each candidate is reported once, with the first reason found: duplicates are found when their twin
is chosen, so an item dropped earlier keeps its earlier reason; an item both under the bar and too
big is ``below_threshold``, as it would not have been chosen with room to spare either.

``PackResult.tokens_used`` is exactly ``count(format_memories(chosen))`` (see
:mod:`service.assembly.format` for why the counts add up).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from service.assembly.format import memories_section_overhead
from service.assembly.intent import Intent
from service.assembly.scoring import (
    DEFAULT_SCORING_RULES,
    Candidate,
    ScoreBreakdown,
    ScoredCandidate,
    ScoringRules,
    Weights,
    feature_hashes,
    justify,
    score_candidates,
)
from service.tokens import TokenCounter

DropReason = Literal["empty", "duplicate", "below_threshold", "over_budget"]


@dataclass(frozen=True, slots=True)
class PackingRules:
    min_composite: float = 0.2
    duplicate_cosine: float = 0.92
    duplicate_jaccard: float = 0.85

    def __post_init__(self) -> None:
        if not (0.0 < self.duplicate_cosine <= 1.0 and 0.0 < self.duplicate_jaccard <= 1.0):
            raise ValueError("duplicate thresholds must be in (0, 1]")


DEFAULT_PACKING_RULES: Final = PackingRules()


@dataclass(frozen=True, slots=True, eq=False)
class PackedItem:
    candidate: Candidate
    tag: str
    formatted: str
    """The memory line exactly as it appears in the memories section."""
    tokens: int
    scores: ScoreBreakdown
    """Uniqueness and composite as they stood when the item was chosen."""
    justification: str

    @property
    def id(self) -> str:
        return self.candidate.id


@dataclass(frozen=True, slots=True)
class Dropped:
    id: str
    reason: DropReason
    detail: str
    tokens: int
    scores: ScoreBreakdown


@dataclass(frozen=True, slots=True)
class PackResult:
    chosen: tuple[PackedItem, ...]
    dropped: tuple[Dropped, ...]
    tokens_used: int
    """Tokens of the memories section as formatted: tags plus every chosen line (0 if none)."""
    budget_tokens: int
    section_overhead: int
    """Tokens of the section's open/close tags, included in ``tokens_used`` when anything is chosen."""
    candidates_evaluated: int


class _WordIndex:
    """Exact Jaccard similarity of one candidate against many, vectorised.

    Each candidate's word features (:func:`~service.assembly.scoring.feature_hashes`) are laid out
    CSR-style, so one comparison is a mask lookup and a bincount instead of a set operation per
    pair. Feature hashes only need to agree within this process; a 64-bit collision costs at
    most one feature's worth of similarity.
    """

    def __init__(self, scored: Sequence[ScoredCandidate]) -> None:
        per_item = [feature_hashes(s.candidate.text) for s in scored]
        self.n = len(scored)
        self.sizes = np.array([h.size for h in per_item], dtype=np.int64)
        flat = np.concatenate(per_item) if per_item else np.zeros(0, dtype=np.int64)
        vocabulary, self.columns = np.unique(flat, return_inverse=True)
        self.vocabulary_size = vocabulary.size
        self.rows = np.repeat(np.arange(self.n), self.sizes)
        self.starts = np.concatenate(([0], np.cumsum(self.sizes)))
        # Texts without features (a lone stopword, only punctuation) match only their equals.
        self.bare = {i: s.candidate.text.strip().casefold() for i, s in enumerate(scored) if self.sizes[i] == 0}

    def similarity(self, chosen: int, targets: NDArray[np.int64]) -> NDArray[np.float64]:
        mark = np.zeros(self.vocabulary_size, dtype=bool)
        mark[self.columns[self.starts[chosen] : self.starts[chosen + 1]]] = True
        shared = np.bincount(self.rows[mark[self.columns]], minlength=self.n)[targets]
        union = self.sizes[targets] + self.sizes[chosen] - shared
        sims = np.zeros(targets.size, dtype=np.float64)
        np.divide(shared, union, out=sims, where=union > 0)
        if self.bare:
            chosen_bare = self.bare.get(chosen)
            for pos, k in enumerate(targets.tolist()):
                if chosen_bare is not None or k in self.bare:
                    sims[pos] = 1.0 if chosen_bare is not None and self.bare.get(k) == chosen_bare else 0.0
        return sims


class _Selection:
    """Mutable state of one packing run: who is still in play and how similar to the chosen."""

    def __init__(self, scored: Sequence[ScoredCandidate], weights: Weights, rules: PackingRules) -> None:
        n = len(scored)
        self.scored = scored
        self.weights = weights
        self.rules = rules
        self.static = np.array([s.scores.composite - weights.uniqueness for s in scored], dtype=np.float64)
        self.tokens = np.array([s.tokens for s in scored], dtype=np.int64)
        self.pinned = np.array([s.candidate.pinned for s in scored], dtype=bool)
        self.alive = np.ones(n, dtype=bool)
        self.max_sim = np.zeros(n, dtype=np.float64)
        self.similar_to = np.full(n, -1, dtype=np.int64)
        self.dropped: list[Dropped] = []
        self._words: _WordIndex | None = None
        self.has_embedding = np.array([s.unit_embedding is not None for s in scored], dtype=bool)
        self.embeddings: NDArray[np.float32] | None = None
        dims = {s.unit_embedding.shape[0] for s in scored if s.unit_embedding is not None}
        if len(dims) == 1:
            self.embeddings = np.zeros((n, dims.pop()), dtype=np.float32)
            for i, s in enumerate(scored):
                if s.unit_embedding is not None:
                    self.embeddings[i] = s.unit_embedding
        else:
            # Mixed dimensions cannot be compared by cosine; words decide for all of them.
            self.has_embedding[:] = False

    def current(self) -> NDArray[np.float64]:
        return self.static + self.weights.uniqueness * (1.0 - self.max_sim)

    def scores_of(self, i: int) -> ScoreBreakdown:
        return self.scored[i].scores.with_uniqueness(1.0 - float(self.max_sim[i]), self.weights)

    def nearest_tag(self, i: int) -> str | None:
        j = int(self.similar_to[i])
        return self.scored[j].tag if j >= 0 else None

    def drop(self, i: int, reason: DropReason, detail: str) -> None:
        self.alive[i] = False
        item = self.scored[i]
        self.dropped.append(Dropped(item.id, reason, detail, item.tokens, self.scores_of(i)))

    def absorb(self, chosen: int) -> None:
        """Raise every alive candidate's max similarity with the newly chosen one; drop duplicates."""
        self.alive[chosen] = False
        targets = np.flatnonzero(self.alive)
        if targets.size == 0:
            return
        sims = np.zeros(targets.size, dtype=np.float64)
        thresholds = np.full(targets.size, self.rules.duplicate_jaccard, dtype=np.float64)
        by_words = np.ones(targets.size, dtype=bool)
        if self.embeddings is not None and self.has_embedding[chosen]:
            by_cosine = self.has_embedding[targets]
            # Against all rows, then indexed: cheaper than gathering the target rows first.
            sims[by_cosine] = (self.embeddings @ self.embeddings[chosen])[targets[by_cosine]]
            thresholds[by_cosine] = self.rules.duplicate_cosine
            by_words = ~by_cosine
        if by_words.any():
            if self._words is None:
                # Word features cost more than the whole cosine path, so only built when needed.
                self._words = _WordIndex(self.scored)
            sims[by_words] = self._words.similarity(chosen, targets[by_words])
        np.clip(sims, 0.0, 1.0, out=sims)
        closer = sims > self.max_sim[targets]
        self.max_sim[targets[closer]] = sims[closer]
        self.similar_to[targets[closer]] = chosen
        base_item = self.scored[chosen]
        for pos in np.flatnonzero(sims > thresholds).tolist():
            self.drop(
                int(targets[pos]),
                "duplicate",
                f"similarity {sims[pos]:.2f} to [{base_item.tag}] ({base_item.id})",
            )


def _best_first(mask: NDArray[np.bool_], current: NDArray[np.float64]) -> list[int]:
    return sorted(np.flatnonzero(mask).tolist(), key=lambda k: -current[k])


def pack(
    scored: Sequence[ScoredCandidate],
    *,
    budget_tokens: int,
    intent: Intent,
    counter: TokenCounter,
    rules: PackingRules = DEFAULT_PACKING_RULES,
    scoring: ScoringRules = DEFAULT_SCORING_RULES,
) -> PackResult:
    """Choose from ``scored`` (as returned by :func:`score_candidates`) within ``budget_tokens``."""
    weights = scoring.weights[intent]
    overhead = memories_section_overhead(counter)
    budget_tokens = max(0, budget_tokens)
    state = _Selection(scored, weights, rules)
    chosen: list[PackedItem] = []
    for i, s in enumerate(scored):
        if not s.candidate.text.strip():
            state.drop(i, "empty", "no text")

    left = budget_tokens
    while state.alive.any():
        current = state.current()
        # Composites only fall and the budget only shrinks, so whatever fails either test now
        # would fail it at every later step: drop it all at once, best first. The loop then runs
        # once per chosen item rather than once per candidate.
        low = state.alive & ~state.pinned & (current < rules.min_composite)
        for k in _best_first(low, current):
            state.drop(k, "below_threshold", f"composite {current[k]:.2f} < {rules.min_composite:.2f}")
        cost = state.tokens + (overhead if not chosen else 0)
        for k in _best_first(state.alive & (cost > left), current):
            state.drop(k, "over_budget", f"needs {int(cost[k])} tokens, {left} left")
        if not state.alive.any():
            break
        # Pinned first, then by composite; argmax keeps the first of equals, i.e. score order.
        priority = np.where(state.alive, current + np.where(state.pinned, 10.0, 0.0), -np.inf)
        i = int(np.argmax(priority))
        left -= int(cost[i])
        item = scored[i]
        scores = state.scores_of(i)
        why = justify(item, scores, weights, similar_to=state.nearest_tag(i))
        chosen.append(PackedItem(item.candidate, item.tag, item.formatted, item.tokens, scores, why))
        state.absorb(i)

    used = sum(p.tokens for p in chosen) + (overhead if chosen else 0)
    return PackResult(tuple(chosen), tuple(state.dropped), used, budget_tokens, overhead, len(scored))


def select_memories(
    candidates: Iterable[Candidate],
    *,
    budget_tokens: int,
    intent: Intent,
    counter: TokenCounter,
    now: datetime | None = None,
    scoring: ScoringRules = DEFAULT_SCORING_RULES,
    rules: PackingRules = DEFAULT_PACKING_RULES,
) -> PackResult:
    """:func:`score_candidates` then :func:`pack`, for callers that do not time them separately."""
    scored = score_candidates(candidates, intent=intent, counter=counter, now=now, rules=scoring)
    return pack(scored, budget_tokens=budget_tokens, intent=intent, counter=counter, rules=rules, scoring=scoring)

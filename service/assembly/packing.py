"""Greedy MMR packing of scored memories into a token budget, never over it.

Each step takes the candidate with the highest composite score, where uniqueness is recomputed
against everything chosen so far (so composites only fall as the context fills; similarity,
uniqueness and duplicates are :mod:`service.assembly.redundancy`'s). Pinned candidates go first. A
candidate then ends in exactly one place:

* ``chosen`` — it fits: its exact memory-line tokens (its body plus the tag n it gets as the
  n-th chosen, plus, for the first one, the memories section's open/close tags) are within what is
  left of the budget;
* dropped ``empty`` — nothing but whitespace;
* dropped ``duplicate`` — similarity to a chosen item above ``duplicate_cosine`` (embeddings)
  or ``duplicate_jaccard`` (word features), decided as soon as that item is chosen;
* dropped ``below_threshold`` — its composite is, or after overlaps with chosen items fell, under
  ``min_composite`` (pinned candidates are exempt);
* dropped ``over_budget`` — it does not fit what is left; packing goes on with smaller ones;
* dropped ``nested`` — a document chunk whose lines overlap those of a chosen chunk of the same
  file: a file summary (L0), a section (L1) and a chunk (L2) cover the same lines, and each line
  is packed once. When the best candidate is a chunk that contains other candidates of its file
  (a section and chunks inside it), the most specific of those that match the query themselves
  (relevance at least :data:`MATCH_SHARE` of the container's) goes in instead — the highest level,
  then the fewest lines, then the best composite (everything still in play fits, see below) — so
  the context holds the lines that matched, not the file around them, and never an unrelated chunk
  of the file (a neighbour the search returned on weak similarity) in place of the one that matched.

Each candidate is reported once, with the first reason found: duplicates are found when their twin
is chosen, so an item dropped earlier keeps its earlier reason; an item both under the bar and too
big is ``below_threshold``, as it would not have been chosen with room to spare either.

Tags are positions: the n-th chosen item's line opens with n (:func:`~service.assembly.format.memory_tag`).
A tag's cost never falls as n grows, so the room a candidate needs only grows from step to step,
which keeps "over budget now" meaning "over budget for good".

``PackResult.tokens_used`` is exactly ``count(format_memories(chosen))`` (see
:mod:`service.assembly.format` for why the counts add up).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from service.assembly.format import memories_section_overhead, memory_tag
from service.assembly.intent import Intent
from service.assembly.justify import justify
from service.assembly.redundancy import Uniqueness, duplicate_detail
from service.assembly.scoring import (
    DEFAULT_SCORING_RULES,
    Candidate,
    ScoreBreakdown,
    ScoredCandidate,
    ScoringRules,
    Weights,
    score_candidates,
)
from service.text.tokens import TokenCounter

DropReason = Literal["empty", "duplicate", "below_threshold", "over_budget", "nested"]
MATCH_SHARE: Final = 0.5
"""A chunk inside the best candidate takes its place only with at least this share of its relevance:
one that matches the query itself, not merely a part of the same file."""


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
    """Its number in the memories section, which opens its line."""
    formatted: str
    """The memory line exactly as it appears in the memories section."""
    tokens: int
    """Exact tokens of ``formatted``, tag included."""
    tag_tokens: int
    """Of ``tokens``, those of the tag."""
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
    """Tokens of its memory line without the tag."""
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

    @property
    def refs(self) -> dict[str, str]:
        """Tag -> memory id, in packing order."""
        return {p.tag: p.id for p in self.chosen}

    @property
    def tag_tokens(self) -> int:
        """Tokens spent on tags (part of ``tokens_used``)."""
        return sum(p.tag_tokens for p in self.chosen)


class _Selection:
    """Mutable state of one packing run: who is still in play, in which order, and where each went
    (uniqueness against the chosen items is :class:`~service.assembly.redundancy.Uniqueness`'s)."""

    def __init__(self, scored: Sequence[ScoredCandidate], weights: Weights, rules: PackingRules) -> None:
        n = len(scored)
        self.scored = scored
        self.weights = weights
        self.unique = Uniqueness([s.candidate.text for s in scored], [s.unit_embedding for s in scored],
                                 [s.scores.composite for s in scored], weight=weights.uniqueness,
                                 duplicate_cosine=rules.duplicate_cosine, duplicate_jaccard=rules.duplicate_jaccard)
        self.current = self.unique.current
        """Composites as they stand, which only fall as items are chosen."""
        self.bonus = [10.0 if s.candidate.pinned else 0.0 for s in scored]
        self.priority = [c + b for c, b in zip(self.current, self.bonus, strict=True)]
        """Pinned first, then by composite."""
        self.tokens = [s.tokens for s in scored]
        self.pinned = [s.candidate.pinned for s in scored]
        self.tags: dict[int, str] = {}
        """Tag of each chosen item, by index."""
        self.lines = [s.candidate.lines for s in scored]
        self.relevance = [s.scores.relevance for s in scored]
        self.same_file: dict[tuple[str | None, str], list[int]] = {}
        """Document chunks by file, its collection and path (only files with more than one chunk in play
        matter)."""
        for i, span in enumerate(self.lines):
            if span is not None:
                self.same_file.setdefault(span.file, []).append(i)
        self.alive = [True] * n
        self.live = list(range(n))
        """The alive indices, in order."""
        self.fell = list(range(n))
        """Items whose composite fell since the last :meth:`take_fallen` (in order; some may have
        died since); at first, all of them."""
        self.dropped: list[Dropped] = []

    def take_fallen(self) -> list[int]:
        fell, self.fell = self.fell, []
        return fell

    def scores_of(self, i: int) -> ScoreBreakdown:
        return self.scored[i].scores.with_uniqueness(self.unique.uniqueness(i), self.weights)

    def nearest_tag(self, i: int) -> str | None:
        j = self.unique.nearest(i)
        return None if j is None else self.tags.get(j)

    def drop(self, i: int, reason: DropReason, detail: str) -> None:
        self.alive[i] = False
        self.live.remove(i)
        item = self.scored[i]
        self.dropped.append(Dropped(item.id, reason, detail, item.tokens, self.scores_of(i)))

    def best(self) -> int:
        """The next to choose: pinned first, then by composite; the first of equals (score order).
        A chunk that contains other chunks still in play gives way to the most specific of those that
        match the query themselves (see :data:`MATCH_SHARE`): the fewest lines, then the finest level
        (a file's one chunk of all its lines does not stand for the section inside it that matched)."""
        i = max(self.live, key=self.priority.__getitem__)
        span = self.lines[i]
        if span is None or len(self.same_file[span.file]) < 2:
            return i
        floor = MATCH_SHARE * self.relevance[i]
        inside = [(other.start - other.end, other.level, self.priority[k], -k)
                  for k in self.same_file[span.file]
                  if k != i and self.alive[k] and (other := self.lines[k]) is not None and span.contains(other)
                  and self.relevance[k] >= floor]
        return -max(inside)[3] if inside else i

    def drop_overlapping(self, chosen: int) -> None:
        """Drop the chunks of the chosen one's file whose lines overlap its lines."""
        span = self.lines[chosen]
        if span is None or len(self.same_file[span.file]) < 2:
            return
        for k in self.same_file[span.file]:
            other = self.lines[k]
            if self.alive[k] and other is not None and span.overlaps(other):
                self.drop(k, "nested", f"lines {other.start}-{other.end} of {other.path} overlap lines "
                                       f"{span.start}-{span.end} in [{self.tags[chosen]}] ({self.scored[chosen].id})")

    def absorb(self, chosen: int) -> None:
        """Take ``chosen`` out of play, lower the composites of the candidates similar to it, and
        drop its duplicates."""
        self.alive[chosen] = False
        self.live.remove(chosen)
        if not self.live:
            return
        fell, duplicates = self.unique.absorb(chosen, self.live, self.alive)
        current, priority, bonus = self.current, self.priority, self.bonus
        for k in fell:
            priority[k] = current[k] + bonus[k]
        self.fell += fell
        tag, chosen_id = self.tags[chosen], self.scored[chosen].id
        for k, sim in duplicates:
            self.drop(k, "duplicate", duplicate_detail(sim, tag, chosen_id))


def _best_first(indices: list[int], current: list[float]) -> list[int]:
    """``indices`` (in index order) by falling composite; equal composites keep index order."""
    return sorted(indices, key=lambda k: -current[k])


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

    alive, pinned, current, tokens = state.alive, state.pinned, state.current, state.tokens
    # Largest first: what is over budget is always a prefix of this order (less what is already
    # dropped), as the room left (less the section tags until something is chosen, and the next
    # tag, whose cost never falls) only shrinks.
    by_size = sorted(range(len(scored)), key=lambda k: -tokens[k])
    next_size = 0
    left = budget_tokens
    marker_tokens: dict[int, int] = {}
    while state.live:
        # Composites only fall and the budget only shrinks, so whatever fails either test now
        # would fail it at every later step: drop it all at once, best first. The loop then runs
        # once per chosen item rather than once per candidate, and only the candidates whose
        # composite fell since the last step need the threshold test again.
        low = [k for k in state.take_fallen() if alive[k] and not pinned[k] and current[k] < rules.min_composite]
        for k in _best_first(low, current):
            state.drop(k, "below_threshold", f"composite {current[k]:.2f} < {rules.min_composite:.2f}")
        tag = memory_tag(len(chosen) + 1)
        digits = len(tag)
        tag_tokens = marker_tokens.get(digits)
        if tag_tokens is None:
            # Same digit count, same cost: one count per digit count, not per tag.
            tag_tokens = marker_tokens[digits] = counter.count(tag)
        extra = (overhead if not chosen else 0) + tag_tokens
        over: list[int] = []
        while next_size < len(by_size) and tokens[by_size[next_size]] + extra > left:
            if alive[by_size[next_size]]:
                over.append(by_size[next_size])
            next_size += 1
        for k in _best_first(sorted(over), current):
            state.drop(k, "over_budget", f"needs {tokens[k] + extra} tokens, {left} left")
        if not state.live:
            break
        i = state.best()
        left -= tokens[i] + extra
        item = scored[i]
        scores = state.scores_of(i)
        why = justify(item, scores, weights, similar_to=state.nearest_tag(i))
        chosen.append(PackedItem(item.candidate, tag, tag + item.body, item.tokens + tag_tokens,
                                 tag_tokens, scores, why))
        state.tags[i] = tag
        state.absorb(i)
        state.drop_overlapping(i)

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

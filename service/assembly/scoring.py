"""Scores for memory candidates: five components in [0, 1], weighted by the query's intent.

Components:

* **relevance** — from retrieval, normalised by the caller to [0, 1] (1 = best match).
* **recency** — ``0.5 ** (age / half_life)`` on the event time (``occurred_at``: when the memory's
  event happened or was said, which is its write time unless the writer said otherwise; a future
  event counts as age 0); a recent access counts at half
  strength (``access_refresh``), so memories in use stay warm without access alone keeping them
  young.
* **usefulness** — ``0.5 * importance + 0.5 * (usefulness + 1) / 2``. ``usefulness`` is the
  learned feedback signal in **[-1, 1]** (0 = no feedback, +1 always helpful, -1 never);
  ``importance`` is the writer's own estimate in [0, 1]. Neutral memories score 0.5.
* **informativeness** — value per token: distinct content terms per token relative to
  ``density_target`` (capped at 1), times ``1 - exp(-terms / saturation_terms)`` so near-empty texts
  score low, times ``sqrt(long_item_tokens / tokens)`` past ``long_item_tokens`` so very long
  texts pay for the room they take.
* **uniqueness** — ``1 - max similarity`` to the items already chosen (MMR): 1.0 here, lowered at
  each packing step by :mod:`service.assembly.redundancy` (cosine of embeddings when both items
  have one, else Jaccard over word unigrams and bigrams).

``composite = sum(weight * component)``. Weights per intent follow the selective-retrieval design
(factual favours relevance, complex favours diversity and recency), with 0.10 given to feedback:

=========== ========= =============== ========== ======= ==========
intent      relevance informativeness uniqueness recency usefulness
=========== ========= =============== ========== ======= ==========
factual     0.55      0.15            0.10       0.10    0.10
conceptual  0.35      0.35            0.10       0.10    0.10
detailed    0.30      0.30            0.20       0.10    0.10
complex     0.25      0.25            0.25       0.15    0.10
=========== ========= =============== ========== ======= ==========

Candidates with the same id (a memory found both in the hot set and by cold search) are merged by
:func:`merge_by_id` into one candidate with ``origin="hot"``, ``in_hot_and_cold=True``, the better
relevance (and that side's rank), whichever embedding is present, pinned if either copy is, and
every other field from the cold copy (fresh from Postgres, where the hot set is a cache).

Inputs outside their documented ranges are clamped rather than rejected: one badly normalised
score should cost ranking quality, not the whole request.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Final, Literal

from service.assembly.format import format_body, short_date
from service.assembly.intent import Intent
from service.assembly.redundancy import FloatVector, unit_embeddings
from service.assembly.terms import content_term_count
from service.text.tokens import TokenCounter

Origin = Literal["hot", "cold"]


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """A memory offered to the packer. ``eq=False``: identity is ``id``, arrays do not compare."""

    id: str
    text: str
    origin: Origin
    relevance: float
    """Retrieval relevance normalised to [0, 1] (see :func:`scale_to_unit`)."""
    created_at: datetime
    score: float = 0.0
    """How strongly it matches the query in [0, 1], comparable across calls (the response's ``score``;
    ``relevance`` is relative to the best candidate of this call)."""
    """Timezone-aware; naive values are taken as UTC."""
    occurred_at: datetime | None = None
    """When the memory's event happened (the age recency decays on); None: ``created_at``."""
    last_accessed_at: datetime | None = None
    importance: float = 0.5
    """Writer-assigned importance in [0, 1]."""
    usefulness: float = 0.0
    """Learned feedback in [-1, 1]; 0 means no signal yet."""
    embedding: FloatVector | None = None
    pinned: bool = False
    """Considered before everything else and never dropped as ``below_threshold``."""
    rank: int | None = None
    """1-based rank within its origin's retrieval, shown in justifications."""
    in_hot_and_cold: bool = False
    lines: LineSpan | None = None
    """For a document chunk: the file lines it covers (the packer never packs the same lines twice)."""


@dataclass(frozen=True, slots=True)
class LineSpan:
    """Lines ``start..end`` (1-based, inclusive) of ``path`` in ``collection`` (of the file's content: see
    :attr:`file`), covered by a chunk of ``level`` (0 file summary, 1 section, 2 chunk: higher is more
    specific).

    A line over the chunk bound is stored as several L2 chunks, its pieces, all with that line as
    their span (:mod:`service.documents.long_lines`). Pieces hold different parts of the line, so two
    pieces of one line neither contain nor overlap each other, and the packer may choose several; a
    span over the line (a section, the file, a chunk of several lines) still contains each piece. Two
    spans are such pieces when they are L2 spans of the same single line of different chunks and one
    of them is ``partial``. Spans without a ``chunk`` compare by their lines alone.

    Of two spans of the same lines and different levels, only the less specific one contains the
    other: a chunk (a piece, even more so) does not contain a section of the same lines, which would
    otherwise take its place in packing (in a one-line file, every section's span is that line).
    """

    path: str
    start: int
    end: int
    level: int
    chunk: str | None = None
    """The chunk's memory id, which tells pieces of one line apart."""
    partial: bool = False
    """A single-line L2 chunk whose text stops before the line's end (a piece before the last one)."""
    collection: str | None = None
    """The file's collection: the same path in two collections is two files."""
    content_hash: str | None = None
    """The file's content hash: two files of the same content (the same repository in two collections, a
    copied file) are one text, their chunks' lines the same lines."""

    @property
    def file(self) -> tuple[str | None, str]:
        """What the lines are lines of: the file's content where it is known, else its collection and path."""
        return ("content", self.content_hash) if self.content_hash else (self.collection, self.path)

    def contains(self, other: LineSpan) -> bool:
        if self.file != other.file or other.start < self.start or self.end < other.end or self._other_piece(other):
            return False
        return self.level <= other.level or (self.start, self.end) != (other.start, other.end)

    def overlaps(self, other: LineSpan) -> bool:
        return (self.file == other.file and self.start <= other.end and other.start <= self.end
                and not self._other_piece(other))

    def _other_piece(self, other: LineSpan) -> bool:
        """Whether ``self`` and ``other`` are different pieces of one line (of one file)."""
        return ((self.partial or other.partial) and self.chunk is not None and other.chunk is not None
                and self.chunk != other.chunk and self.level == other.level == 2
                and self.start == self.end == other.start == other.end)


@dataclass(frozen=True, slots=True)
class Weights:
    relevance: float
    informativeness: float
    uniqueness: float
    recency: float
    usefulness: float

    def __post_init__(self) -> None:
        values = dataclasses.astuple(self)
        if any(v < 0 for v in values) or not math.isclose(sum(values), 1.0, abs_tol=1e-6):
            raise ValueError(f"weights must be non-negative and sum to 1, got {values}")


DEFAULT_WEIGHTS: Final[Mapping[Intent, Weights]] = MappingProxyType(
    {
        Intent.FACTUAL: Weights(0.55, 0.15, 0.10, 0.10, 0.10),
        Intent.CONCEPTUAL: Weights(0.35, 0.35, 0.10, 0.10, 0.10),
        Intent.DETAILED: Weights(0.30, 0.30, 0.20, 0.10, 0.10),
        Intent.COMPLEX: Weights(0.25, 0.25, 0.25, 0.15, 0.10),
    }
)


@dataclass(frozen=True, slots=True)
class ScoringRules:
    weights: Mapping[Intent, Weights] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    recency_half_life_hours: float = 14 * 24.0
    access_refresh: float = 0.5
    """Strength of a recent access relative to a recent creation."""
    density_target: float = 0.35
    """Distinct content terms per token that counts as fully dense (typical for crisp prose)."""
    saturation_terms: float = 4.0
    long_item_tokens: int = 400

    def __post_init__(self) -> None:
        if self.recency_half_life_hours <= 0 or self.density_target <= 0 or self.saturation_terms <= 0:
            raise ValueError("half-life, density target and saturation must be positive")
        if self.long_item_tokens <= 0:
            raise ValueError("long_item_tokens must be positive")


DEFAULT_SCORING_RULES: Final = ScoringRules()


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    relevance: float
    recency: float
    usefulness: float
    informativeness: float
    uniqueness: float
    composite: float

    def with_uniqueness(self, uniqueness: float, weights: Weights) -> ScoreBreakdown:
        delta = weights.uniqueness * (uniqueness - self.uniqueness)
        return ScoreBreakdown(
            self.relevance, self.recency, self.usefulness, self.informativeness, uniqueness, self.composite + delta
        )


@dataclass(frozen=True, slots=True, eq=False)
class ScoredCandidate:
    """A candidate written as its memory line (all but the tag, which is its position once packed),
    counted exactly, and scored before selection."""

    candidate: Candidate
    body: str
    """The memory line after its tag (:func:`~service.assembly.format.format_body`)."""
    tokens: int
    """Exact tokens of ``body``; the packer adds the tag's own tokens when it knows the position."""
    text_tokens: int
    """Tokens of the text without its line break (what informativeness is judged on)."""
    content_terms: int
    age_hours: float
    access_age_hours: float | None
    recency_from_access: bool
    unit_embedding: FloatVector | None
    """The embedding L2-normalised (:func:`~service.assembly.redundancy.unit_embeddings`), which
    redundancy compares by cosine; None without a usable one."""
    scores: ScoreBreakdown
    """Uniqueness is 1.0 here; the packer lowers it against what it has chosen."""

    @property
    def id(self) -> str:
        return self.candidate.id


def clamp(value: float, low: float, high: float) -> float:
    """``value`` within ``[low, high]`` (``low < high``); NaN becomes ``low``."""
    if value > low:
        return value if value < high else high
    return low


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _hours_between(earlier: datetime, later: datetime) -> float:
    return max(0.0, (_utc(later) - _utc(earlier)).total_seconds() / 3600.0)


def recency_score(age_hours: float, access_age_hours: float | None, rules: ScoringRules) -> float:
    created: float = 0.5 ** (age_hours / rules.recency_half_life_hours)
    if access_age_hours is None:
        return created
    accessed: float = rules.access_refresh * 0.5 ** (access_age_hours / rules.recency_half_life_hours)
    return max(created, accessed)


def usefulness_score(usefulness: float, importance: float) -> float:
    return 0.5 * clamp(importance, 0.0, 1.0) + 0.25 * (clamp(usefulness, -1.0, 1.0) + 1.0)


def informativeness_score(terms: int, text_tokens: int, rules: ScoringRules) -> float:
    if terms == 0 or text_tokens <= 0:
        return 0.0
    density = min(1.0, terms / text_tokens / rules.density_target)
    amount = 1.0 - math.exp(-terms / rules.saturation_terms)
    length = min(1.0, math.sqrt(rules.long_item_tokens / text_tokens))
    return density * amount * length


def composite(
    weights: Weights,
    *,
    relevance: float,
    recency: float,
    usefulness: float,
    informativeness: float,
    uniqueness: float,
) -> float:
    return (
        weights.relevance * relevance
        + weights.recency * recency
        + weights.usefulness * usefulness
        + weights.informativeness * informativeness
        + weights.uniqueness * uniqueness
    )


def scale_to_unit(scores: Sequence[float]) -> list[float]:
    """Divide retrieval scores by the best one so the top is 1.0 and ratios are kept (RRF scores
    such as 1/61 become usable relevances). Non-positive inputs map to 0."""
    top = max((s for s in scores if s > 0 and not math.isnan(s)), default=0.0)
    if top <= 0:
        return [0.0 for _ in scores]
    return [clamp(s / top, 0.0, 1.0) for s in scores]


def merge_by_id(candidates: Iterable[Candidate]) -> list[Candidate]:
    """One candidate per id, first-seen order (see module docstring for how duplicates merge)."""
    merged: dict[str, Candidate] = {}
    for cand in candidates:
        seen = merged.get(cand.id)
        if seen is None:
            merged[cand.id] = cand
            continue
        # Text, timestamps and feedback come from the cold copy: it was just read from Postgres,
        # while the hot set is a cache that may lag behind recent feedback.
        if cand.origin == "cold" and seen.origin != "cold":
            primary, secondary = cand, seen
        else:
            primary, secondary = seen, cand
        better = seen if seen.relevance >= cand.relevance else cand
        hot = "hot" in (seen.origin, cand.origin)
        both = seen.origin != cand.origin or seen.in_hot_and_cold or cand.in_hot_and_cold
        merged[cand.id] = dataclasses.replace(
            primary,
            origin="hot" if hot else primary.origin,
            relevance=better.relevance,
            score=max(seen.score, cand.score),
            rank=better.rank if better.rank is not None else (seen.rank or cand.rank),
            embedding=primary.embedding if primary.embedding is not None else secondary.embedding,
            pinned=seen.pinned or cand.pinned,
            in_hot_and_cold=both,
        )
    return list(merged.values())


def memory_body(cand: Candidate, show_date: bool) -> str:
    """``cand``'s memory line after its tag; ``show_date``: with its event date (``occurred_at``, else
    ``created_at``) before the text, as :func:`score_candidates` writes it for questions asking a time."""
    return format_body(cand.text, short_date(_utc(cand.occurred_at or cand.created_at)) if show_date else None)


def score_candidates(
    candidates: Iterable[Candidate],
    *,
    intent: Intent,
    counter: TokenCounter,
    now: datetime | None = None,
    rules: ScoringRules = DEFAULT_SCORING_RULES,
    show_dates: bool = False,
) -> list[ScoredCandidate]:
    """Merge by id, write each memory line, count it exactly and score it (uniqueness 1.0).

    ``show_dates``: each line shows its event date (``occurred_at``, else ``created_at``) before the
    text, e.g. ``(8 May 2023)``, for questions that ask for a time; the date is content.

    Returned best composite first (ties: higher relevance, then id) — the packer's starting order.
    """
    now = _utc(now or datetime.now(UTC))
    weights = rules.weights[intent]
    merged = merge_by_id(candidates)
    units = unit_embeddings([c.embedding for c in merged])
    line_break = counter.count(format_body(""))
    scored: list[ScoredCandidate] = []
    for cand, unit in zip(merged, units, strict=True):
        body = memory_body(cand, show_dates)
        tokens = counter.count(body)
        # The line break is formatting; informativeness judges the text alone.
        text_tokens = max(1, tokens - line_break)
        terms = content_term_count(cand.text)
        age = _hours_between(cand.occurred_at or cand.created_at, now)
        access_age = None if cand.last_accessed_at is None else _hours_between(cand.last_accessed_at, now)
        relevance = clamp(cand.relevance, 0.0, 1.0)
        created_recency = recency_score(age, None, rules)
        recency = created_recency if access_age is None else recency_score(age, access_age, rules)
        usefulness = usefulness_score(cand.usefulness, cand.importance)
        info = informativeness_score(terms, text_tokens, rules)
        breakdown = ScoreBreakdown(
            relevance=relevance,
            recency=recency,
            usefulness=usefulness,
            informativeness=info,
            uniqueness=1.0,
            # composite(weights, ...) written out: the same sum, without a call with keywords.
            composite=weights.relevance * relevance
            + weights.recency * recency
            + weights.usefulness * usefulness
            + weights.informativeness * info
            + weights.uniqueness * 1.0,
        )
        scored.append(
            ScoredCandidate(
                candidate=cand,
                body=body,
                tokens=tokens,
                text_tokens=text_tokens,
                content_terms=terms,
                age_hours=age,
                access_age_hours=access_age,
                recency_from_access=recency > created_recency,
                unit_embedding=unit,
                scores=breakdown,
            )
        )
    scored.sort(key=lambda s: (-s.scores.composite, -s.scores.relevance, s.id))
    return scored

"""Greedy MMR packing: budget, duplicates, thresholds, pinning, and the accounting it reports."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.assembly.format import format_memories, memories_section_overhead
from service.assembly.intent import Intent
from service.assembly.justify import justify
from service.assembly.packing import (
    Dropped,
    DropReason,
    PackedItem,
    PackingRules,
    PackResult,
    pack,
    select_memories,
)
from service.assembly.redundancy import jaccard, similarity_features
from service.assembly.scoring import (
    DEFAULT_SCORING_RULES,
    Candidate,
    LineSpan,
    ScoreBreakdown,
    ScoredCandidate,
    score_candidates,
)
from service.text.tokens import TokenCounter, Tokenizers

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken")).get("cl100k_base")


def cand(id: str, text: str, **kw: object) -> Candidate:
    fields: dict[str, object] = {"origin": "cold", "relevance": 0.8, "created_at": NOW - timedelta(hours=2)}
    fields.update(kw)
    return Candidate(id=id, text=text, **fields)  # type: ignore[arg-type]


def vec(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)


FACTS = [
    "Invoices are issued on the first business day of each month by the billing service.",
    "The EU region keeps nightly Postgres backups for thirty-five days before deletion.",
    "API keys are stored hashed with a per-key salt and map a caller to exactly one org.",
    "Redis keys are namespaced by org with braces so a cluster keeps each tenant on one slot.",
    "The assemble endpoint has a forty millisecond deadline and degrades rather than waiting.",
    "HNSW indexes are built after bulk loads because building them first is much slower.",
]


def accounted(counter: TokenCounter, result_chosen: tuple[object, ...]) -> int:
    return counter.count(format_memories(result_chosen))  # type: ignore[arg-type]


def test_packs_everything_that_fits_and_accounts_exactly(counter: TokenCounter) -> None:
    cands = [cand(f"id{i:02d}", text, relevance=1.0 - i / 10) for i, text in enumerate(FACTS)]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert len(result.chosen) == len(FACTS) and not result.dropped
    assert result.tokens_used == accounted(counter, result.chosen)
    assert result.tokens_used == result.section_overhead + sum(p.tokens for p in result.chosen)
    assert result.chosen[0].id == "id00"
    assert result.candidates_evaluated == len(FACTS)


def test_never_over_budget_and_keeps_trying_smaller_items(counter: TokenCounter) -> None:
    big = cand("big", " ".join(FACTS * 3), relevance=1.0)
    small = cand("small", "Backups are kept thirty-five days.", relevance=0.6)
    scored = score_candidates([big, small], intent=Intent.FACTUAL, counter=counter, now=NOW)
    small_cost = next(s.tokens for s in scored if s.id == "small")
    budget = small_cost + 5 + 10
    result = pack(scored, budget_tokens=budget, intent=Intent.FACTUAL, counter=counter)
    assert [p.id for p in result.chosen] == ["small"]
    assert [(d.id, d.reason) for d in result.dropped] == [("big", "over_budget")]
    assert result.tokens_used <= budget
    assert "left" in result.dropped[0].detail


def test_zero_or_negative_budget_packs_nothing(counter: TokenCounter) -> None:
    for budget in (0, -50):
        result = select_memories(
            [cand("a", FACTS[0])], budget_tokens=budget, intent=Intent.FACTUAL, counter=counter, now=NOW
        )
        assert result.chosen == () and result.tokens_used == 0
        assert [d.reason for d in result.dropped] == ["over_budget"]


def test_section_tags_are_charged_once(counter: TokenCounter) -> None:
    scored = score_candidates([cand("a", FACTS[0])], intent=Intent.FACTUAL, counter=counter, now=NOW)
    exact = (scored[0].tokens + counter.count("1")
             + pack(scored, budget_tokens=0, intent=Intent.FACTUAL, counter=counter).section_overhead)
    assert pack(scored, budget_tokens=exact, intent=Intent.FACTUAL, counter=counter).chosen
    assert not pack(scored, budget_tokens=exact - 1, intent=Intent.FACTUAL, counter=counter).chosen


def test_near_duplicates_by_embedding_are_dropped(counter: TokenCounter) -> None:
    cands = [
        cand("a", FACTS[0], relevance=0.9, embedding=vec(1, 0, 0)),
        cand("b", FACTS[0] + " Really.", relevance=0.8, embedding=vec(0.99, 0.05, 0)),
        cand("c", FACTS[1], relevance=0.5, embedding=vec(0, 1, 0)),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["a", "c"]
    (dup,) = result.dropped
    assert dup.id == "b" and dup.reason == "duplicate" and "[1] (a)" in dup.detail


def test_near_duplicates_by_words_are_dropped(counter: TokenCounter) -> None:
    cands = [
        cand("a", FACTS[1], relevance=0.9),
        cand("b", FACTS[1].upper(), relevance=0.8),
        cand("c", FACTS[2], relevance=0.5),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["a", "c"]
    assert [(d.id, d.reason) for d in result.dropped] == [("b", "duplicate")]


def test_mmr_prefers_a_different_item_over_a_similar_one(counter: TokenCounter) -> None:
    cands = [
        cand("a", FACTS[3], relevance=1.0, embedding=vec(1, 0)),
        cand("a2", FACTS[4], relevance=0.95, embedding=vec(0.85, 0.5268)),  # cosine 0.85: similar, no dup
        cand("b", FACTS[5], relevance=0.85, embedding=vec(0, 1)),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.COMPLEX, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["a", "b", "a2"]
    a2 = result.chosen[2]
    assert a2.scores.uniqueness == pytest.approx(1 - 0.85, abs=1e-3)
    assert "overlaps 0.85 with [1]" in a2.justification


def test_low_scores_are_dropped_below_threshold(counter: TokenCounter) -> None:
    old = NOW - timedelta(days=3650)
    cands = [
        cand("good", FACTS[0], relevance=0.9),
        cand("bad", FACTS[1], relevance=0.0, created_at=old, usefulness=-1.0, importance=0.0),
    ]
    result = select_memories(
        cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW, rules=PackingRules(0.3)
    )
    assert [p.id for p in result.chosen] == ["good"]
    assert [(d.id, d.reason) for d in result.dropped] == [("bad", "below_threshold")]


def test_pinned_items_go_first_and_skip_the_threshold(counter: TokenCounter) -> None:
    old = NOW - timedelta(days=3650)
    cands = [
        cand("top", FACTS[0], relevance=1.0),
        cand("pin", FACTS[1], relevance=0.0, created_at=old, pinned=True, origin="hot"),
    ]
    result = select_memories(
        cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW, rules=PackingRules(0.5)
    )
    assert [p.id for p in result.chosen] == ["pin", "top"]
    assert result.chosen[0].justification.split(": ", 1)[1].startswith("pinned")


def test_empty_texts_are_dropped(counter: TokenCounter) -> None:
    result = select_memories(
        [cand("blank", "  \n "), cand("ok", FACTS[0])],
        budget_tokens=10_000,
        intent=Intent.FACTUAL,
        counter=counter,
        now=NOW,
    )
    assert [p.id for p in result.chosen] == ["ok"]
    assert [(d.id, d.reason) for d in result.dropped] == [("blank", "empty")]


def test_hot_and_cold_copies_become_one_item(counter: TokenCounter) -> None:
    cands = [
        cand("same", FACTS[0], origin="hot", relevance=0.4),
        cand("same", FACTS[0], origin="cold", relevance=0.9, rank=1),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert len(result.chosen) == 1 and not result.dropped
    item = result.chosen[0]
    assert item.candidate.origin == "hot" and item.candidate.in_hot_and_cold
    assert "relevance 0.90 (rank 1 hot+cold)" in item.justification


def test_justification_names_the_top_factors_with_numbers(counter: TokenCounter) -> None:
    item = cand("m", FACTS[0], relevance=0.92, rank=1, usefulness=0.4, importance=0.9)
    (packed,) = select_memories([item], budget_tokens=1000, intent=Intent.FACTUAL, counter=counter, now=NOW).chosen
    why = packed.justification
    assert why.startswith(f"score {packed.scores.composite:.2f}: relevance 0.92 (rank 1 cold)")
    assert "recent 1.00 (2h old)" in why
    assert "usefulness 0.80 (helpful feedback +0.4)" in why  # clear feedback is always named
    assert "unique" not in why  # nothing overlapped, so uniqueness is no reason


def test_every_candidate_is_chosen_or_dropped_once(counter: TokenCounter) -> None:
    rng = np.random.default_rng(7)
    cands = [
        cand(
            f"m{i}",
            " ".join(rng.choice(FACTS[i % len(FACTS)].split(), size=int(rng.integers(1, 12)))),
            relevance=float(rng.random()),
            embedding=rng.normal(size=8).astype(np.float32) if i % 3 else None,
            pinned=bool(i % 11 == 0),
        )
        for i in range(60)
    ]
    result = select_memories(cands, budget_tokens=300, intent=Intent.DETAILED, counter=counter, now=NOW)
    chosen = [p.id for p in result.chosen]
    dropped = [d.id for d in result.dropped]
    assert len(set(chosen)) == len(chosen)
    assert sorted(chosen + dropped) == sorted(c.id for c in cands)
    assert result.tokens_used <= 300
    assert result.tokens_used == accounted(counter, result.chosen)


def test_no_candidates(counter: TokenCounter) -> None:
    result = select_memories([], budget_tokens=100, intent=Intent.FACTUAL, counter=counter)
    assert result.chosen == () and result.dropped == () and result.tokens_used == 0


def test_mixed_embedding_dimensions_fall_back_to_words(counter: TokenCounter) -> None:
    cands = [
        cand("a", FACTS[0], relevance=0.9, embedding=vec(1, 0)),
        cand("b", FACTS[0], relevance=0.8, embedding=vec(0, 1, 0)),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["a"]
    assert result.dropped[0].reason == "duplicate"


def chunk(id: str, path: str, start: int, end: int, level: int, relevance: float, words: int = 12) -> Candidate:
    text = " ".join(f"{path.split('.')[0]}{level}w{n}x{start}" for n in range(words))
    return cand(id, text, relevance=relevance, lines=LineSpan(path, start, end, level))


def test_nested_chunks_are_packed_once_the_most_specific_first(counter: TokenCounter) -> None:
    cands = [
        chunk("file", "a.py", 1, 100, 0, relevance=1.0),  # the summary of a.py scores best
        chunk("section", "a.py", 10, 40, 1, relevance=0.95),
        chunk("chunk", "a.py", 20, 30, 2, relevance=0.9),
        chunk("later", "a.py", 50, 60, 2, relevance=0.85),
        chunk("other", "b.py", 20, 30, 2, relevance=0.8),
        cand("memory", FACTS[0], relevance=0.7),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    # The chunk inside the section inside the file goes in for the file; the file and the section
    # hold its lines again, so they are dropped; a.py's other chunk and b.py's are other lines.
    chosen = [p.id for p in result.chosen]
    assert chosen[0] == "chunk" and sorted(chosen[1:]) == ["later", "memory", "other"]
    nested = {d.id: d for d in result.dropped}
    assert set(nested) == {"file", "section"} and all(d.reason == "nested" for d in nested.values())
    assert nested["file"].detail == "lines 1-100 of a.py overlap lines 20-30 in [1] (chunk)"
    spans = [p.candidate.lines for p in result.chosen if p.candidate.lines is not None]
    assert not any(a.overlaps(b) for i, a in enumerate(spans) for b in spans[i + 1:])


def test_a_broader_chunk_goes_in_when_the_specific_one_does_not_fit(counter: TokenCounter) -> None:
    cands = [
        chunk("section", "a.py", 10, 40, 1, relevance=1.0, words=10),
        chunk("chunk", "a.py", 20, 30, 2, relevance=0.9, words=400),  # inside, but too big
    ]
    small = score_candidates([cands[0]], intent=Intent.FACTUAL, counter=counter, now=NOW)[0].tokens
    budget = small + counter.count("1") + memories_section_overhead(counter) + 5
    result = select_memories(cands, budget_tokens=budget, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["section"]
    assert [(d.id, d.reason) for d in result.dropped] == [("chunk", "over_budget")]


def test_a_chunk_takes_its_containers_place_only_if_it_matches_the_query_itself(counter: TokenCounter) -> None:
    # The section matched; a chunk inside it that the search returned on weak similarity (relevance
    # under half the section's) is more specific, but it is not what matched: the section goes in.
    unrelated = chunk("unrelated", "a.py", 12, 14, 2, relevance=0.05)
    cands = [chunk("section", "a.py", 10, 40, 1, relevance=1.0), unrelated]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["section"]
    assert [(d.id, d.reason) for d in result.dropped] == [("unrelated", "nested")]
    # With a matching chunk inside too, that one goes in, though the unrelated one is smaller.
    cands.append(chunk("matching", "a.py", 20, 30, 2, relevance=0.6))
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert result.chosen[0].id == "matching"
    assert ("section", "nested") in [(d.id, d.reason) for d in result.dropped]


def test_the_section_that_matched_goes_in_not_a_chunk_of_the_whole_file(counter: TokenCounter) -> None:
    # A short file: its one L2 chunk holds every line, as its H1 section does; the Backups section
    # inside them matched best. Fewer lines are more specific than a finer level of the same lines.
    cands = [chunk("h1", "ops.md", 1, 16, 1, relevance=1.0), chunk("whole", "ops.md", 1, 16, 2, relevance=0.8),
             chunk("backups", "ops.md", 5, 9, 1, relevance=0.9)]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["backups"]
    assert {(d.id, d.reason) for d in result.dropped} == {("h1", "nested"), ("whole", "nested")}


def test_the_same_path_in_two_collections_is_two_files(counter: TokenCounter) -> None:
    def readme(id: str, text: str, relevance: float, collection: str) -> Candidate:
        return cand(id, text, relevance=relevance, lines=LineSpan("README.md", 1, 3, 2, collection=collection))

    ours = readme("ours", "Install with make run; the service listens on port 8080.", 1.0, "handbook")
    theirs = readme("theirs", "Deploy the charts with helm; values live in deploy/values.yaml.", 0.9, "repo")
    result = select_memories([ours, theirs], budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert sorted(p.id for p in result.chosen) == ["ours", "theirs"] and not result.dropped
    mirror = readme("theirs", theirs.text, 0.9, "handbook")  # the same file: its lines are packed once
    result = select_memories([ours, mirror], budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert len(result.chosen) == 1 and [d.reason for d in result.dropped] == ["nested"]
    # Two collections holding the same repository: the same content is one text, whatever it is filed under.
    whole = cand("whole", "Install with make run.\nThe service listens on port 8080.\nStop it with Ctrl-C.",
                 relevance=1.0, lines=LineSpan("README.md", 1, 3, 1, collection="handbook", content_hash="h1"))
    inside = cand("inside", "The service listens on port 8080.", relevance=0.9,
                  lines=LineSpan("README.md", 2, 2, 2, collection="mirror", content_hash="h1"))
    other = cand("other", "Deploy the charts with helm.", relevance=0.8,
                 lines=LineSpan("README.md", 2, 2, 2, collection="repo", content_hash="h2"))
    result = select_memories([whole, inside, other], budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter,
                             now=NOW)
    assert sorted(p.id for p in result.chosen) == ["inside", "other"]  # the mirror's line stands for the section
    assert [(d.id, d.reason) for d in result.dropped] == [("whole", "nested")]


def test_partly_overlapping_chunks_are_not_packed_twice(counter: TokenCounter) -> None:
    cands = [
        chunk("one", "a.md", 1, 40, 2, relevance=1.0),
        chunk("two", "a.md", 30, 80, 1, relevance=0.9),
        chunk("three", "a.md", 41, 80, 2, relevance=0.8),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["one", "three"]
    assert [(d.id, d.reason) for d in result.dropped] == [("two", "nested")]


def piece(id: str, partial: bool, line: int = 1, path: str = "app.min.js") -> LineSpan:
    """An L2 piece of an over-long line (``partial``: one before the line's last)."""
    return LineSpan(path, line, line, 2, chunk=id, partial=partial)


def test_pieces_of_one_line_neither_contain_nor_overlap_each_other() -> None:
    pieces = [piece("p1", True), piece("p2", True), piece("p3", False)]  # p3 ends the line
    for a in pieces:
        assert a.contains(a) and a.overlaps(a)
        for b in pieces:
            if a is not b:
                assert not a.contains(b) and not a.overlaps(b), (a.chunk, b.chunk)
    # The same chunk read twice (a hot and a cold copy) is still the same lines.
    assert pieces[0].contains(piece("p1", True)) and pieces[0].overlaps(piece("p1", True))
    # Pieces of another line or file are other lines anyway.
    assert not pieces[0].overlaps(piece("q1", True, line=2)) and not pieces[0].overlaps(piece("r1", True, path="b.js"))


def test_a_span_over_the_line_contains_each_of_its_pieces() -> None:
    pieces = [piece("p1", True), piece("p2", True), piece("p3", False)]
    section = LineSpan("app.min.js", 1, 1, 1, chunk="section")  # in a one-line file, every section is line 1
    summary = LineSpan("app.min.js", 1, 1, 0, chunk="file")
    several = LineSpan("app.min.js", 4, 9, 2, chunk="several")
    unkeyed = LineSpan("app.min.js", 1, 3, 1)
    for p in pieces:
        for over in (section, summary, unkeyed):
            assert over.contains(p) and over.overlaps(p) and p.overlaps(over)
            # A piece holds part of the line, never the section or file over it.
            assert not p.contains(over)
    middle = piece("m", True, line=6)
    assert several.contains(middle) and several.overlaps(middle) and not middle.contains(several)


def test_identical_spans_of_whole_line_chunks_contain_each_other() -> None:
    # Two L2 chunks of the same lines that are not pieces (none stops before its line's end), or
    # spans without chunk ids: compared by their lines, as they always were.
    for a, b in [(LineSpan("a.py", 5, 5, 2, chunk="a"), LineSpan("a.py", 5, 5, 2, chunk="b")),
                 (LineSpan("a.py", 5, 5, 2), LineSpan("a.py", 5, 5, 2, partial=True)),
                 (LineSpan("a.py", 3, 8, 2, chunk="a"), LineSpan("a.py", 3, 8, 2, chunk="b"))]:
        assert a.contains(b) and b.contains(a) and a.overlaps(b) and b.overlaps(a)
    # Of the same lines at two levels, the section contains the chunk and not the other way round.
    section, chunk_span = LineSpan("a.py", 5, 5, 1, chunk="s"), LineSpan("a.py", 5, 5, 2, chunk="c")
    assert section.contains(chunk_span) and not chunk_span.contains(section) and chunk_span.overlaps(section)


def line_piece(id: str, partial: bool, relevance: float, n: int) -> Candidate:
    text = " ".join(f"minified{n}w{k}" for k in range(12))
    return cand(id, text, relevance=relevance, lines=piece(id, partial))


def test_the_packer_chooses_several_pieces_of_one_line(counter: TokenCounter) -> None:
    cands = [
        line_piece("p1", True, relevance=1.0, n=1),
        line_piece("p2", True, relevance=0.9, n=2),
        line_piece("p3", False, relevance=0.85, n=3),
        cand("section", " ".join(f"section{k}" for k in range(12)), relevance=0.8,
             lines=LineSpan("app.min.js", 1, 1, 1, chunk="section")),
    ]
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    # The best piece is chosen, not the section over its line (which it does not contain); the other
    # pieces are other parts of the line, and the section holds the chosen one's part again.
    assert [p.id for p in result.chosen] == ["p1", "p2", "p3"]
    assert [(d.id, d.reason) for d in result.dropped] == [("section", "nested")]
    # With the section first, it is the pieces that match that go in for it, the best first.
    cands[3] = dataclasses.replace(cands[3], relevance=1.0)
    cands[0] = dataclasses.replace(cands[0], relevance=0.95)
    result = select_memories(cands, budget_tokens=10_000, intent=Intent.FACTUAL, counter=counter, now=NOW)
    assert [p.id for p in result.chosen] == ["p1", "p2", "p3"]


# -- the packer against a plain restatement of its contract -------------------------------------------


def reference_pack(
    scored: list[ScoredCandidate], *, budget_tokens: int, intent: Intent, counter: TokenCounter, rules: PackingRules
) -> PackResult:
    """The packing contract restated plainly: every step recomputes every composite and compares the
    newly chosen item with each candidate still in play, one pair at a time (cosines from the same
    float32 matrix-vector product as the packer, Jaccard over :func:`similarity_features`)."""
    weights = DEFAULT_SCORING_RULES.weights[intent]
    wu = weights.uniqueness
    overhead = memories_section_overhead(counter)
    n = len(scored)
    units = [s.unit_embedding for s in scored]
    dims = {u.shape[0] for u in units if u is not None}
    matrix = None
    if len(dims) == 1:
        matrix = np.zeros((n, dims.pop()), dtype=np.float32)
        for i, u in enumerate(units):
            if u is not None:
                matrix[i] = u
    features = [similarity_features(s.candidate.text) for s in scored]

    def similarity(a: int, b: int) -> tuple[float, float]:
        """(similarity clipped to [0, 1], duplicate threshold) of chosen ``a`` and candidate ``b``."""
        if matrix is not None and units[a] is not None and units[b] is not None:
            sim, limit = float((matrix @ matrix[a])[b]), rules.duplicate_cosine
        elif features[a] and features[b]:
            sim, limit = jaccard(features[a], features[b]), rules.duplicate_jaccard
        else:
            bare = [scored[k].candidate.text.strip().casefold() for k in (a, b)]
            same = not features[a] and not features[b] and bare[0] == bare[1]
            sim, limit = (1.0 if same else 0.0), rules.duplicate_jaccard
        return min(1.0, max(0.0, sim)), limit

    alive = list(range(n))
    max_sim = [0.0] * n
    nearest: list[str | None] = [None] * n
    chosen: list[PackedItem] = []
    dropped: list[Dropped] = []

    def scores_of(i: int) -> ScoreBreakdown:
        return scored[i].scores.with_uniqueness(1.0 - max_sim[i], weights)

    def drop(i: int, reason: DropReason, detail: str) -> None:
        alive.remove(i)
        dropped.append(Dropped(scored[i].id, reason, detail, scored[i].tokens, scores_of(i)))

    for i in range(n):
        if not scored[i].candidate.text.strip():
            drop(i, "empty", "no text")
    budget_tokens = left = max(0, budget_tokens)
    while alive:
        current = {k: (scored[k].scores.composite - wu) + wu * (1.0 - max_sim[k]) for k in alive}
        low = [k for k in alive if not scored[k].candidate.pinned and current[k] < rules.min_composite]
        for k in sorted(low, key=lambda k: -current[k]):
            drop(k, "below_threshold", f"composite {current[k]:.2f} < {rules.min_composite:.2f}")
        tag = str(len(chosen) + 1)
        tag_tokens = counter.count(tag)
        extra = (0 if chosen else overhead) + tag_tokens
        for k in sorted([k for k in alive if scored[k].tokens + extra > left], key=lambda k: -current[k]):
            drop(k, "over_budget", f"needs {scored[k].tokens + extra} tokens, {left} left")
        if not alive:
            break
        i = max(alive, key=lambda k: current[k] + (10.0 if scored[k].candidate.pinned else 0.0))
        left -= scored[i].tokens + extra
        item, scores = scored[i], scores_of(i)
        why = justify(item, scores, weights, similar_to=nearest[i])
        chosen.append(PackedItem(item.candidate, tag, tag + item.body, item.tokens + tag_tokens, tag_tokens,
                                 scores, why))
        alive.remove(i)
        duplicates = []
        for k in alive:
            sim, limit = similarity(i, k)
            if sim > max_sim[k]:
                max_sim[k], nearest[k] = sim, tag
            if sim > limit:
                duplicates.append((k, sim))
        for k, sim in duplicates:
            drop(k, "duplicate", f"similarity {sim:.2f} to [{tag}] ({item.id})")
    used = sum(p.tokens for p in chosen) + (overhead if chosen else 0)
    return PackResult(tuple(chosen), tuple(dropped), used, budget_tokens, overhead, n)


def assert_same_result(got: PackResult, want: PackResult) -> None:
    def chosen(r: PackResult) -> list[tuple[object, ...]]:
        return [(p.id, p.tag, p.formatted, p.tokens, p.scores, p.justification) for p in r.chosen]

    assert chosen(got) == chosen(want)
    assert got.dropped == want.dropped  # ids, reasons, details, tokens and scores, in order
    assert (got.tokens_used, got.budget_tokens, got.section_overhead, got.candidates_evaluated) == (
        want.tokens_used,
        want.budget_tokens,
        want.section_overhead,
        want.candidates_evaluated,
    )


WORDS = ["backups", "invoices", "region", "nightly", "postgres", "keys", "hashed", "salt", "tenant", "deadline"]
DIRECTIONS = np.eye(6, dtype=np.float32)[:4] + 0.3


@st.composite
def candidates(draw: st.DrawFn) -> list[Candidate]:
    out = []
    for i in range(draw(st.integers(0, 40))):
        text = draw(
            st.one_of(
                st.lists(st.sampled_from([*WORDS, "the", "of", "a", "is"]), min_size=1, max_size=12).map(" ".join),
                st.sampled_from([*FACTS[:3], FACTS[0].upper(), "the", "  The ", "...", "", "of"]),
            )
        )
        shape = draw(st.sampled_from(["none", "near", "near", "near", "other-dim"]))
        embedding = None
        if shape == "near":
            noise = draw(st.lists(st.floats(-1, 1), min_size=6, max_size=6))
            scale = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
            embedding = DIRECTIONS[draw(st.integers(0, 3))] + scale * np.array(noise, dtype=np.float32)
        elif shape == "other-dim":
            embedding = np.ones(draw(st.sampled_from([5, 6])), dtype=np.float32)
        out.append(
            cand(
                f"m{i:02d}",
                text,
                origin=draw(st.sampled_from(["hot", "cold"])),
                relevance=draw(st.floats(0, 1)),
                created_at=NOW - timedelta(hours=draw(st.floats(0, 20_000))),
                usefulness=draw(st.sampled_from([0.0, 0.0, 0.5, -0.7])),
                importance=draw(st.floats(0, 1)),
                embedding=embedding,
                pinned=draw(st.booleans()) and draw(st.booleans()),
                rank=i + 1,
            )
        )
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    cands=candidates(),
    budget=st.integers(-10, 700),
    intent=st.sampled_from(list(Intent)),
    min_composite=st.sampled_from([0.0, 0.2, 0.35, 0.5]),
)
def test_pack_matches_the_plain_restatement_of_its_contract(
    counter: TokenCounter, cands: list[Candidate], budget: int, intent: Intent, min_composite: float
) -> None:
    rules = PackingRules(min_composite)
    scored = score_candidates(cands, intent=intent, counter=counter, now=NOW)
    got = pack(scored, budget_tokens=budget, intent=intent, counter=counter, rules=rules)
    want = reference_pack(scored, budget_tokens=budget, intent=intent, counter=counter, rules=rules)
    assert_same_result(got, want)


@pytest.mark.parametrize("with_embeddings", [False, True])
def test_words_decide_exactly_with_many_and_few_candidates_left(counter: TokenCounter, with_embeddings: bool) -> None:
    # 40 candidates: the first choices compare against many at once, the last ones against a few.
    rng = np.random.default_rng(3)
    cands = [
        cand(
            f"w{i:02d}",
            " ".join(rng.choice([*WORDS, "the", "of"], size=int(rng.integers(2, 10)))),
            relevance=float(rng.random()),
            embedding=rng.normal(size=8).astype(np.float32) if with_embeddings and i % 4 else None,
        )
        for i in range(36)
    ]
    cands += [cand("bare1", "the"), cand("bare2", " The "), cand("bare3", "of"), cand("twin", cands[0].text.upper())]
    scored = score_candidates(cands, intent=Intent.COMPLEX, counter=counter, now=NOW)
    got = pack(scored, budget_tokens=10_000, intent=Intent.COMPLEX, counter=counter, rules=PackingRules(0.0))
    want = reference_pack(scored, budget_tokens=10_000, intent=Intent.COMPLEX, counter=counter, rules=PackingRules(0.0))
    assert_same_result(got, want)
    reasons = {d.id: d.reason for d in got.dropped}
    assert "duplicate" in (reasons.get("twin"), reasons.get("w00"))
    assert "duplicate" in (reasons.get("bare1"), reasons.get("bare2"))  # equal once stripped and casefolded
    assert "bare3" not in reasons  # a different bare text is no duplicate
    assert any(p.scores.uniqueness < 1.0 for p in got.chosen)

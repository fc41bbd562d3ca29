"""Find, for each item of a write, the current memory it duplicates (exact or near), without a model.

Exact: the normalized-text hash (``memories_current_text_hash``). Near: the ``dedup_candidates``
nearest current memories of the same org, agent scope, kind and key (one query per scope of the write,
so the planner sees the scope: a small one is read through its index, a big one walked in HNSW), each judged by
:func:`service.memories.facts.similarity.compare` (cosine floor, then the words). Items of one batch are
compared with the batch's earlier items too, so a batch holding a fact twice writes it once.
Candidates close enough for the model but not merged by the rules are returned for consolidation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

import numpy as np
from pgvector import Vector

from service.db import TenantTx
from service.memories.facts.normalize import hash_words, tokens
from service.memories.facts.similarity import Thresholds, compare
from service.memories.facts.types import MESSAGE_KIND
from service.memories.types import MemoryIn
from service.settings import FactSettings

UPDATE_CUES = frozenset({"now", "anymore", "longer", "instead", "changed", "moved", "switched", "became",
                         "new", "currently", "updated", "stopped", "quit"})
"""Words of a free-text update ("now prefers medium roast", "no longer works there"): such a write is
handed to the model at a lower similarity than other writes (``consolidation_band`` - ``UPDATE_BAND_DROP``)."""
UPDATE_BAND_DROP = 0.15
_EF_SEARCH = "40"


@dataclass(slots=True)
class Match:
    """The memory an item duplicates: an existing one (``target``) or an earlier item of the batch
    (``batch_index``, resolved to that item's own target by the caller)."""

    cosine: float
    lexical: float
    reason: str
    target: UUID | None = None
    batch_index: int | None = None
    target_text: str = ""


@dataclass(slots=True)
class Candidate:
    id: UUID
    cosine: float
    lexical: float
    reason: str


@dataclass(slots=True)
class Findings:
    matches: list[Match | None]
    near: list[list[Candidate]] = field(default_factory=list)
    """Per item: candidates judged but not merged, closest first (for consolidation)."""


def is_fact(item: MemoryIn) -> bool:
    """Conversation turns (kind ``message``) are events: never deduplicated or superseded."""
    return item.kind != MESSAGE_KIND


def scope_of(item: MemoryIn) -> tuple[str | None, str, str | None]:
    return item.agent_id, item.kind, item.key


def thresholds(settings: FactSettings) -> Thresholds:
    return Thresholds(cosine=settings.dedup_cosine, max_synonyms=settings.dedup_max_synonyms)


async def find(tx: TenantTx, items: list[MemoryIn], embeddings: np.ndarray, words: list[tuple[str, ...]],
               check: list[bool], settings: FactSettings, *, exclude: tuple[UUID, ...] = ()) -> Findings:
    """Duplicates of the items where ``check`` is true (``embeddings`` L2-normalised and ``words``
    their :func:`~service.memories.facts.normalize.tokens`, one per item)."""
    limits = thresholds(settings)
    # The words are compared (~0.1 ms a pair) only where the cosine leaves a duplicate possible, or a
    # candidate worth the model's look: a 64-item batch is 2,016 pairs and 512 candidates.
    floor = limits.cosine
    if settings.consolidation_enabled:
        floor = min(floor, settings.consolidation_band - UPDATE_BAND_DROP)
    hashes = [hash_words(w) for w in words]
    matches: list[Match | None] = [None] * len(items)
    near: list[list[Candidate]] = [[] for _ in items]
    cosines = embeddings @ embeddings.T
    for j in range(len(items)):  # earlier items of the same batch first
        if not check[j]:
            continue
        for i in range(j):
            if check[i] and scope_of(items[i]) == scope_of(items[j]):
                cosine = float(cosines[i, j])
                if hashes[i] != hashes[j] and cosine < limits.cosine:
                    continue
                verdict = compare(words[i], words[j], cosine, limits)
                if hashes[i] == hashes[j] or verdict.duplicate:
                    matches[j] = Match(cosine, verdict.lexical, "exact" if hashes[i] == hashes[j] else verdict.reason,
                                       batch_index=i, target_text=items[i].text)
                    break
    todo = [i for i in range(len(items)) if check[i] and matches[i] is None]
    if not todo:
        return Findings(matches, near)
    exact = await tx.fetch("facts.exact_candidates", tx.org_id, [hashes[i] for i in todo], list(exclude))
    by_hash: dict[tuple[bytes, str | None, str, str | None], tuple[UUID, str]] = {}
    for row in exact:
        scope = (bytes(row["text_hash"]), row["agent_id"], row["kind"], row["key"])
        by_hash.setdefault(scope, (row["id"], row["text"]))
    for i in todo:
        hit = by_hash.get((hashes[i], *scope_of(items[i])))
        if hit is not None:
            matches[i] = Match(1.0, 1.0, "exact", target=hit[0], target_text=hit[1])
    todo = [i for i in todo if matches[i] is None]
    if not todo:
        return Findings(matches, near)
    await tx.set_local({"hnsw.iterative_scan": "relaxed_order", "hnsw.ef_search": _EF_SEARCH})
    scopes: dict[tuple[str | None, str, str | None], list[int]] = {}
    for i in todo:
        scopes.setdefault(scope_of(items[i]), []).append(i)
    for (agent_id, kind, key), members in scopes.items():
        rows = await tx.fetch("facts.near_candidates", tx.org_id, [Vector(embeddings[i]) for i in members],
                              agent_id, kind, key, settings.dedup_candidates, list(exclude))
        for row in sorted(rows, key=lambda r: (r["ord"], -r["cosine"])):
            i = members[row["ord"] - 1]
            if matches[i] is not None or row["cosine"] < floor:
                continue
            verdict = compare(words[i], tokens(row["text"]), float(row["cosine"]), limits)
            if verdict.duplicate:
                matches[i] = Match(float(row["cosine"]), verdict.lexical, verdict.reason, target=row["id"],
                                   target_text=row["text"])
            else:
                near[i].append(Candidate(row["id"], float(row["cosine"]), verdict.lexical, verdict.reason))
    return Findings(matches, near)


def for_consolidation(item: MemoryIn, candidates: list[Candidate], settings: FactSettings) -> list[Candidate]:
    """The candidates worth a model's look: within ``consolidation_band`` (lower for an update's words)."""
    band = settings.consolidation_band
    if UPDATE_CUES.intersection(tokens(item.text)):
        band -= UPDATE_BAND_DROP
    return [c for c in candidates if c.cosine >= band]

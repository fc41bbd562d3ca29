"""``modes`` search: exact, path, symbol, lexical and semantic lookup as modes of one machine.

A request that names ``modes`` runs each of them concurrently (the engine gives each its own pooled,
org-scoped, deadline-bounded transaction), maps every mode's hits into one :class:`ModeHit` shape and
fuses them by memory id with RRF, so an exact hit and a semantic hit on the same chunk reinforce each
other. This module holds the per-mode database work (one call per mode on a ``TenantTx``) and the pure
parts: filter mapping, hit mapping, excerpts and the fusion.

Filters apply to every mode. ``lexical`` and ``semantic`` take the request's filters as the strategy
search does. The lookup modes (``exact``/``path``/``symbol``, :mod:`service.documents.lookup`) push
down what their queries understand (``agent_id``, ``source_prefix``, ``levels``, a string
``metadata.collection`` and ``collections``) and every hit then passes the full
filters (the branches' own filter arguments, plus expiry) in ``retrieval.mode_filter`` on the same
connection; when some filter cannot be pushed down, the mode over-fetches
(:data:`RESIDUAL_OVERFETCH`) so the post-filter still leaves enough. A ``kinds`` filter without
``document_chunk`` (or ``sources`` without ``documents``) skips the lookup modes: they only return
document chunks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from uuid import UUID

import numpy as np
import numpy.typing as npt

from service.db import TenantTx
from service.documents import lookup
from service.documents.globs import compile_path
from service.documents.languages import split_lines
from service.documents.lookup import EXCERPT_LINES, LookupFilters, LookupHit, LookupMode, applicable_modes
from service.memories.facts.types import is_current
from service.memories.types import MessageRef
from service.retrieval import branches
from service.retrieval.filters import currency_args, filter_args, source_args
from service.retrieval.hits import Hit
from service.retrieval.score import hit_score
from service.retrieval.types import MODES, Mode, ModeRank, SearchFilters, SearchRequest, SearchResult

DOCUMENT_KIND: Final = "document_chunk"
LOOKUP_MODES: Final[tuple[LookupMode, ...]] = ("exact", "path", "symbol")
PRIORITY: Final[dict[Mode, int]] = {"exact": 0, "symbol": 1, "path": 2, "lexical": 3, "semantic": 4}
"""Ties for a result's ``mode`` and its excerpt: the more literal mode wins (exact shows matched lines)."""
RESIDUAL_OVERFETCH: Final = 4
MAX_LOOKUP_FETCH: Final = 1000


@dataclass(frozen=True, slots=True)
class ModeHit:
    """One row found by one mode, in the common shape every mode maps into."""

    id: UUID
    mode: Mode
    rank: int
    score: float
    text: str
    kind: str
    source: str | None
    level: int | None
    breadcrumb: str | None
    line_start: int | None
    line_end: int | None
    excerpt: str
    excerpt_line_start: int | None
    excerpt_line_end: int | None
    agent_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    occurred_at: datetime | None = None
    superseded_by: UUID | None = None
    valid_until: datetime | None = None
    message: MessageRef | None = None


# ------------------------------------------------------------------------------------ planning


def resolve_modes(request: SearchRequest, *, embedder_available: bool) -> tuple[list[Mode], str]:
    """The modes to run, in canonical order, and the reason reported in the response."""
    if request.modes == "all":
        picked: set[Mode] = {*applicable_modes(request.query), "lexical"}
        note = ""
        if embedder_available:
            picked.add("semantic")
        else:
            note = "; semantic skipped: the embedder failed recently"
        modes = [m for m in MODES if m in picked]
        return modes, f"modes: all that apply to the query ({', '.join(modes)}){note}"
    assert request.modes is not None
    modes = [m for m in MODES if m in set(request.modes)]
    if "path" in modes:
        compile_path(request.query)  # an invalid glob is the caller's 400, not a failed branch's 503
    return modes, f"modes requested ({', '.join(modes)})"


def lookup_filters(filters: SearchFilters) -> tuple[LookupFilters | None, bool]:
    """The filters the lookup queries take, and whether some filter is left for the post-filter only.

    None when the lookup modes cannot return anything (``kinds`` excludes document chunks).
    """
    if filters.kinds is not None and DOCUMENT_KIND not in filters.kinds:
        return None, False
    if filters.sources is not None and "documents" not in filters.sources:
        return None, False
    metadata = dict(filters.metadata or {})
    collection = metadata.pop("collection", None)
    if not isinstance(collection, str):
        if collection is not None:
            metadata["collection"] = collection
        collection = None
    named = filters.collections
    if collection is not None:  # metadata.collection and collections both hold: the one, if the list names it
        if named is not None and collection not in named:
            return None, False
        named = [collection]
    residual = bool(metadata) or any(
        value is not None for value in (filters.created_after, filters.created_before, filters.occurred_after,
                                        filters.occurred_before))
    levels = tuple(filters.levels) if filters.levels is not None else None
    return LookupFilters(collections=None if named is None else tuple(named), agent_id=filters.agent_id,
                         path_prefix=filters.source_prefix, levels=levels), residual


# ---------------------------------------------------------------------------------- mode work


async def run_lookup(tx: TenantTx, mode: LookupMode, request: SearchRequest, *, limit: int) -> list[ModeHit]:
    """One lookup mode with the request's filters; hits re-ranked after the full post-filter."""
    pushed, residual = lookup_filters(request.filters)
    if pushed is None or (mode == "symbol" and pushed.levels is not None and 1 not in pushed.levels):
        return []  # symbol lookup only returns L1 sections
    fetch = min(limit * RESIDUAL_OVERFETCH, MAX_LOOKUP_FETCH) if residual else limit
    hits = await lookup.run_mode(tx, mode, request.query, limit=fetch, filters=pushed,
                                 case_sensitive=request.case_sensitive)
    if not hits:
        return []
    rows = await tx.fetch("retrieval.mode_filter", tx.org_id, [h.id for h in hits], *filter_args(request.filters),
                          *source_args(request.filters), *currency_args(request.filters))
    passing = {r["id"]: r for r in rows}
    kept = [h for h in hits if h.id in passing][:limit]
    return [from_lookup(h, mode, rank, passing[h.id]) for rank, h in enumerate(kept, start=1)]


async def run_lexical(tx: TenantTx, request: SearchRequest, *, limit: int, postings_per_term: int, k1: float,
                      b: float, context_weight: float) -> list[ModeHit]:
    hits = await branches.lexical_bm25(tx, request.query, request.filters, limit=limit,
                                       postings_per_term=postings_per_term, k1=k1, b=b, context_weight=context_weight)
    return await _with_spans(tx, hits, "lexical")


async def run_semantic(tx: TenantTx, request: SearchRequest, embedding: npt.NDArray[np.float32], *, limit: int,
                       ef_search: int) -> list[ModeHit]:
    hits = await branches.semantic_hnsw(tx, embedding, request.filters, limit=limit, ef_search=ef_search)
    return await _with_spans(tx, hits, "semantic")


async def _with_spans(tx: TenantTx, hits: Sequence[Hit], mode: Mode) -> list[ModeHit]:
    spans: dict[UUID, tuple[int | None, int | None]] = {}
    if hits:
        rows = await tx.fetch("retrieval.line_spans", tx.org_id, [h.id for h in hits])
        spans = {r["id"]: (r["line_start"], r["line_end"]) for r in rows}
    return [from_branch(h, mode, rank, *spans.get(h.id, (None, None))) for rank, h in enumerate(hits, start=1)]


# ------------------------------------------------------------------------------------- mapping


def from_lookup(h: LookupHit, mode: Mode, rank: int, row: Mapping[str, Any] | None = None) -> ModeHit:
    """``row``: the hit's ``retrieval.mode_filter`` row (agent, metadata, event time)."""
    return ModeHit(id=h.id, mode=mode, rank=rank, score=h.score,
                   text=h.text, kind=DOCUMENT_KIND, source=h.path, level=h.level, breadcrumb=h.breadcrumb,
                   line_start=h.line_start, line_end=h.line_end, excerpt=h.excerpt,
                   excerpt_line_start=h.excerpt_line_start, excerpt_line_end=h.excerpt_line_end,
                   agent_id=None if row is None else row["agent_id"],
                   metadata={} if row is None else row["metadata"],
                   occurred_at=None if row is None else row["occurred_at"],
                   superseded_by=None if row is None else row["superseded_by"],
                   valid_until=None if row is None else row["valid_until"])


def first_lines(text: str, level: int | None, line_start: int | None,
                line_end: int | None) -> tuple[str, int | None, int | None]:
    """The excerpt of a row no literal match located: its first lines, with their file line numbers."""
    lines = split_lines(text)[:EXCERPT_LINES]
    excerpt = "".join(lines)
    if line_start is None or line_end is None:
        return excerpt, None, None
    if level == 0:  # an L0 summary is generated text: its lines are not file lines
        return excerpt, line_start, line_end
    return excerpt, line_start, min(line_start + max(len(lines), 1) - 1, line_end)


def from_branch(h: Hit, mode: Mode, rank: int, line_start: int | None, line_end: int | None) -> ModeHit:
    excerpt, ex_start, ex_end = first_lines(h.text, h.level, line_start, line_end)
    score = h.score if math.isfinite(h.score) else 0.0  # a NaN would reach the response as null
    return ModeHit(id=h.id, mode=mode, rank=rank, score=score, text=h.text, kind=h.kind, source=h.source,
                   level=h.level, breadcrumb=h.breadcrumb, line_start=line_start, line_end=line_end,
                   excerpt=excerpt, excerpt_line_start=ex_start, excerpt_line_end=ex_end,
                   agent_id=h.agent_id, metadata=h.metadata, occurred_at=h.occurred_at, message=h.message,
                   superseded_by=h.superseded_by, valid_until=h.valid_until)


# -------------------------------------------------------------------------------------- fusion


def _best(found: Sequence[ModeHit]) -> ModeHit:
    return min(found, key=lambda h: (h.rank, PRIORITY[h.mode]))


def fuse(lists: Mapping[Mode, Sequence[ModeHit]], *, k: int, limit: int) -> list[SearchResult]:
    """RRF across modes by memory id: ``sum(1 / (k + rank))`` over the modes that found a row.

    Ties break by the best rank, then the more literal mode, then id, so the order is deterministic.
    """
    found: dict[UUID, list[ModeHit]] = {}
    for mode in MODES:
        for h in lists.get(mode, ()):
            entry = found.setdefault(h.id, [])
            if all(o.mode != mode for o in entry):  # a mode lists a row once; keep its best rank if not
                entry.append(h)
    scores = {i: sum(1.0 / (k + h.rank) for h in hs) for i, hs in found.items()}

    def order(i: UUID) -> tuple[float, int, int, str]:
        best = _best(found[i])
        return -scores[i], best.rank, PRIORITY[best.mode], str(i)

    return [_result(found[i], scores[i]) for i in sorted(found, key=order)[:limit]]


def _literal(hit: ModeHit) -> float:
    """A literal mode's evidence for ``score``: an exact substring match is certain; symbol and path
    matches score themselves in [0, 1]."""
    if hit.mode == "exact":
        return 1.0
    return hit.score if hit.mode in ("symbol", "path") else 0.0


def _result(found: list[ModeHit], score: float) -> SearchResult:
    best = _best(found)
    by_mode = {h.mode: h for h in found}
    literal = min(found, key=lambda h: PRIORITY[h.mode])  # exact's excerpt shows the matched lines
    spanned = next((h for h in sorted(found, key=lambda h: PRIORITY[h.mode]) if h.line_start is not None), best)
    lexical, semantic = by_mode.get("lexical"), by_mode.get("semantic")
    return SearchResult(
        id=best.id, text=best.text, kind=best.kind, source=best.source, level=best.level,
        breadcrumb=best.breadcrumb, final_score=score,
        score=hit_score(None if lexical is None else lexical.score, None if semantic is None else semantic.score,
                        literal=max((_literal(h) for h in found), default=0.0)),
        lexical_rank=None if lexical is None else lexical.rank,
        semantic_rank=None if semantic is None else semantic.rank,
        lexical_score=None if lexical is None else lexical.score,
        semantic_score=None if semantic is None else semantic.score,
        fusion_method="rrf", agent_id=best.agent_id, metadata=best.metadata, occurred_at=best.occurred_at,
        current=is_current(best.superseded_by, best.valid_until), superseded_by=best.superseded_by,
        valid_until=best.valid_until, message=best.message, path=best.source, line_start=spanned.line_start,
        line_end=spanned.line_end,
        excerpt=literal.excerpt, excerpt_line_start=literal.excerpt_line_start,
        excerpt_line_end=literal.excerpt_line_end, mode=best.mode,
        modes=[ModeRank(mode=h.mode, rank=h.rank, score=h.score)
               for h in sorted(found, key=lambda h: (h.rank, PRIORITY[h.mode]))],
    )

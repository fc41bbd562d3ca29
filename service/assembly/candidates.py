"""Candidates for ranking from the two memory branches: the hot set's items and the cold search's rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

import asyncpg
import numpy as np
import numpy.typing as npt

from service.assembly.hot import HotItem, HotRead, as_array
from service.assembly.scoring import Candidate, LineSpan, scale_to_unit
from service.assembly.terms import content_terms
from service.conversations.context import Turn, said
from service.retrieval import SearchResponse


@dataclass(frozen=True, slots=True)
class ColdResult:
    """The cold branch's answer: its candidates and the search response they came from."""

    candidates: list[Candidate]
    search: SearchResponse


def hot_relevance(items: Sequence[HotItem], query: str, query_vector: npt.NDArray[np.float32] | None) -> list[float]:
    vectors = [item.vector() for item in items]
    if query_vector is not None and all(v is not None and v.shape == query_vector.shape for v in vectors):
        if not items:
            return []
        matrix = np.stack(vectors)  # type: ignore[arg-type]
        norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query_vector))
        cosines = (matrix @ query_vector) / np.where(norms > 0, norms, 1.0)
        return [max(0.0, min(1.0, float(c))) for c in cosines]
    wanted = content_terms(query)
    if not wanted:
        return [0.0] * len(items)
    return [len(wanted & content_terms(item.text)) / len(wanted) for item in items]


def hot_candidates(read: HotRead, query: str, query_vector: npt.NDArray[np.float32] | None) -> list[Candidate]:
    relevance = hot_relevance(read.items, query, query_vector)
    order = sorted(range(len(read.items)), key=lambda i: -relevance[i])
    ranks = {i: rank for rank, i in enumerate(order, start=1)}
    return [
        Candidate(id=item.id, text=item.text, origin="hot", relevance=relevance[i], score=relevance[i],
                  created_at=item.created_at,
                  occurred_at=item.occurred_at,
                  last_accessed_at=item.last_accessed_at, importance=item.importance, usefulness=item.usefulness,
                  embedding=item.vector(), pinned=item.pinned, rank=ranks[i])
        for i, item in enumerate(read.items)
    ]


def line_span(row: asyncpg.Record) -> LineSpan | None:
    """The file lines a document chunk covers (None for other memories); an L2 chunk of one line whose
    text does not end in a newline is ``partial``, a piece of an over-long line before its last."""
    path, start, end, level = row["source_path"], row["line_start"], row["line_end"], row["level"]
    if path is None or start is None or end is None or level is None:
        return None
    partial = level == 2 and start == end and not str(row["text"]).endswith("\n")
    metadata = row["metadata"] or {}
    collection, digest = metadata.get("collection"), metadata.get("content_hash")
    return LineSpan(path, start, end, level, chunk=str(row["id"]), partial=partial,
                    collection=collection if isinstance(collection, str) else None,
                    content_hash=digest if isinstance(digest, str) else None)


def cold_text(row: asyncpg.Record) -> str:
    """What a cold row says in a context: a conversation's message with who said it before its words
    (``Melanie: I'm off to go swimming``), any other memory as written."""
    if row["conversation_id"] is None:
        return str(row["text"])
    return said(Turn(row["session_id"], row["speaker"], row["role"], row["text"]))


def cold_candidates(rows: list[asyncpg.Record], scores: dict[UUID, float],
                    evidence: dict[UUID, float]) -> list[Candidate]:
    """``scores``: the search's ranking scores (scaled so the best is 1); ``evidence``: its hits' ``score``."""
    relevance = scale_to_unit([scores[r["id"]] for r in rows])
    return [
        Candidate(id=str(r["id"]), text=cold_text(r), origin="cold", relevance=relevance[i],
                  score=evidence[r["id"]], created_at=r["created_at"],
                  occurred_at=r["occurred_at"],
                  last_accessed_at=r["last_accessed_at"], importance=float(r["importance"]),
                  usefulness=float(r["usefulness"]), embedding=as_array(r["embedding"]), pinned=bool(r["pinned"]),
                  rank=i + 1, lines=line_span(r))
        for i, r in enumerate(rows)
    ]

"""``score``: how strongly a result matches the query, in [0, 1], readable without its neighbours.

The fusion's own score (``final_score``) only orders one result list: RRF gives about 0.03, z-score
fusion a few standard deviations, and both change when another candidate joins the list. ``score``
is built from each hit's own evidence instead, so it does not depend on the fusion method, the other
candidates or the call:

* semantic evidence: the cosine similarity of the query's and the memory's embeddings, below 0 as 0;
* lexical evidence: the memory's BM25 score saturated as ``bm25 / (bm25 + 10)`` (a BM25 of 10, about
  two rare query terms matched in a short memory, reads 0.5; more matching terms approach 1);
* literal evidence (``modes`` search over documents): 1 for an ``exact`` substring match, the
  ``symbol`` and ``path`` modes' own scores (already in [0, 1]).

``score`` is the best of the evidence a hit has, rounded to 4 decimals: 0 means no evidence, 1 a
perfect match on one side. The same memory for the same query gets the same ``score`` under every
fusion method; the ranking (``final_score``, or the reranker's) may still order hits differently.
"""

from __future__ import annotations

import math
from typing import Final

LEXICAL_HALF_SATURATION: Final = 10.0
"""The BM25 score that reads 0.5 as lexical evidence."""


def lexical_evidence(bm25: float | None) -> float:
    if bm25 is None or not math.isfinite(bm25) or bm25 <= 0.0:
        return 0.0
    return bm25 / (bm25 + LEXICAL_HALF_SATURATION)


def semantic_evidence(cosine: float | None) -> float:
    if cosine is None or not math.isfinite(cosine):
        return 0.0
    return min(1.0, max(0.0, cosine))


def hit_score(lexical: float | None, semantic: float | None, literal: float = 0.0) -> float:
    """A result's ``score`` from its BM25 score, its cosine similarity and any literal match (see above)."""
    return round(max(lexical_evidence(lexical), semantic_evidence(semantic), min(1.0, max(0.0, literal))), 4)

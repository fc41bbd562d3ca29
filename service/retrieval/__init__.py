"""Hybrid retrieval: BM25-in-SQL lexical, HNSW semantic, z-score/RRF/convex fusion, the lexical-first cascade,
the ``auto`` optimizer and fallbacks, behind one request and one result shape; with ``modes``, the
document lookup modes (exact, path, symbol) beside lexical and semantic, fused by RRF (``modes.py``).

Other features call :meth:`RetrievalEngine.search` on ``services.extras["retrieval"]``
(see :func:`engine_of`).
"""

from service.retrieval.engine import RetrievalEngine
from service.retrieval.handlers import SearchController, engine_of
from service.retrieval.types import (
    MODES,
    Mode,
    ModeMetrics,
    ModeRank,
    SearchFilters,
    SearchMetrics,
    SearchRequest,
    SearchResponse,
    SearchResult,
    SearchTuning,
)

__all__ = [
    "MODES",
    "Mode",
    "ModeMetrics",
    "ModeRank",
    "RetrievalEngine",
    "SearchController",
    "SearchFilters",
    "SearchMetrics",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "SearchTuning",
    "engine_of",
]

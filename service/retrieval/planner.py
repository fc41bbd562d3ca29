"""The ``auto`` optimizer: pick a strategy from the query, the filters and what is available.

Rules, first match wins (each yields the reason reported in the response):

1. the embedder failed moments ago -> ``lexical`` (do not make every request wait for it again),
   or it is busy (``embedder_max_in_flight`` query embeddings already running or queued) ->
   ``lexical`` (under a burst, waiting in its queue would only time out; shedding it keeps the CPU
   for the queries that can answer);
2. a quoted phrase, or a short query made of identifiers/paths -> ``lexical`` (exact tokens matter,
   embeddings blur ``parse_config`` into "configuration parsing");
3. a selective filter (path prefix, metadata, time range, level) -> ``lexical_first``: a filtered
   HNSW walk loses recall when few rows pass, while the cascade ranks exactly the lexical matches;
4. otherwise ``hybrid`` (best quality on natural-language queries, SciFact and conversations: see
   docs/retrieval.md "Decisions"); how it fuses (``tuning.fusion``, by default z-scores or RRF, see
   :func:`service.retrieval.fusion.auto`) is appended to the reason by the engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from service.retrieval.types import SearchFilters, SearchRequest, UsedStrategy

_QUOTED = re.compile(r'"[^"]+"')
_IDENTIFIER = re.compile(
    r"""(?x)
      \w+(?:/\w+)+            # a/b/c paths
    | \w+\.[A-Za-z]{1,5}\b    # file.ext, module.attr
    | \w+::\w+                # a::b
    | \b[a-z]+_[a-z0-9_]+\b   # snake_case
    | \b[a-z]+[A-Z]\w*        # camelCase
    | \b[A-Z][a-z]+[A-Z]\w*   # PascalCase with an inner capital
    """
)
SHORT_QUERY_WORDS = 4
IDENTIFIER_CHARS: Final = 256
"""How much of a word ``_IDENTIFIER`` reads: its patterns try each start of a word against the rest of it
(time growing with the square of its length: a 4,000-digit word took ~0.3 s of the event loop)."""
_SELECTIVE = ("source_prefix", "metadata", "created_after", "created_before", "occurred_after", "occurred_before",
              "levels")


@dataclass(frozen=True, slots=True)
class Plan:
    strategy: UsedStrategy
    reason: str


def looks_like_identifier_query(query: str) -> bool:
    words = query.split()
    return 0 < len(words) <= SHORT_QUERY_WORDS and any(_IDENTIFIER.search(w[:IDENTIFIER_CHARS]) for w in words)


EMBEDDER_DOWN: Final = "auto: the embedder failed recently, lexical only"
EMBEDDER_BUSY: Final = "auto: the embedder is busy with other queries, lexical only"


def choose(query: str, filters: SearchFilters, *, embedder_available: bool, embedder_busy: bool = False) -> Plan:
    if not embedder_available:
        return Plan("lexical", EMBEDDER_DOWN)
    if embedder_busy:
        return Plan("lexical", EMBEDDER_BUSY)
    if _QUOTED.search(query):
        return Plan("lexical", "auto: quoted phrase, exact terms matter")
    if looks_like_identifier_query(query):
        return Plan("lexical", "auto: short identifier/path query, exact terms matter")
    selective = [name for name in _SELECTIVE if getattr(filters, name) is not None]
    if selective:
        return Plan("lexical_first", f"auto: selective filters ({', '.join(selective)}) favour the cascade")
    return Plan("hybrid", "auto: natural-language query, hybrid")


def planned_strategy(request: SearchRequest) -> UsedStrategy:
    """What a search plans before anything is known about load or the embedder: ``modes`` for a modes
    search, the caller's strategy, or ``auto``'s choice for the query and filters with a healthy embedder."""
    if request.modes is not None:
        return "modes"
    if request.strategy != "auto":
        return request.strategy
    return choose(request.query, request.filters, embedder_available=True).strategy

"""A small in-process LRU of query embeddings: agents repeat queries, and embedding is the slowest step.

Entries are keyed by ``(org_id, text)``: an org's first search of a phrase is always a miss, even when
another org searched it a moment ago, so the embedding time a search reports (``metrics.embedding_ms``,
``metrics.embedding_cached``) says nothing about other orgs' queries. The bound (``capacity``) is one
global LRU over all orgs: memory stays fixed however many orgs search; an org flooding distinct
phrases can only push entries out (everyone's next search of them is a miss again), which reveals
nothing about what anyone searched.
"""

from __future__ import annotations

from collections import OrderedDict
from uuid import UUID

import numpy as np
import numpy.typing as npt
from prometheus_client import Counter

CacheKey = tuple[UUID, str]

LOOKUPS = Counter("pgcontext_query_embedding_cache", "Query-embedding cache lookups of searches and assembly cold "
                  "searches (a miss embeds the query): the hit share says how much embedding the load repeated",
                  ["outcome"])
"""Labelled by outcome only (never an org), like the other metrics; process-wide over all engines."""
_HIT, _MISS = LOOKUPS.labels("hit"), LOOKUPS.labels("miss")


class QueryEmbeddingCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[CacheKey, npt.NDArray[np.float32]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def peek(self, org_id: UUID, text: str) -> npt.NDArray[np.float32] | None:
        """The cached vector without touching the LRU order or the counters."""
        return self._items.get((org_id, text))

    def get(self, org_id: UUID, text: str) -> npt.NDArray[np.float32] | None:
        key = (org_id, text)
        vector = self._items.get(key)
        if vector is None:
            self.misses += 1
            _MISS.inc()
        else:
            self.hits += 1
            _HIT.inc()
            self._items.move_to_end(key)
        return vector

    def put(self, org_id: UUID, text: str, vector: npt.NDArray[np.float32]) -> None:
        if self.capacity <= 0:
            return
        key = (org_id, text)
        self._items[key] = vector
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

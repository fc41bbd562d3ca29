"""A small in-process LRU of query embeddings: agents repeat queries, and embedding is the slowest step."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt


class QueryEmbeddingCache:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()

    def get(self, text: str) -> npt.NDArray[np.float32] | None:
        vector = self._items.get(text)
        if vector is not None:
            self._items.move_to_end(text)
        return vector

    def put(self, text: str, vector: npt.NDArray[np.float32]) -> None:
        if self.capacity <= 0:
            return
        self._items[text] = vector
        self._items.move_to_end(text)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)

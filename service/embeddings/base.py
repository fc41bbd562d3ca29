"""What every embedding provider offers the rest of the service."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt


class EmbeddingError(Exception):
    """The provider could not produce embeddings (bad response, timeout, runtime failure, ...)."""


class Embedder(Protocol):
    name: str
    """Identifies model and variant, e.g. ``local:all-MiniLM-L6-v2:int8``; store it next to vectors."""
    dim: int

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Return a C-contiguous ``(len(texts), dim)`` float32 array of L2-normalised rows, in input order."""
        ...

    async def aclose(self) -> None: ...


def l2_normalise(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.ascontiguousarray(vectors / np.maximum(norms, np.float32(1e-12)), dtype=np.float32)


def check_texts(texts: Sequence[str]) -> None:
    # A bare str is a Sequence[str] too, and would silently be embedded one character at a time.
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not a single str")

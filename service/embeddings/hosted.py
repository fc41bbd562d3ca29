"""Embeddings from any OpenAI-compatible ``POST {api_base}/embeddings`` endpoint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from service.embeddings.base import EmbeddingError, check_texts, l2_normalise


class OpenAIEmbedder:
    def __init__(
        self,
        api_base: str,
        *,
        model: str,
        dim: int,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout_s: float = 10.0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.name = f"openai:{model}"
        self.dim = dim
        self._model = model
        self._batch_size = batch_size
        self._url = f"{api_base.rstrip('/')}/embeddings"
        # text-embedding-3-* models are natively wider and shorten on request; other
        # OpenAI-compatible servers may reject the field, so only those models get it.
        self._extra: dict[str, Any] = {"dimensions": dim} if model.startswith("text-embedding-3") else {}
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s))

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Sequential batches bound what one call can hold against the provider's rate limits.
        batches = [
            await self._embed_batch(list(texts[start : start + self._batch_size]))
            for start in range(0, len(texts), self._batch_size)
        ]
        return l2_normalise(np.concatenate(batches))

    async def _embed_batch(self, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            response = await self._client.post(self._url, json={"model": self._model, "input": texts, **self._extra})
        except httpx.TimeoutException as exc:
            raise EmbeddingError(f"{self._url} timed out after {self._timeout_s:g}s") from exc
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"{self._url} request failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise EmbeddingError(f"{self._url} returned HTTP {response.status_code}: {_error_detail(response)}")
        try:
            payload = response.json()
        except ValueError as exc:
            raise EmbeddingError(f"{self._url} returned malformed JSON: {response.text[:200]!r}") from exc
        try:
            return _parse_embeddings(payload, len(texts), self.dim)
        except KeyError as exc:
            raise EmbeddingError(f"{self._url} returned an unexpected response: missing field {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(f"{self._url} returned an unexpected response: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()


def _parse_embeddings(payload: Any, count: int, dim: int) -> npt.NDArray[np.float32]:
    """Vectors in input order; providers may return ``data`` in any order, ``index`` is authoritative."""
    data = payload["data"]
    if not isinstance(data, list) or len(data) != count:
        got = len(data) if isinstance(data, list) else type(data).__name__
        raise ValueError(f"expected {count} embeddings in 'data', got {got}")
    out = np.empty((count, dim), dtype=np.float32)
    seen: set[int] = set()
    for item in data:
        index = item["index"]
        if not isinstance(index, int) or not 0 <= index < count or index in seen:
            raise ValueError(f"invalid or duplicate index {index!r}")
        seen.add(index)
        vector = np.asarray(item["embedding"], dtype=np.float32)
        if vector.shape != (dim,):
            raise ValueError(
                f"embedding has dimension {vector.shape[0] if vector.ndim == 1 else vector.shape}, "
                f"expected {dim} (the configured embedding dim must match the model's)"
            )
        if not np.isfinite(vector).all() or not vector.any():
            raise ValueError(f"embedding {index} is zero or not finite")
        out[index] = vector
    return out


def _error_detail(response: httpx.Response) -> str:
    # OpenAI-style errors carry {"error": {"message": ...}}; anything else is shown truncated.
    try:
        message = response.json()["error"]["message"]
        if isinstance(message, str):
            return message
    except (ValueError, KeyError, TypeError):
        pass
    return response.text[:200] or response.reason_phrase

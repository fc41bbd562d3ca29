"""Embedding providers: the local all-MiniLM-L6-v2 ONNX model or an OpenAI-compatible API."""

from __future__ import annotations

from pathlib import Path

from service.embeddings.base import Embedder, EmbeddingError
from service.embeddings.bert_spec import MINILM_L6
from service.embeddings.hosted import OpenAIEmbedder
from service.embeddings.local import QUERY_THREADS, LocalEmbedder
from service.embeddings.onnx_model import MODEL_NAME, bundled_model_files, ensure_model
from service.settings import EmbeddingSettings

__all__ = ["Embedder", "EmbeddingError", "LocalEmbedder", "OpenAIEmbedder", "build_embedder"]


def build_embedder(settings: EmbeddingSettings, data_dir: Path) -> Embedder:
    """Create the configured provider.

    Blocking: the first local start builds the ONNX model (a few seconds); later starts load it from
    ``<data_dir>/models/``. Call it from a thread when an event loop is running.
    """
    if settings.provider == "openai":
        if not settings.api_base:
            raise ValueError(
                "embedding provider 'openai' needs an API base URL: set PGCONTEXT_EMBEDDING_API_BASE, "
                "e.g. https://api.openai.com/v1"
            )
        return OpenAIEmbedder(
            settings.api_base,
            model=settings.model,
            dim=settings.dim,
            api_key=settings.api_key,
            batch_size=settings.batch_size,
            timeout_s=settings.timeout_s,
        )
    if settings.provider == "local":
        if settings.dim != MINILM_L6.hidden:
            raise ValueError(
                f"the local {MODEL_NAME} model produces {MINILM_L6.hidden}-d embeddings, "
                f"but the embedding dim is set to {settings.dim}"
            )
        files = bundled_model_files()
        model_path = ensure_model(data_dir, quantize=settings.quantize, files=files)
        return LocalEmbedder(
            model_path,
            files.tokenizer,
            name=f"local:{MODEL_NAME}:{'int8' if settings.quantize else 'fp32'}",
            batch_size=settings.batch_size,
            threads=settings.threads,
            bulk_nice=settings.bulk_nice,
            query_threads=settings.query_concurrency or QUERY_THREADS,
        )
    raise ValueError(f"unknown embedding provider {settings.provider!r}: expected 'local' or 'openai'")

"""all-MiniLM-L6-v2 on onnxruntime, off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime
from tokenizers import Tokenizer

from service.embeddings.base import EmbeddingError, check_texts
from service.embeddings.bert_graph import MINILM_L6, OUTPUT_NAME, input_feed

MAX_TOKENS = 256
"""all-MiniLM-L6-v2 was trained on at most 256 word pieces ([CLS] and [SEP] included)."""
QUERY_BATCH = 4
"""Calls with at most this many texts (search queries) take the single-threaded query lane."""


class LocalEmbedder:
    def __init__(
        self,
        model_path: Path,
        tokenizer_path: Path,
        *,
        name: str,
        batch_size: int = 64,
        threads: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.name = name
        self.dim = MINILM_L6.hidden
        self._batch_size = batch_size
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # tokenizer.json ships with fixed 128-token padding/truncation; we truncate at the model's 256 and
        # pad each batch ourselves, after sorting by length.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        # Two lanes, each a session on one worker thread. Batches (ingest) use the intra-op pool
        # (``threads``; 0 = onnxruntime's choice); queries (at most QUERY_BATCH texts) use one thread,
        # which is as fast for a single short text (4.0 vs 4.2 ms here) at two thirds of the CPU, and
        # never wait behind a batch: a 256-text batch takes ~0.5 s. Within a lane calls queue up
        # instead of oversubscribing the cores.
        self._session = _session(model_path, threads)
        self._query_session = _session(model_path, 1)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._query_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-query")
        self._closed = False

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        check_texts(texts)
        if self._closed:
            raise EmbeddingError(f"{self.name}: embedder is closed")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        loop = asyncio.get_running_loop()
        if len(texts) <= QUERY_BATCH:
            return await loop.run_in_executor(self._query_executor, self._embed_with, self._query_session, list(texts))
        return await loop.run_in_executor(self._executor, self._embed_with, self._session, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Blocking variant for benchmarks and offline tools; the service uses :meth:`embed`."""
        return self._embed_with(self._query_session if len(texts) <= QUERY_BATCH else self._session, texts)

    def _embed_with(self, session: onnxruntime.InferenceSession, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        try:
            token_ids = [encoding.ids for encoding in self._tokenizer.encode_batch(list(texts))]
            # Batching similar lengths together keeps padding (wasted attention work) small.
            order = sorted(range(len(token_ids)), key=lambda i: len(token_ids[i]))
            result = np.empty((len(token_ids), self.dim), dtype=np.float32)
            for start in range(0, len(order), self._batch_size):
                rows = order[start : start + self._batch_size]
                feed = input_feed([token_ids[i] for i in rows])
                result[rows] = session.run([OUTPUT_NAME], feed)[0]
        except Exception as exc:
            raise EmbeddingError(f"{self.name}: local inference failed: {exc}") from exc
        return result

    async def aclose(self) -> None:
        self._closed = True
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        await asyncio.to_thread(self._query_executor.shutdown, wait=True)


def _session(model_path: Path, threads: int) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle intra-op threads otherwise busy-wait between runs, burning the cores Postgres shares.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])

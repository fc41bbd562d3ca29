"""all-MiniLM-L6-v2 on onnxruntime, off the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime
from tokenizers import Tokenizer

from service.embeddings.base import EmbeddingError, check_texts
from service.embeddings.bert_spec import MINILM_L6, OUTPUT_NAME, input_feed

MAX_TOKENS = 256
"""all-MiniLM-L6-v2 was trained on at most 256 word pieces ([CLS] and [SEP] included)."""
QUERY_BATCH = 4
"""Calls with at most this many texts (search queries) take the query lane (its threads, one intra-op thread each)."""
LONG_QUERY_CHARS = 512
"""A query this long (about 128 word pieces and more, up to the model's cut at ~37 ms of CPU against
~2 ms for a short one) embeds on the long-query thread, at CPU niceness ``LONG_QUERY_NICE``: on a
busy machine the kernel serves short queries, the event loop and Postgres first, so one org's long
queries cost others little (the noisy-neighbour benchmark); on an idle one it runs at full speed."""
LONG_QUERY_NICE = 5
"""Niceness of the long-query thread above the process's (see ``LONG_QUERY_CHARS``)."""
QUERY_THREADS = 3
"""Query-lane threads (and so query embeddings at once, ``service.embeddings.lanes``) by default.
One org may hold all but one, so two slots serialised one org's queries; three let two of its
queries embed at once with a third kept for the others (docs/operations.md, "Decisions")."""


class LocalEmbedder:
    def __init__(
        self,
        model_path: Path,
        tokenizer_path: Path,
        *,
        name: str,
        batch_size: int = 64,
        threads: int = 0,
        bulk_nice: int = 10,
        query_threads: int = QUERY_THREADS,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if query_threads < 1:
            raise ValueError(f"query_threads must be at least 1, got {query_threads}")
        self.name = name
        self.dim = MINILM_L6.hidden
        self._batch_size = batch_size
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        # tokenizer.json ships with fixed 128-token padding/truncation; we truncate at the model's 256 and
        # pad each batch ourselves, after sorting by length.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        # Two lanes, each a session on one worker thread of its own. Queries (at most QUERY_BATCH texts)
        # use one intra-op thread, which is as fast for a single short text (4.0 vs 4.2 ms here) at two
        # thirds of the CPU, and never wait behind a batch: a 256-text batch takes ~0.5 s. Batches
        # (ingest) use the intra-op pool (``threads``; 0 = onnxruntime's choice) at CPU niceness
        # ``bulk_nice``: the bulk thread and the pool it creates lower their own priority first, so
        # the kernel serves queries, the event loop and Postgres before them. Within a lane calls
        # queue up instead of oversubscribing the cores.
        self._query_session = _session(model_path, 1, arena=True)
        # Several query threads on the one session (onnxruntime runs are thread-safe), one per query
        # slot of the lane: one org's query at the model's cut (~37 ms) does not hold another org's
        # short one, and a slot the lane grants never waits for a thread (service.embeddings.lanes).
        self.query_threads = query_threads
        self._query_executor = ThreadPoolExecutor(max_workers=query_threads, thread_name_prefix="embed-query")
        self._long_query_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-long-query",
                                                       initializer=_lower_priority, initargs=(LONG_QUERY_NICE,))
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-bulk",
                                            initializer=_lower_priority, initargs=(bulk_nice,))
        # Created on the bulk thread, so onnxruntime's intra-op threads inherit its priority. No memory
        # arena: with one, a batch's activations (64 texts x 256 tokens: ~1.6 GB) stayed allocated
        # for the life of the process; without, they go back to malloc and malloc_trim returns them.
        self._session = self._executor.submit(_session, model_path, threads, arena=False).result()
        self._closed = False

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(texts) > QUERY_BATCH:
            return await self.embed_bulk(texts)
        executor = (self._long_query_executor if max(map(len, texts), default=0) >= LONG_QUERY_CHARS
                    else self._query_executor)
        return await self._run(texts, executor, lambda rows: self._embed_with(self._query_session, rows))

    async def embed_bulk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embed on the low-priority bulk thread, whatever the count (write paths: memories, documents)."""
        return await self._run(texts, self._executor, self._embed_bulk)

    async def _run(self, texts: Sequence[str], executor: ThreadPoolExecutor,
                   work: Callable[[list[str]], npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        check_texts(texts)
        if self._closed:
            raise EmbeddingError(f"{self.name}: embedder is closed")
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return await asyncio.get_running_loop().run_in_executor(executor, work, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Blocking variant for benchmarks and offline tools; the service uses :meth:`embed`."""
        return self._embed_with(self._query_session if len(texts) <= QUERY_BATCH else self._session, texts)

    def _embed_bulk(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        try:
            return self._embed_with(self._session, texts)
        finally:
            release_free_memory()

    def _embed_with(self, session: onnxruntime.InferenceSession, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        try:
            # One text at a time on this thread: encode_batch would run on the tokenizers library's
            # own thread pool, outside the bulk thread's lower priority.
            token_ids = [self._tokenizer.encode(text).ids for text in texts]
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
        await asyncio.to_thread(self._long_query_executor.shutdown, wait=True)


def _session(model_path: Path, threads: int, *, arena: bool) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    if threads > 0:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = arena
    # Idle intra-op threads otherwise busy-wait between runs, burning the cores Postgres shares.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(model_path), sess_options=options, providers=["CPUExecutionProvider"])


def _lower_priority(nice: int) -> None:
    """Raise this thread's niceness by ``nice`` above the process's (Linux: per thread; threads it
    starts inherit it), so a service started at some niceness keeps the lanes' order."""
    if nice > 0 and hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):
            me = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + nice))


_libc: ctypes.CDLL | None = None


def release_free_memory() -> None:
    """Give freed heap memory back to the OS (glibc ``malloc_trim``): after a bulk batch the
    model's activations are free but stay mapped (measured: RSS 321 -> 202 MB after 171 long texts)."""
    global _libc
    if sys.platform != "linux":
        return
    if _libc is None:
        try:
            _libc = ctypes.CDLL("libc.so.6")
        except OSError:
            return
    with contextlib.suppress(AttributeError):  # not glibc (e.g. musl): nothing to trim
        _libc.malloc_trim(0)

"""Request and response types of the documents API (msgspec: validated at the edge, typed inside)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from service.memories.types import AgentId

Collection = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:@/-]+$")]
"""A named set of documents inside an org (one imported tree per collection); default ``default``."""

DEFAULT_COLLECTION = "default"

FileStatus = Literal["created", "updated", "unchanged"]


class FileIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    path: str
    """Relative posix path (``service/app.py``): no leading ``/``, no ``.``/``..`` segments, no NUL."""
    content: str
    """The file's text, newlines untouched (it is reconstructed byte for byte from its L2 chunks)."""
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    """Caller metadata, stored on the document and merged into every chunk's metadata (reserved keys win)."""


class IngestRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    files: list[FileIn]
    agent_id: AgentId | None = None
    """Owner of the chunks (``memories.agent_id``); null = org-wide."""
    collection: Collection = DEFAULT_COLLECTION


class ChunkCounts(msgspec.Struct, kw_only=True):
    l0: int
    l1: int
    l2: int

    @property
    def total(self) -> int:
        return self.l0 + self.l1 + self.l2


class FileResult(msgspec.Struct, kw_only=True):
    path: str
    status: FileStatus
    content_hash: str
    language: str
    chunks: ChunkCounts
    """Chunks now stored for the file (for ``unchanged``: the counts recorded at its last ingestion)."""


class IngestTimings(msgspec.Struct, kw_only=True):
    chunking_ms: float
    embedding_ms: float
    database_ms: float
    total_ms: float


class IngestResponse(msgspec.Struct, kw_only=True):
    collection: str
    revision: int
    """The org's index revision after this request (unchanged if nothing was written)."""
    files: list[FileResult]
    created: int
    updated: int
    unchanged: int
    chunks_written: int
    timings: IngestTimings


class DocumentOut(msgspec.Struct, kw_only=True):
    collection: str
    path: str
    agent_id: str | None
    content_hash: str
    language: str
    line_count: int
    byte_count: int
    chunks: ChunkCounts
    embedder: str | None
    chunker: int
    """The chunking version that cut it: one below the index's ``chunker`` was cut by an earlier release
    and is cut again on its next ingest, unchanged or not (``pgcontext import`` sends it)."""
    metadata: dict[str, Any]
    created_at: datetime
    indexed_at: datetime


class DocumentPage(msgspec.Struct, kw_only=True):
    items: list[DocumentOut]
    next_cursor: str | None


class DeleteResponse(msgspec.Struct, kw_only=True):
    collection: str
    deleted: list[str]
    missing: list[str]
    chunks_deleted: int
    revision: int


class LanguageCounts(msgspec.Struct, kw_only=True):
    files: int
    lines: int
    chunks: int


class CollectionCounts(msgspec.Struct, kw_only=True):
    files: int
    lines: int
    bytes: int
    last_indexed_at: datetime | None


class SemanticStatus(msgspec.Struct, kw_only=True):
    available: bool
    """True when there are chunks, every one has an embedding, and every file was embedded by the
    service's current embedder — checked against the rows at request time, never assumed."""
    embedder: str
    """The service's current embedder (query vectors come from it)."""
    chunks_embedded: int
    chunks_missing_embedding: int
    files_other_embedder: int
    """Files whose vectors came from another embedder (unusable with the current query vectors)."""


class DirtyPath(msgspec.Struct, kw_only=True):
    collection: str
    path: str
    reasons: list[str]
    """Any of ``missing_embeddings``, ``other_embedder``, ``chunk_count_mismatch``."""


class IndexSummary(msgspec.Struct, kw_only=True):
    revision: int
    """Increments once per committed change (an ingest request that wrote something, or a delete)."""
    chunker: int
    """The service's chunking version (see ``DocumentOut.chunker``)."""
    status: Literal["empty", "ready", "degraded"]
    """``ready``: files indexed, nothing dirty, semantic available; ``degraded``: something is dirty."""
    last_indexed_at: datetime | None
    files: int
    chunks: int
    chunks_by_level: dict[str, int]
    """Keys ``"0"``, ``"1"``, ``"2"`` (L0 file summaries, L1 sections/symbols, L2 chunks)."""
    by_language: dict[str, LanguageCounts]
    collections: dict[str, CollectionCounts]
    semantic: SemanticStatus
    dirty_count: int
    dirty_paths: list[DirtyPath]
    """At most 100 of the dirty files (``dirty_count`` has them all)."""
    orphan_chunks: int
    """Document chunks with no document row (e.g. written through /v1/memories); not reachable by delete."""

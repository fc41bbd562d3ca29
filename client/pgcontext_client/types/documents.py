"""Documents (ingest, list, delete, index) and health."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from pgcontext_client.types._base import In


class FileIn(In):
    path: str
    """Relative posix path (``service/app.py``)."""
    content: str
    metadata: dict[str, Any] | None = None


class IngestRequest(In):
    files: list[FileIn]
    agent_id: str | None = None
    collection: str | None = None


class ChunkCounts(msgspec.Struct, kw_only=True):
    l0: int
    l1: int
    l2: int


class FileResult(msgspec.Struct, kw_only=True):
    path: str
    status: str
    content_hash: str
    language: str
    chunks: ChunkCounts


class IngestTimings(msgspec.Struct, kw_only=True):
    chunking_ms: float
    embedding_ms: float
    database_ms: float
    total_ms: float


class IngestResponse(msgspec.Struct, kw_only=True):
    collection: str
    revision: int
    files: list[FileResult]
    created: int
    updated: int
    unchanged: int
    chunks_written: int
    timings: IngestTimings


class Document(msgspec.Struct, kw_only=True):
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
    """The chunking version that cut it (below ``IndexSummary.chunker``: cut again on its next ingest)."""
    metadata: dict[str, Any]
    created_at: datetime
    indexed_at: datetime


class DocumentPage(msgspec.Struct, kw_only=True):
    items: list[Document]
    next_cursor: str | None


class DeletedDocuments(msgspec.Struct, kw_only=True):
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
    embedder: str
    chunks_embedded: int
    chunks_missing_embedding: int
    files_other_embedder: int


class DirtyPath(msgspec.Struct, kw_only=True):
    collection: str
    path: str
    reasons: list[str]


class IndexSummary(msgspec.Struct, kw_only=True):
    revision: int
    chunker: int
    status: str
    last_indexed_at: datetime | None
    files: int
    chunks: int
    chunks_by_level: dict[str, int]
    by_language: dict[str, LanguageCounts]
    collections: dict[str, CollectionCounts]
    semantic: SemanticStatus
    dirty_count: int
    dirty_paths: list[DirtyPath]
    orphan_chunks: int






class Health(msgspec.Struct, kw_only=True):
    status: str
    checks: dict[str, str] = msgspec.field(default_factory=dict)

"""The read side of the document index: the listing (for importers) and the index summary.

The summary is computed from the rows at request time — counts, embeddings present, the embedder
that produced them — so it can only claim the freshness the database actually has:

* ``semantic.available`` is true only if there are document chunks, none lacks an embedding, and
  every file was embedded by the service's current embedder (vectors of another model are not
  comparable with today's query vectors).
* a file is *dirty* when some of its chunks lack an embedding (``missing_embeddings``), its vectors
  came from another embedder (``other_embedder``; re-importing it re-embeds), or the number of stored
  chunks differs from what its ingestion recorded (``chunk_count_mismatch``, e.g. a chunk removed
  outside the documents API by direct SQL). ``status`` is ``degraded`` when anything is dirty or orphaned.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Any, Literal

import asyncpg

from service.db import TenantTx
from service.documents.chunking import CHUNKER_VERSION
from service.documents.types import (
    ChunkCounts,
    CollectionCounts,
    DirtyPath,
    DocumentOut,
    IndexSummary,
    LanguageCounts,
    SemanticStatus,
)
from service.errors import BadRequest
from service.http.jsondepth import json_depth

DIRTY_LIST_LIMIT = 100


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def encode_cursor(collection: str, path: str) -> str:
    raw = json.dumps([collection, path], ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw) if json_depth(raw) <= 1 else None  # ours are one flat list
    except ValueError as exc:
        raise BadRequest("cursor is not one this service issued", code="bad_cursor") from exc
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) and _storable(v) for v in value)):
        raise BadRequest("cursor is not one this service issued", code="bad_cursor")
    return value[0], value[1]


def _storable(text: str) -> bool:
    """Whether PostgreSQL's text can hold ``text``: no NUL, no lone surrogate (JSON's ``"\\ud800"``)."""
    return "\x00" not in text and not any("\ud800" <= c <= "\udfff" for c in text)


def to_out(row: asyncpg.Record) -> DocumentOut:
    return DocumentOut(
        collection=row["collection"], path=row["path"], agent_id=row["agent_id"], content_hash=row["content_hash"],
        language=row["language"], line_count=row["line_count"], byte_count=row["byte_count"],
        chunks=ChunkCounts(l0=row["l0_chunks"], l1=row["l1_chunks"], l2=row["l2_chunks"]),
        embedder=row["embedder"], chunker=row["chunker"], metadata=row["metadata"], created_at=row["created_at"],
        indexed_at=row["indexed_at"])


async def list_page(tx: TenantTx, *, collection: str | None, path_prefix: str | None, cursor: str | None,
                    limit: int) -> tuple[list[DocumentOut], str | None]:
    after = decode_cursor(cursor) if cursor else (None, None)
    rows = await tx.fetch("documents.list", tx.org_id, collection,
                          _like_prefix(path_prefix) if path_prefix else None, after[0], after[1], limit + 1)
    items = [to_out(r) for r in rows[:limit]]
    more = len(rows) > limit
    return items, (encode_cursor(items[-1].collection, items[-1].path) if more and items else None)


async def summary(tx: TenantTx, embedder_name: str) -> IndexSummary:
    """The index summary of ``tx``'s org (see the module docstring), from one statement (one snapshot)."""
    row = await tx.fetchrow("documents.summary", tx.org_id, embedder_name, DIRTY_LIST_LIMIT)
    assert row is not None
    collections: dict[str, CollectionCounts] = {}
    languages: dict[str, LanguageCounts] = {}
    for r in row["files"]:
        stamp = datetime.fromisoformat(r["last_indexed_at"]) if r["last_indexed_at"] else None
        c = collections.setdefault(r["collection"], CollectionCounts(files=0, lines=0, bytes=0, last_indexed_at=None))
        c.files += r["files"]
        c.lines += r["lines"]
        c.bytes += r["bytes"]
        if stamp is not None and (c.last_indexed_at is None or stamp > c.last_indexed_at):
            c.last_indexed_at = stamp
        lang = languages.setdefault(r["language"], LanguageCounts(files=0, lines=0, chunks=0))
        lang.files += r["files"]
        lang.lines += r["lines"]
    by_level = {"0": 0, "1": 0, "2": 0}
    missing = 0
    for r in row["chunks"]:
        key = str(r["level"])
        by_level[key] = by_level.get(key, 0) + r["chunks"]
        languages.setdefault(r["language"], LanguageCounts(files=0, lines=0, chunks=0)).chunks += r["chunks"]
        missing += r["missing_embeddings"]
    chunks = sum(by_level.values())
    other_embedder = int(row["other_embedder"])
    dirty_count = int(row["dirty_count"])
    orphans = int(row["orphan_chunks"])
    files = sum(c.files for c in collections.values())
    semantic = SemanticStatus(
        available=chunks > 0 and missing == 0 and other_embedder == 0, embedder=embedder_name,
        chunks_embedded=chunks - missing, chunks_missing_embedding=missing, files_other_embedder=other_embedder)
    status: Literal["empty", "ready", "degraded"] = "empty" if files == 0 and chunks == 0 else (
        "ready" if dirty_count == 0 and orphans == 0 and semantic.available else "degraded")
    return IndexSummary(
        revision=int(row["revision"]), chunker=CHUNKER_VERSION, status=status,
        last_indexed_at=row["last_indexed_at"], files=files,
        chunks=chunks, chunks_by_level=by_level, by_language=languages, collections=collections,
        semantic=semantic, dirty_count=dirty_count,
        dirty_paths=[DirtyPath(collection=r["collection"], path=r["path"], reasons=_reasons(r)) for r in row["dirty"]],
        orphan_chunks=orphans)


def _reasons(row: dict[str, Any]) -> list[str]:
    reasons = []
    if row["unembedded"]:
        reasons.append("missing_embeddings")
    if row["other_embedder"]:
        reasons.append("other_embedder")
    if row["count_mismatch"]:
        reasons.append("chunk_count_mismatch")
    return reasons

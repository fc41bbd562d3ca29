"""The document write path: validate, skip unchanged files, chunk, embed, replace atomically.

``ingest`` handles one ``POST /v1/documents`` request:

1. **Validate** everything before any work (limits from :class:`~service.settings.DocumentSettings`:
   files per request, UTF-8 bytes per file and per request → 413; path shape, NUL, lone surrogates,
   duplicate paths, metadata → 400).
2. **Classify** against the stored ``documents`` rows: a file is ``unchanged`` (nothing is written)
   when its content hash, owner ``agent_id``, metadata and embedder all equal the stored ones and
   this release's chunking (:data:`~service.documents.chunking.CHUNKER_VERSION`) cut it.
3. **Chunk** the rest with :func:`~service.documents.chunking.chunk_file` (tiktoken counts, in a
   worker thread) and **embed** every chunk server-side before any transaction opens: L1/L2 texts
   with their breadcrumb prepended (``"path > class A > def f\\n" + text``), L0 summaries as they are.
4. **Write** in ONE transaction: upsert the ``documents`` rows (in path order, which also locks them
   so two requests for the same file serialize), delete the files' old chunks, insert the new ones
   with one ``unnest`` statement, bump the org's revision last. A reader sees a file's old chunks
   or its new chunks, never a mix and never none.

Chunks are ``memories`` rows of kind ``document_chunk``: ``source_path``, ``line_start``/``line_end``
(1-based, inclusive), ``section_title``, ``breadcrumb``, ``level``; their metadata holds the
caller's metadata plus the reserved keys ``collection``, ``language``, ``content_hash``, ``symbol``
(qualified code symbol), ``symbol_name`` (its last component) and ``truncated`` (L1 text is a
prefix of its span). The L0 of an empty file has the chunker's empty span (1, 0); it is stored as
(1, 1) because ``memories`` requires ``line_end >= line_start`` (``documents.line_count`` is 0).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import msgspec
import numpy as np
import numpy.typing as npt
from pgvector import Vector

from service.documents.chunking import CHUNKER_VERSION, Chunk, FileChunks, chunk_file, content_hash
from service.documents.types import (
    ChunkCounts,
    FileIn,
    FileResult,
    IngestRequest,
    IngestResponse,
    IngestTimings,
)
from service.documents.walk import PATH_CONTROL_CHARS, STORED_PATH_CONTROL_CHARS
from service.errors import BadRequest, PayloadTooLarge, Unprocessable, malformed_json
from service.memories.types import DOCUMENT_CHUNK_KIND
from service.memories.validation import check_metadata
from service.memories.write import embed_texts
from service.runtime import Services
from service.settings import DocumentSettings, LimitSettings
from service.tenancy.orgscope import org_scope
from service.text.tokens import TokenCounter, Tokenizers
from service.timing import elapsed_ms

KIND = DOCUMENT_CHUNK_KIND
RESERVED_METADATA = ("collection", "language", "content_hash", "symbol", "symbol_name", "truncated")
_CONTROL = re.compile(f"[{PATH_CONTROL_CHARS}]")
_STORED_CONTROL = re.compile(f"[{STORED_PATH_CONTROL_CHARS}]")
"""What a deletion, or an import of an older export, checks a path for (a stored document's may hold more)."""
_SYMBOL_SPLIT = re.compile(r"::|\.|#")


# ------------------------------------------------------------------------------------ validation


def check_path(path: str, max_chars: int, *, field: str = "path", stored: bool = False) -> None:
    """A document path: relative posix, no empty/``.``/``..`` segments, no control characters (``stored``:
    a path a document may already have, see :data:`_STORED_CONTROL`)."""

    def bad(why: str) -> BadRequest:
        return BadRequest(f"{field} {path[:80]!r} is not a valid document path: {why}", code="bad_path",
                          details={"field": field})

    if not path:
        raise bad("it is empty")
    if len(path) > max_chars:
        raise bad(f"longer than {max_chars} characters")
    if (_STORED_CONTROL if stored else _CONTROL).search(path):
        raise bad("it contains a control character (NUL, newline, NEL, a line separator, ...)")
    if "\\" in path:
        raise bad("use '/' as the separator")
    if path.startswith("/"):
        raise bad("it must be relative")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise bad("empty, '.' and '..' segments are not allowed")
    if not _utf8_ok(path):
        raise bad("it is not valid Unicode (lone surrogate)")


def _utf8_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate(request: IngestRequest, docs: DocumentSettings, limits: LimitSettings, *,
             stored: bool = False) -> list[int]:
    """Check the request against the limits; returns each file's size in UTF-8 bytes. ``stored``: the
    files are documents an org held (an import), whose paths are checked as :func:`check_path` says."""
    if not request.files:
        raise BadRequest("files must not be empty", code="validation_error", details={"field": "files"})
    if len(request.files) > docs.max_files_per_request:
        raise PayloadTooLarge(
            f"a request holds at most {docs.max_files_per_request} files, got {len(request.files)}",
            code="too_many_files", details={"limit": docs.max_files_per_request})
    sizes: list[int] = []
    seen: set[str] = set()
    for index, item in enumerate(request.files):
        where = f"files[{index}]"
        check_path(item.path, docs.max_path_chars, field=f"{where}.path", stored=stored)
        if item.path in seen:
            # 422, not 400: each item matches the schema; only their combination cannot be stored.
            raise Unprocessable(f"{where}.path {item.path!r} appears twice in the request", code="duplicate_path",
                             details={"field": f"{where}.path"})
        seen.add(item.path)
        if "\x00" in item.content:
            raise BadRequest(f"{where}.content contains a NUL character (binary files are not accepted)",
                             code="binary_content", details={"field": f"{where}.content", "path": item.path})
        try:
            size = len(item.content.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise BadRequest(f"{where}.content is not valid Unicode (lone surrogate)", code="validation_error",
                             details={"field": f"{where}.content", "path": item.path}) from exc
        if size > docs.max_file_bytes:
            raise PayloadTooLarge(f"{item.path!r} is {size} bytes; the limit is {docs.max_file_bytes}",
                                  code="file_too_large",
                                  details={"path": item.path, "limit": docs.max_file_bytes, "bytes": size})
        bad = [k for k in item.metadata if k in RESERVED_METADATA]
        if bad:
            raise BadRequest(f"{where}.metadata uses reserved keys {bad}", code="validation_error",
                             details={"field": f"{where}.metadata", "reserved": list(RESERVED_METADATA)})
        check_metadata(item.metadata, limits)
        sizes.append(size)
    total = sum(sizes)
    if total > docs.max_request_file_bytes:
        raise PayloadTooLarge(f"the files hold {total} bytes; a request holds at most {docs.max_request_file_bytes}",
                              code="request_too_large", details={"limit": docs.max_request_file_bytes})
    return sizes


# ------------------------------------------------------------------------------------- chunking


def token_counter(services: Services) -> TokenCounter:
    """The tiktoken counter that measures chunks (one ``Tokenizers`` per app, in ``services.extras``)."""
    tokenizers = services.extras.get("tokenizers")
    if not isinstance(tokenizers, Tokenizers):
        tokenizers = Tokenizers(services.settings.data_dir / "tiktoken")
        services.extras["tokenizers"] = tokenizers
    return tokenizers.get(services.settings.documents.tokenizer)


def symbol_name(symbol: str | None) -> str | None:
    """Last component of a qualified symbol: ``App.build`` → ``build``, ``a::b`` → ``b``."""
    if not symbol:
        return None
    return _SYMBOL_SPLIT.split(symbol)[-1] or symbol


def embedding_text(chunk: Chunk) -> str:
    """What is embedded for a chunk: L0 as is (it names its path), L1/L2 under their breadcrumb."""
    return chunk.text if chunk.level == 0 else f"{chunk.breadcrumb}\n{chunk.text}"


def chunk_metadata(chunk: Chunk, fc: FileChunks, collection: str, user: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {**user, "collection": collection, "language": fc.language,
                            "content_hash": fc.content_hash}
    if chunk.symbol:
        meta["symbol"] = chunk.symbol
        meta["symbol_name"] = symbol_name(chunk.symbol)
    if chunk.truncated:
        meta["truncated"] = True
    return meta


def chunk_files(files: Sequence[FileIn], counter: TokenCounter, docs: DocumentSettings) -> list[FileChunks]:
    """Chunk every file (CPU-bound: call it in a worker thread)."""
    return [chunk_file(f.path, f.content, count_tokens=counter.count, max_chunk_tokens=docs.max_chunk_tokens,
                       max_section_tokens=docs.max_section_tokens) for f in files]


def counts_of(fc: FileChunks) -> ChunkCounts:
    levels = [c.level for c in fc.chunks]
    return ChunkCounts(l0=levels.count(0), l1=levels.count(1), l2=levels.count(2))


@dataclass(frozen=True, slots=True)
class _Rows:
    """Parallel arrays for ``documents.insert_chunks``."""

    agent_ids: list[str | None]
    texts: list[str]
    metadata: list[dict[str, Any]]
    paths: list[str]
    line_starts: list[int]
    line_ends: list[int]
    titles: list[str | None]
    breadcrumbs: list[str]
    levels: list[int]
    embed_texts: list[str]


def _rows(chunked: Sequence[FileChunks], files: Sequence[FileIn], collection: str, agent_id: str | None) -> _Rows:
    rows = _Rows([], [], [], [], [], [], [], [], [], [])
    for fc, item in zip(chunked, files, strict=True):
        for chunk in fc.chunks:
            if not chunk.text:
                continue  # cannot happen for L0/L2; a zero-token L1 prefix would carry nothing anyway
            rows.agent_ids.append(agent_id)
            rows.texts.append(chunk.text)
            rows.metadata.append(chunk_metadata(chunk, fc, collection, item.metadata))
            rows.paths.append(fc.path)
            rows.line_starts.append(chunk.line_start)
            rows.line_ends.append(max(chunk.line_end, chunk.line_start))  # empty file: (1, 0) → (1, 1)
            rows.titles.append(chunk.section_title)
            rows.breadcrumbs.append(chunk.breadcrumb)
            rows.levels.append(chunk.level)
            rows.embed_texts.append(embedding_text(chunk))
    return rows


# ---------------------------------------------------------------------------------------- ingest




async def ingest(services: Services, org_id: UUID, request: IngestRequest, *, stored: bool = False) -> IngestResponse:
    """Store the request's files (see the module docstring); returns per-file statuses and the revision.
    ``stored``: documents an org held (an import), their paths checked as :func:`check_path` says."""
    started = time.perf_counter()
    docs = services.settings.documents
    sizes = validate(request, docs, services.settings.limits, stored=stored)
    embedder_name = services.embedder.name
    hashes = [content_hash(f.content) for f in request.files]
    db_started = time.perf_counter()
    async with services.db.tenant(org_id, readonly=True) as tx:
        existing = {r["path"]: r for r in await tx.fetch("documents.existing", org_id, request.collection,
                                                         [f.path for f in request.files])}
        revision = int(await tx.fetchval("documents.revision", org_id))
    db_ms = elapsed_ms(db_started)

    results: dict[str, FileResult] = {}
    changed: list[tuple[FileIn, int]] = []
    for item, digest, size in zip(request.files, hashes, sizes, strict=True):
        row = existing.get(item.path)
        if (row is not None and row["content_hash"] == digest and row["agent_id"] == request.agent_id
                and row["metadata"] == item.metadata and row["embedder"] == embedder_name
                and row["chunker"] == CHUNKER_VERSION):
            results[item.path] = FileResult(
                path=item.path, status="unchanged", content_hash=digest, language=row["language"],
                chunks=ChunkCounts(l0=row["l0_chunks"], l1=row["l1_chunks"], l2=row["l2_chunks"]))
        else:
            changed.append((item, size))

    chunking_ms = embedding_ms = 0.0
    written = 0
    if changed:
        changed.sort(key=lambda pair: pair[0].path)  # one lock order for every writer
        files = [item for item, _ in changed]
        t = time.perf_counter()
        counter = await asyncio.to_thread(token_counter, services)
        with org_scope(org_id):  # the count cache's entries are this org's (to_thread carries the scope)
            chunked = await asyncio.to_thread(chunk_files, files, counter, docs)
        rows = _rows(chunked, files, request.collection, request.agent_id)
        chunking_ms = elapsed_ms(t)
        t = time.perf_counter()
        embeddings = await embed_texts(services, org_id, rows.embed_texts)
        embedding_ms = elapsed_ms(t)
        t = time.perf_counter()
        revision, inserted = await _write(services, org_id, request, chunked, [s for _, s in changed], rows,
                                          embeddings, embedder_name)
        db_ms += elapsed_ms(t)
        written = len(rows.texts)
        for fc in chunked:
            results[fc.path] = FileResult(path=fc.path, status="created" if inserted[fc.path] else "updated",
                                          content_hash=fc.content_hash, language=fc.language, chunks=counts_of(fc))
        await services.memories_changed(org_id, {request.agent_id})

    ordered = [results[f.path] for f in request.files]
    return IngestResponse(
        collection=request.collection, revision=revision, files=ordered,
        created=sum(r.status == "created" for r in ordered), updated=sum(r.status == "updated" for r in ordered),
        unchanged=sum(r.status == "unchanged" for r in ordered), chunks_written=written,
        timings=IngestTimings(chunking_ms=chunking_ms, embedding_ms=embedding_ms, database_ms=round(db_ms, 3),
                              total_ms=elapsed_ms(started)))


async def _write(services: Services, org_id: UUID, request: IngestRequest, chunked: Sequence[FileChunks],
                 sizes: Sequence[int], rows: _Rows, embeddings: npt.NDArray[np.float32],
                 embedder_name: str) -> tuple[int, dict[str, bool]]:
    counts = [counts_of(fc) for fc in chunked]
    metadata = {f.path: f.metadata for f in request.files}
    paths = [fc.path for fc in chunked]
    async with services.db.tenant(org_id, timeout_ms=services.settings.documents.write_timeout_ms) as tx:
        upserted = await tx.fetch(
            "documents.upsert", org_id, request.collection, embedder_name, paths,
            [request.agent_id] * len(chunked), [fc.content_hash for fc in chunked], [fc.language for fc in chunked],
            [fc.line_count for fc in chunked], list(sizes), [c.l0 for c in counts], [c.l1 for c in counts],
            [c.l2 for c in counts], [metadata[p] for p in paths], CHUNKER_VERSION)
        await tx.fetchval("documents.delete_chunks", org_id, request.collection, paths)
        if rows.texts:
            await tx.fetch(
                "documents.insert_chunks", org_id, rows.agent_ids, rows.texts, [Vector(v) for v in embeddings],
                rows.metadata, rows.paths, rows.line_starts, rows.line_ends, rows.titles, rows.breadcrumbs,
                rows.levels)
        state = await tx.fetchrow("documents.bump_revision", org_id)
    assert state is not None
    return int(state["revision"]), {r["path"]: bool(r["inserted"]) for r in upserted}


def decode_request(body: bytes) -> IngestRequest:
    """Strict decoding with the project's error codes (the handler takes raw bytes for clear 400s)."""
    try:
        return msgspec.json.decode(body, type=IngestRequest)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid request: {exc}", code="validation_error") from exc
    except msgspec.DecodeError as exc:
        raise malformed_json(exc) from exc


# ---------------------------------------------------------------------------------------- delete


async def delete(services: Services, org_id: UUID, collection: str, paths: Sequence[str]) -> tuple[
        list[str], list[str], int, int]:
    """Remove documents and their chunks in one transaction; returns (deleted, missing, chunks, revision).

    Nothing is written (and the revision stays) when none of ``paths`` exists.
    """
    unique = sorted(set(paths))
    async with services.db.tenant(org_id) as tx:
        gone = await tx.fetch("documents.delete_documents", org_id, collection, unique)
        deleted = sorted(r["path"] for r in gone)
        if not deleted:
            revision = int(await tx.fetchval("documents.revision", org_id))
            return [], unique, 0, revision
        chunks = int(await tx.fetchval("documents.delete_chunks", org_id, collection, deleted))
        state = await tx.fetchrow("documents.bump_revision", org_id)
    assert state is not None
    await services.memories_changed(org_id, {r["agent_id"] for r in gone})
    missing = sorted(set(unique) - set(deleted))
    return deleted, missing, chunks, int(state["revision"])

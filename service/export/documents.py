"""The ``document`` lines of an import: each file whose line carries its ``content`` is ingested again as
``POST /v1/documents`` ingests it (:func:`service.documents.ingest.ingest`), so it is chunked by this
release's chunker and embedded by this service's embedder, and found as a freshly mirrored file is.

A line is checked as an ingest checks a file (path, content, metadata, sizes) and against its
``content_hash`` when it has one, before anything of the request is written (422 naming
``lines[i].field``). A file the org holds with the same content, owner and metadata (and cut by this
chunking and embedder) is left as it is and counted ``existing``; another is written (``imported``), so a
restore run again writes nothing twice. A line without ``content`` (an export made before documents
carried it, or a file whose chunks no longer gave back its content) is counted ``skipped``. The files are
written after the rest of the request, a transaction per collection and owner, as an ingest writes them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import msgspec

from service.documents.chunking import content_hash
from service.documents.ingest import ingest, validate
from service.documents.types import DEFAULT_COLLECTION, Collection, FileIn, IngestRequest
from service.errors import AppError, PayloadTooLarge, Unprocessable
from service.export.fields import line_field
from service.memories.types import AgentId
from service.memories.validation import check_metadata
from service.runtime import Services
from service.settings import Settings


class DocumentLine(msgspec.Struct, tag_field="type", tag="document", kw_only=True):
    """What the import reads of a document line (its other columns are derived again or ignored)."""

    path: str | None = None
    content: str | None = None
    """The file's text; absent from exports made before documents carried it (then the line is skipped)."""
    collection: Collection = DEFAULT_COLLECTION
    agent_id: AgentId | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    content_hash: str | None = None


_Owner = tuple[str, str | None]
"""A collection and the agent that owns its files (None: org-wide): one ingest request each."""


@dataclass(slots=True)
class Documents:
    """The files of a request's document lines, checked, by collection and owner."""

    files: dict[_Owner, list[FileIn]] = field(default_factory=lambda: defaultdict(list))
    lines: dict[tuple[str, str], int] = field(default_factory=dict)
    """Each file's (collection, path) and the line that holds it."""
    total_bytes: int = 0

    def add(self, line: DocumentLine, index: int, settings: Settings) -> None:
        """Check ``line`` (which has its content) as an ingest checks a file, and keep it."""
        if line.path is None:
            raise Unprocessable(f"lines[{index}]: a document with its content needs its path",
                                code="validation_error", details=line_field(index, "path"))
        assert line.content is not None
        item = FileIn(path=line.path, content=line.content, metadata=line.metadata)
        try:
            try:  # what the ingest says of a file's metadata names no field: the line's metadata, as a memory's
                check_metadata(line.metadata, settings.limits)
            except AppError as exc:
                exc.details.setdefault("field", "metadata")
                raise
            (size,) = validate(IngestRequest(files=[item]), settings.documents, settings.limits, stored=True)
        except AppError as exc:  # said of a request's first file: said here of the line
            name = str(exc.details.get("field", "content")).removeprefix("files[0].")
            raise Unprocessable(f"lines[{index}]: {exc.message.replace('files[0].', '')}", code=exc.code,
                                details={**exc.details, **line_field(index, name)}) from exc
        if line.content_hash is not None and line.content_hash != content_hash(line.content):
            raise Unprocessable(f"lines[{index}]: the content does not match the line's content_hash (the file "
                                "was changed after the export)", code="validation_error",
                                details=line_field(index, "content"))
        held = self.lines.setdefault((line.collection, line.path), index)
        if held != index:
            raise Unprocessable(f"lines[{index}]: {line.path!r} of collection {line.collection!r} is already "
                                f"lines[{held}]", code="duplicate_path", details=line_field(index, "path"))
        self.files[(line.collection, line.agent_id)].append(item)
        self.total_bytes += size

    def check_size(self, settings: Settings) -> None:
        """At most as many files and bytes as one ingest takes (413 otherwise: send fewer lines a request)."""
        docs = settings.documents
        if len(self.lines) > docs.max_files_per_request or self.total_bytes > docs.max_request_file_bytes:
            raise PayloadTooLarge(f"{len(self.lines)} documents of {self.total_bytes} bytes in one request; the limits "
                                  f"are {docs.max_files_per_request} files (PGCONTEXT_DOCUMENTS_MAX_FILES) and "
                                  f"{docs.max_request_file_bytes} bytes (PGCONTEXT_DOCUMENTS_MAX_REQUEST_BYTES): "
                                  "send the export in several requests", code="batch_too_large")


async def write(services: Services, org_id: UUID, documents: Documents) -> tuple[int, int]:
    """Ingest the files, a request per collection and owner; returns (files written, files held already)."""
    written = unchanged = 0
    for (collection, agent_id), files in sorted(documents.files.items(), key=lambda pair: str(pair[0])):
        result = await ingest(services, org_id, IngestRequest(files=files, agent_id=agent_id, collection=collection),
                              stored=True)
        written += result.created + result.updated
        unchanged += result.unchanged
    return written, unchanged

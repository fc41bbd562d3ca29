"""HTTP handlers for /v1/documents: ingest, list, delete and the index summary (thin; see ingest/index)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, delete, get, post
from litestar.params import FromQuery, QueryParameter

from service.documents import index, ingest
from service.documents.types import (
    DEFAULT_COLLECTION,
    DeleteResponse,
    DocumentPage,
    IndexSummary,
    IngestRequest,
    IngestResponse,
)
from service.errors import BadRequest, NotFound, check_page_limit
from service.http.deps import OrgId, ServicesDep
from service.http.responses import errors

COLLECTION_PATTERN = r"^[A-Za-z0-9_.:@/-]+$"
MAX_DELETE_PATHS = 256

CollectionQuery = Annotated[str, QueryParameter(min_length=1, max_length=200, pattern=COLLECTION_PATTERN,
                                                description="Document collection (default 'default').")]


class DocumentController(Controller):
    path = "/v1/documents"
    tags = ["documents"]

    @post("/", status_code=200, summary="Ingest files (created / updated / unchanged per file)",
          opt={"body": IngestRequest}, responses=errors(422))
    async def ingest_files(self, request: Request[Any, Any, Any], services: ServicesDep,
                           org_id: OrgId) -> IngestResponse:
        """Body: ``{"files": [{"path", "content", "metadata"?}], "agent_id"?, "collection"?}``.

        Each file is chunked (L0 file summary, L1 sections/symbols, L2 line-bounded chunks), embedded
        server-side and stored as memories of kind ``document_chunk``; a changed file's chunks are
        replaced in one transaction and a file whose content hash, owner and metadata are unchanged is
        skipped. Limits (413 above): PGCONTEXT_DOCUMENTS_MAX_FILES files (256),
        PGCONTEXT_DOCUMENTS_MAX_FILE_BYTES per file (1,000,000 UTF-8 bytes),
        PGCONTEXT_DOCUMENTS_MAX_REQUEST_BYTES of content per request (6 MiB), 8 MiB of JSON body.
        Paths are relative posix paths without ``.``/``..`` segments (400 otherwise).
        """
        body = ingest.decode_request(await request.body())
        return await ingest.ingest(services, org_id, body)

    @get("/", summary="List documents (by collection and path, cursor-paginated)")
    async def list_documents(
        self, services: ServicesDep, org_id: OrgId,
        collection: Annotated[str | None, QueryParameter(min_length=1, max_length=200, pattern=COLLECTION_PATTERN,
                                                         description="Only this collection (default: all).")]
        = None,
        path_prefix: Annotated[str | None, QueryParameter(min_length=1, max_length=1024)] = None,
        cursor: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=100_000)] = 100,
    ) -> DocumentPage:
        """Each item carries the content hash, so a client can send only files that changed."""
        most = services.settings.documents.max_list_page
        check_page_limit(limit, most)
        if path_prefix is not None and "\x00" in path_prefix:
            raise BadRequest("path_prefix must not contain NUL characters", code="validation_error",
                             details={"field": "path_prefix"})
        items, next_cursor = await services.db.read(org_id, lambda tx: index.list_page(
            tx, collection=collection, path_prefix=path_prefix, cursor=cursor, limit=limit))
        return DocumentPage(items=items, next_cursor=next_cursor)

    @delete("/", status_code=200, summary="Delete documents and their chunks by path", responses=errors(404))
    async def delete_documents(
        self, services: ServicesDep, org_id: OrgId,
        path: Annotated[list[str], QueryParameter(description="Repeat for several paths (at most 256).")],
        collection: CollectionQuery = DEFAULT_COLLECTION,
    ) -> DeleteResponse:
        """404 when none of the paths exists (nothing changes); otherwise the existing ones are removed in one
        transaction, the revision increments, and ``missing`` lists the others."""
        if not path:
            raise BadRequest("path is required", code="validation_error")
        if len(path) > MAX_DELETE_PATHS:
            raise BadRequest(f"at most {MAX_DELETE_PATHS} paths per request", code="validation_error")
        for p in path:
            ingest.check_path(p, services.settings.documents.max_path_chars, stored=True)  # any stored one
        deleted, missing, chunks, revision = await ingest.delete(services, org_id, collection, path)
        if not deleted:
            shown = missing[0] if len(missing) == 1 else f"{len(missing)} paths"
            raise NotFound(f"document {shown!s} not found in collection {collection!r}", code="document_not_found",
                           details={"missing": missing[:20]})
        return DeleteResponse(collection=collection, deleted=deleted, missing=missing, chunks_deleted=chunks,
                              revision=revision)

    @get("/index", summary="Index summary: revision, counts, last indexed time, semantic availability")
    async def index_summary(self, services: ServicesDep, org_id: OrgId) -> IndexSummary:
        async with services.db.tenant(org_id, readonly=True) as tx:
            return await index.summary(tx, services.embedder.name)

"""GET /v1/export: everything held for one agent (or the whole org) of the caller's org, as an NDJSON stream;
POST /v1/import: an export's lines written back (:mod:`service.export.restore`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.params import QueryParameter
from litestar.response import Stream

from service.export import restore
from service.export.stream import MEDIA_TYPE, export_lines
from service.http.deps import OrgId, ServicesDep
from service.http.responses import errors
from service.memories.types import AGENT_ID_MAX_LENGTH, AGENT_ID_PATTERN

AgentIdOrOrg = Annotated[str | None, QueryParameter(
    min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
    description="The agent (1-200 letters, digits and _.:@-); omitted: the whole org (every agent and the "
                "org-wide memories).")]


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk


EXPORT_DESCRIPTION = (
    "Without `agent_id`, the whole org (every agent, and the memories of no agent). "
    "One JSON object per line, each with a `type`: `export` (org, agent, time), `settings` (the org's "
    "defaults, in a whole-org export of an org that set them), `directive`, `document` "
    "(ingested files the agent owns, each with its `content`), `conversation` (the agent's conversations: owner, "
    "`message_count`, `created_at`, `updated_at`; ahead of the messages), `memory` and `chunk` (every column but the "
    "embedding, with access "
    "statistics, key, valid time, supersession and reinforcement; expired memories not yet purged and retired "
    "ones included), `event` (the history recorded "
    "under the agent), and last `end` with the count per type. Only "
    "your org's rows: another org's agent of the same name exports nothing. A stream without its `end` line "
    "is incomplete (an `error` line says so when the failure came after the response started): retry it. "
    "Streamed through one read-only transaction and a cursor (one snapshot), never built in memory. One export per "
    "org at a time (429 `export_in_progress` otherwise) and a few per process (503 `overloaded`)."
)


class ExportController(Controller):
    path = "/v1/export"
    tags = ["export"]

    @get("/", media_type=MEDIA_TYPE, summary="Export an agent's (or the org's) memories, directives and documents "
         "(NDJSON)", description=EXPORT_DESCRIPTION)
    async def export(self, services: ServicesDep, org_id: OrgId, agent_id: AgentIdOrOrg = None) -> Stream:
        lines = export_lines(services.db, org_id, agent_id)
        first = await anext(lines)  # opens the transaction: a database error here still gets the error shape
        filename = f"pgcontext-export-{agent_id or 'org'}.ndjson"
        return Stream(_prepend(first, lines), media_type=MEDIA_TYPE,
                      headers={"Content-Disposition": f'attachment; filename="{filename}"',
                               "Cache-Control": "no-store"})


IMPORT_DESCRIPTION = (
    "Body: `{\"lines\": [...]}`, lines of an export (`GET /v1/export`, each NDJSON line as an object) in any "
    "order, an export split over as many requests as needed (at most PGCONTEXT_MAX_BATCH memories and 20,000 "
    "events each). Memories and history events keep their ids, so supersession (`superseded_by`), merge "
    "records and undo links stay as exported; an id your org already holds is left as it is (`existing`), so "
    "a retried request writes nothing twice. Texts are embedded again. Directives replace the agent's. "
    "A `document` line with its `content` is ingested again as `POST /v1/documents` ingests a file (chunked "
    "and embedded by this service; a file held as it is counts `existing`), at most "
    "PGCONTEXT_DOCUMENTS_MAX_FILES of them per request; `chunk` lines, and `document` lines without "
    "their content (older exports), are `skipped`. A `conversation` line creates the conversation with its owner "
    "and times (`imported.conversation`), or keeps the one your org holds under the same owner (`existing`); its "
    "count is the last position of the messages it holds, raised as they arrive. A conversation's message is "
    "checked as an append checks it (conversation, session and message ids, speaker, role; 422 naming the line "
    "and field). "
    "Every line is checked before anything is written; then each request is one transaction (its documents: one "
    "per collection and owner, after it): all of it or nothing (409 `conflict`, naming the line, when a memory "
    "would make a second current value of its key or take a position or `message_id` its conversation "
    "holds; 409 `conversation_agent_mismatch` when a message or a `conversation` line names another agent than "
    "the conversation's)."
)


class ImportController(Controller):
    path = "/v1/import"
    tags = ["export"]

    @post("/", status_code=200,
          summary="Import an export's lines into your org (memories, history, directives, documents)",
          description=IMPORT_DESCRIPTION, opt={"body": restore.ImportRequest}, responses=errors(409, 413, 422))
    async def import_lines(self, request: Request[Any, Any, Any], services: ServicesDep,
                           org_id: OrgId) -> restore.ImportResult:
        return await restore.restore(services, org_id, restore.decode(await request.body()))

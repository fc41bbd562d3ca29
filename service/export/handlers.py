"""GET /v1/export: everything held for one agent of the caller's org, as an NDJSON stream."""

from __future__ import annotations

from collections.abc import AsyncIterator

from litestar import Controller, get
from litestar.response import Stream

from service.export.stream import MEDIA_TYPE, export_lines
from service.http.deps import OrgId, ServicesDep
from service.memories.handlers import AgentIdQuery


async def _prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk


EXPORT_DESCRIPTION = (
    "One JSON object per line, each with a `type`: `export` (org, agent, time), `directive`, `document` "
    "(ingested files the agent owns), `memory` and `chunk` (every column but the embedding, with access "
    "statistics; expired memories not yet purged and retired ones included), `event` (the history recorded "
    "under the agent), and last `end` with the count per type. Only "
    "your org's rows: another org's agent of the same name exports nothing. A stream without its `end` line "
    "is incomplete (an `error` line says so when the failure came after the response started): retry it. "
    "Streamed through one read-only transaction and a cursor, never built in memory. One export per "
    "org at a time (429 `export_in_progress` otherwise) and a few per process (503 `overloaded`)."
)


class ExportController(Controller):
    path = "/v1/export"
    tags = ["export"]

    @get("/", media_type=MEDIA_TYPE, summary="Export an agent's memories, directive and documents (NDJSON)",
         description=EXPORT_DESCRIPTION)
    async def export(self, services: ServicesDep, org_id: OrgId, agent_id: AgentIdQuery) -> Stream:
        lines = export_lines(services.db, org_id, agent_id)
        first = await anext(lines)  # opens the transaction: a database error here still gets the error shape
        filename = f"pgcontext-export-{agent_id}.ndjson"
        return Stream(_prepend(first, lines), media_type=MEDIA_TYPE,
                      headers={"Content-Disposition": f'attachment; filename="{filename}"',
                               "Cache-Control": "no-store"})

"""HTTP handlers of the fact lifecycle: a memory's history, undo, and the org's defaults."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, patch, post
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from service.db import TenantTx
from service.errors import NotFound, check_page_limit
from service.http.deps import OrgId, ServicesDep, parse_uuid
from service.http.responses import errors
from service.memories.facts import history, undo
from service.memories.facts.types import HistoryPage, OrgSettingsIn, OrgSettingsOut, UndoIn, UndoResult
from service.memories.facts.write import DEFAULT_POLICY

HISTORY_DESCRIPTION = (
    "Every change to the memory, oldest first: `created`, `updated`, `merged` (a duplicate merged into it: "
    "both texts, the similarities, the state before), `superseded`, `undone`, `deleted`, `consolidated` (a "
    "model's decision). Append-only; kept after a plain delete (ending in `deleted`), removed by an erasure "
    "(`DELETE /v1/memories/{id}?erase=true`, `DELETE /v1/memories?agent_id=`). A conversation's message is never "
    "changed: its history is empty. Another org's memory: 404."
)


class HistoryController(Controller):
    path = "/v1/memories"
    tags = ["memories"]

    @get("/{memory_id:str}/history", summary="A memory's history (append-only events, oldest first)",
         description=HISTORY_DESCRIPTION, responses=errors(404))
    async def history(self, services: ServicesDep, org_id: OrgId, memory_id: FromPath[str],
                      cursor: FromQuery[str | None] = None,
                      limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100) -> HistoryPage:
        ident = parse_uuid(memory_id, "memory id")
        check_page_limit(limit, services.settings.limits.max_page_size)
        async def read(tx: TenantTx) -> HistoryPage | None:
            found = await history.page(tx, ident, cursor, limit)
            if found.items or await tx.fetchrow("memories.get", tx.org_id, ident):
                return found  # a conversation's message is never changed: an empty history
            if cursor is not None and await tx.fetch("facts.history", tx.org_id, ident, None, 1):
                return found  # the page after the last of a deleted memory's history
            return None  # unknown here, with a cursor or without

        result = await services.db.read(org_id, read)
        if result is None:
            raise NotFound(f"memory {ident} not found")
        return result

    @post("/{memory_id:str}/history/{event_id:str}/undo", status_code=200, summary="Undo a merge or a model decision",
          responses=errors(404, 409, 422))
    async def undo(self, services: ServicesDep, org_id: OrgId, memory_id: FromPath[str],
                   event_id: FromPath[str], data: JSONBody[UndoIn]) -> UndoResult:
        """A ``merged`` event: the duplicate is written back as a memory of its own and the kept memory loses
        that sighting. A ``consolidated`` event (a model's merge or supersede): its change is reverted."""
        return await undo.undo(services, org_id, parse_uuid(memory_id, "memory id"), parse_uuid(event_id, "event id"),
                               reason=data.reason)


class OrgSettingsController(Controller):
    path = "/v1/org/settings"
    tags = ["org"]

    @get("/", summary="The org's defaults")
    async def get_settings(self, services: ServicesDep, org_id: OrgId) -> OrgSettingsOut:
        async with services.db.tenant(org_id, readonly=True) as tx:
            row = await tx.fetchrow("facts.org_settings_get", org_id)
        if row is None:
            return OrgSettingsOut(on_duplicate=DEFAULT_POLICY, updated_at=None)
        return OrgSettingsOut(on_duplicate=row["on_duplicate"], updated_at=row["updated_at"])

    @patch("/", summary="Change the org's defaults")
    async def set_settings(self, services: ServicesDep, org_id: OrgId,
                           data: JSONBody[OrgSettingsIn]) -> OrgSettingsOut:
        """``on_duplicate``: what writes that do not say do with a duplicate of a current memory
        (``merge``, ``keep`` or ``reject``)."""
        async with services.db.tenant(org_id) as tx:
            row = await tx.fetchrow("facts.org_settings_upsert", org_id, data.on_duplicate)
        assert row is not None
        return OrgSettingsOut(on_duplicate=row["on_duplicate"], updated_at=row["updated_at"])

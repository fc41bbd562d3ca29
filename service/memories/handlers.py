"""HTTP handlers for /v1/memories: thin — parse, call the write path or repo, shape the response."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, PathParameter, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_204_NO_CONTENT

from service.errors import BadRequest, NotFound, check_page_limit
from service.http.deps import OrgId, ServicesDep, parse_uuid
from service.http.jsondepth import check_json_depth
from service.http.responses import errors
from service.memories import repo, write
from service.memories.types import (
    AGENT_ID_MAX_LENGTH,
    AGENT_ID_PATTERN,
    KIND_PATTERN,
    CreatedMemories,
    DeletedAgentMemories,
    MemoryBatchIn,
    MemoryIn,
    MemoryOut,
    MemoryPage,
    MemoryPatch,
    PatchedMemory,
    holds_in_utc,
)
from service.memories.validation import check_metadata, check_time_range

AgentIdQuery = Annotated[str, QueryParameter(min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
                                             description="The agent (1-200 letters, digits and _.:@-).")]
"""A required ``agent_id`` query parameter, validated (and described in the schema) like the body field."""
AgentIdPath = Annotated[str, PathParameter(min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
                                           description="The agent (1-200 letters, digits and _.:@-).")]
"""An ``agent_id`` path parameter, validated like the body field."""


DELETE_AGENT_DESCRIPTION = (
    "Deletes every memory of `agent_id` in your org (its conversations' messages too, and the "
    "conversations) and the history recorded under it, invalidates its hot set and returns how many went. "
    "Idempotent: a repeat deletes 0. Another org's agent of the same name is untouched. Document chunks "
    "owned by the agent stay with their files (remove them with `DELETE /v1/documents`), and so does its "
    "directive (`DELETE /v1/agents/{agent_id}/directive`); `GET /v1/export?agent_id=` shows what is held."
)


def _timestamp(name: str, value: str | None) -> datetime | None:
    """An RFC 3339 timestamp with its timezone, strictly (a bare number is not one)."""
    if value is None:
        return None
    try:
        parsed = msgspec.convert(value, datetime)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"{name} must be an RFC 3339 timestamp, e.g. 2024-05-01T14:30:00Z", code="validation_error",
                         details={"field": name}) from exc
    if parsed.tzinfo is None:
        raise BadRequest(f"{name} must carry a timezone (RFC 3339, e.g. 2024-05-01T14:30:00Z)",
                         code="validation_error", details={"field": name})
    if not holds_in_utc(parsed):
        raise BadRequest(f"{name} is out of range: in UTC it must fall in the years 1-9999", code="validation_error",
                         details={"field": name})
    return parsed


class MemoryController(Controller):
    path = "/v1/memories"
    tags = ["memories"]

    @post("/", status_code=HTTP_201_CREATED, summary="Create one memory or a batch",
          opt={"body": MemoryIn | MemoryBatchIn}, responses=errors(409, 422))
    async def create(
        self, request: Request[Any, Any, Any], services: ServicesDep, org_id: OrgId,
        idempotency_key: Annotated[str | None, HeaderParameter(name="Idempotency-Key")] = None,
    ) -> Response[CreatedMemories]:
        """Body: one memory object, or ``{"memories": [...]}`` (at most PGCONTEXT_MAX_BATCH, default 256).

        Texts are embedded server-side unless an ``embedding`` is given. With an ``Idempotency-Key``
        header a retried request (same key, same body, within 24 h) returns the first result and
        creates nothing; the same key with another body is a 409.
        """
        result, replayed = await write.create(services, org_id, await request.body(), idempotency_key)
        headers = {"Idempotent-Replayed": "true"} if replayed else {}
        return Response(result, status_code=HTTP_201_CREATED, headers=headers)

    @get("/{memory_id:str}", summary="Get one memory", responses=errors(404))
    async def get_one(self, services: ServicesDep, org_id: OrgId, memory_id: FromPath[str]) -> MemoryOut:
        ident = parse_uuid(memory_id, "memory id")
        async with services.db.tenant(org_id, readonly=True) as tx:
            row = await repo.get(tx, ident)
        if row is None:
            raise NotFound(f"memory {ident} not found")
        return repo.to_out(row)

    @get("/", summary="List memories (newest first, cursor-paginated)", responses=errors(422))
    async def list_memories(
        self, services: ServicesDep, org_id: OrgId,
        agent_id: Annotated[str | None, QueryParameter(
            min_length=1, max_length=AGENT_ID_MAX_LENGTH, pattern=AGENT_ID_PATTERN,
            description="Only this agent's memories (1-200 letters, digits and _.:@-).")] = None,
        kind: Annotated[str | None, QueryParameter(pattern=KIND_PATTERN, description="Only this kind.")] = None,
        metadata: Annotated[
            str | None, QueryParameter(description="JSON object; rows whose metadata contains it")] = None,
        created_after: Annotated[str | None, QueryParameter(
            description="Inclusive lower bound on created_at (RFC 3339 with timezone)")] = None,
        created_before: Annotated[str | None, QueryParameter(
            description="Exclusive upper bound on created_at (RFC 3339 with timezone)")] = None,
        occurred_after: Annotated[str | None, QueryParameter(
            description="Inclusive lower bound on occurred_at (RFC 3339 with timezone)")] = None,
        occurred_before: Annotated[str | None, QueryParameter(
            description="Exclusive upper bound on occurred_at (RFC 3339 with timezone)")] = None,
        as_of: Annotated[str | None, QueryParameter(
            description="Only memories valid at this time (RFC 3339 with timezone): valid time, retired ones "
                        "included")] = None,
        include_superseded: Annotated[bool, QueryParameter(
            description="Also retired memories (superseded, or past valid_until), marked current=false")] = False,
        cursor: FromQuery[str | None] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 50,
    ) -> MemoryPage:
        check_page_limit(limit, services.settings.limits.max_page_size)
        contains = None
        if metadata is not None:
            check_json_depth(metadata, field="metadata")
            try:
                contains = msgspec.json.decode(metadata)
            except msgspec.DecodeError as exc:
                raise BadRequest("metadata must be a JSON object", code="validation_error") from exc
            if not isinstance(contains, dict):
                raise BadRequest("metadata must be a JSON object", code="validation_error")
            check_metadata(contains, services.settings.limits)
        times = {name: _timestamp(name, value) for name, value in (
            ("created_after", created_after), ("created_before", created_before),
            ("occurred_after", occurred_after), ("occurred_before", occurred_before), ("as_of", as_of))}
        for name in ("created", "occurred"):
            check_time_range(times[f"{name}_after"], times[f"{name}_before"], name, field=f"{name}_after")
        items, next_cursor = await services.db.read(org_id, lambda tx: repo.list_page(
            tx, agent_id=agent_id, kind=kind, metadata=contains, cursor=cursor, limit=limit,
            include_superseded=include_superseded, **times))
        return MemoryPage(items=items, next_cursor=next_cursor)

    @patch("/{memory_id:str}", summary="Update a memory (re-embeds when the text changes)",
           responses=errors(404, 409, 422))
    async def update(self, services: ServicesDep, org_id: OrgId, memory_id: FromPath[str],
                     data: JSONBody[MemoryPatch]) -> PatchedMemory:
        return await write.patch(services, org_id, parse_uuid(memory_id, "memory id"), data)

    @delete("/", status_code=HTTP_200_OK, summary="Delete all of an agent's memories (data-subject erasure)",
            description=DELETE_AGENT_DESCRIPTION)
    async def remove_agent(self, services: ServicesDep, org_id: OrgId,
                           agent_id: AgentIdQuery) -> DeletedAgentMemories:
        return DeletedAgentMemories(agent_id=agent_id, deleted=await write.delete_agent(services, org_id, agent_id))

    @delete("/{memory_id:str}", status_code=HTTP_204_NO_CONTENT, summary="Delete a memory",
            responses=errors(404, 409))
    async def remove(self, services: ServicesDep, org_id: OrgId, memory_id: FromPath[str],
                     erase: Annotated[bool, QueryParameter(
                         description="Also remove the memory's history (a privacy erasure); without it the "
                                     "history keeps the deletion")] = False) -> None:
        await write.delete(services, org_id, parse_uuid(memory_id, "memory id"), erase=erase)

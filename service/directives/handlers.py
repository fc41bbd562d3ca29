"""HTTP handlers for /v1/agents/{agent_id}/directive."""

from __future__ import annotations

from litestar import Controller, delete, get, put
from litestar.params import JSONBody
from litestar.status_codes import HTTP_204_NO_CONTENT

from service.directives.store import DirectiveStore
from service.directives.types import DirectiveIn, DirectiveOut
from service.errors import BadRequest, NotFound, PayloadTooLarge
from service.http.deps import OrgId, ServicesDep
from service.http.responses import errors
from service.memories.handlers import AgentIdPath
from service.runtime import Services


def _store(services: Services) -> DirectiveStore:
    store = services.extras["directives"]
    assert isinstance(store, DirectiveStore)
    return store


class DirectiveController(Controller):
    path = "/v1/agents/{agent_id:str}/directive"
    tags = ["directives"]

    @put("/", summary="Create or replace an agent's directive (version increments)")
    async def put_directive(self, services: ServicesDep, org_id: OrgId, agent_id: AgentIdPath,
                            data: JSONBody[DirectiveIn]) -> DirectiveOut:
        limit = services.settings.limits.max_directive_chars
        if not data.content.strip():
            raise BadRequest("content must not be empty", code="validation_error")
        if len(data.content) > limit:
            raise PayloadTooLarge(f"content is {len(data.content)} characters; the limit is {limit}",
                                  code="text_too_long", details={"field": "content", "limit": limit})
        if "\x00" in data.content:
            raise BadRequest("content must not contain NUL characters", code="validation_error")
        return await _store(services).put(org_id, agent_id, data.content)

    @get("/", summary="Get an agent's directive (Redis envelope, Postgres on a miss)", responses=errors(404))
    async def get_directive(self, services: ServicesDep, org_id: OrgId, agent_id: AgentIdPath) -> DirectiveOut:
        directive = await _store(services).get(org_id, agent_id)
        if directive is None:
            raise NotFound(f"agent {agent_id!r} has no directive")
        return directive

    @delete("/", status_code=HTTP_204_NO_CONTENT, summary="Delete an agent's directive", responses=errors(404))
    async def delete_directive(self, services: ServicesDep, org_id: OrgId, agent_id: AgentIdPath) -> None:
        if not await _store(services).delete(org_id, agent_id):
            raise NotFound(f"agent {agent_id!r} has no directive")

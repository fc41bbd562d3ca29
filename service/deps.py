"""Request-scoped dependencies shared by every feature's handlers."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Request
from litestar.datastructures import State
from litestar.di import Dependency
from litestar.params import SkipValidationMarker

from service.auth import authenticate
from service.errors import BadRequest
from service.runtime import Services

ServicesDep = Annotated[Services, Dependency(kind="named"), SkipValidationMarker()]
"""The running app's services (pool, Redis, embedder, ...), injected by name, never validated."""
OrgId = Annotated[UUID, Dependency(kind="named")]
"""The caller's org, resolved from its API key."""


def provide_services(state: State) -> Services:
    services = state.services
    assert isinstance(services, Services)
    return services


async def provide_org_id(request: Request[Any, Any, Any], services: ServicesDep) -> UUID:
    return await authenticate(request, services)


def parse_uuid(value: str, what: str) -> UUID:
    try:
        return UUID(value)
    except ValueError as exc:
        raise BadRequest(f"{what} must be a UUID, got {value[:60]!r}", code="bad_id") from exc

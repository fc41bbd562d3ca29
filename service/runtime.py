"""The long-lived services a running app holds, built in the lifespan and handed to handlers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

if TYPE_CHECKING:
    from service.db import Database
    from service.db.redisconn import RedisClient
    from service.embeddings import Embedder
    from service.settings import Settings
    from service.tenancy.ratelimit import RateLimiter


@dataclass(frozen=True)
class Endpoints:
    """Where the servers are: resolved once by the CLI (embedded or configured) or by tests."""

    owner_dsn: str | None
    """None when serving with the service role's DSN alone (``serve --no-migrate``)."""
    app_dsn: str
    redis_url: str


MemoryChangeHook = Callable[[UUID, set[str | None]], Awaitable[None]]
"""Called after a committed memory write with the org and the agent ids whose memories changed."""


@dataclass
class WarmupState:
    """Whether the start's warm-up of the assembly path has completed (``service.assembly.warmup``):
    ``/readyz`` answers ok only once it has."""

    done: bool = False
    failures: dict[str, str] = field(default_factory=dict)
    """Steps that failed in the last attempt, and why."""


@dataclass
class Services:
    settings: Settings
    db: Database
    redis: RedisClient
    embedder: Embedder
    rate_limiter: RateLimiter | None = None
    """Per-org request quotas, checked after authentication (None: no limits, e.g. in tools)."""
    extras: dict[str, object] = field(default_factory=dict)
    warmup: WarmupState | None = None
    """None: nothing to wait for (the warm-up is off)."""
    memory_hooks: list[MemoryChangeHook] = field(default_factory=list)

    async def memories_changed(self, org_id: UUID, agent_ids: set[str | None]) -> None:
        for hook in self.memory_hooks:
            await hook(org_id, agent_ids)

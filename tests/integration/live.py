"""A live pgcontext service for tests that talk to it as a remote client does: the app on a real uvicorn
server (real HTTP on a free loopback port), over the session's real Postgres and Redis."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from service.app import create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.integration.test_assembly import GENEROUS
from tests.integration.test_assembly_faults import served


@contextlib.contextmanager
def live_service(settings: Settings, endpoints: Endpoints, embedder: Embedder, *,
                 retrieval: dict[str, Any] | None = None, assembly: dict[str, Any] | None = None) -> Iterator[str]:
    """Serve the app and yield its base URL; stopped (lifespan shut down) on exit. Assembly runs with
    generous timeouts (a loaded test machine must not turn a test's context into an L1), overridable."""
    custom = dataclasses.replace(
        settings, retrieval=dataclasses.replace(settings.retrieval, **(retrieval or {})),
        assembly=dataclasses.replace(settings.assembly, **{**GENEROUS, **(assembly or {})}))
    with served(create_app(custom, endpoints, embedder=embedder)) as url:
        yield url

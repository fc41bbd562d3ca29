"""Assembly wired into a running app: the orchestrator built from the app's services."""

from __future__ import annotations

import asyncio
import dataclasses

from service.assembly.cold import cold_retrieval_settings
from service.assembly.feedback import AccessRecorder
from service.assembly.hot import HotSetStore, RedisCircuit
from service.assembly.orchestrator import Orchestrator
from service.directives.store import DirectiveStore
from service.embeddings.lanes import lanes_of
from service.retrieval import RetrievalEngine
from service.runtime import Services
from service.text.tokens import Tokenizers


async def build_orchestrator(services: Services) -> Orchestrator:
    """Wire assembly into a running app's services (called from ``build_services``)."""
    settings = services.settings
    s = settings.assembly
    directives = services.extras["directives"]
    assert isinstance(directives, DirectiveStore)
    circuit = RedisCircuit(s.redis_retry_s)
    cold_ms = s.cold_timeout_ms or (s.deadline_ms - s.processing_reserve_ms)
    # An engine of its own: the HTTP search keeps its generous deadlines, assembly gets ones that fit.
    engine = RetrievalEngine(services.db, services.embedder, cold_retrieval_settings(settings.retrieval, cold_ms),
                             lanes=lanes_of(services),
                             max_limit=settings.limits.max_page_size)
    tokenizers = Tokenizers(s.tiktoken_dir or settings.data_dir / "tiktoken")
    await asyncio.to_thread(tokenizers.preload)  # ~1 s per encoding on first use: not on a request
    workers = settings.server.workers
    if workers > 1:
        # The thresholds are for the machine; each worker process sees only its share of the load.
        def share(n: int) -> int:
            return max(1, round(n / workers)) if n > 0 else 0

        s = dataclasses.replace(s, max_in_flight=share(s.max_in_flight))
    return Orchestrator(db=services.db, directives=directives,
                        hot=HotSetStore(services.db, services.redis, s, circuit, directives.epochs,
                                        services.settings.redis.org_hot_set_bytes), engine=engine,
                        tokenizers=tokenizers, access=AccessRecorder(services.db, s.access_flush_s), settings=s,
                        circuit=circuit)

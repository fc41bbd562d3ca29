"""HTTP handler for POST /v1/memories/search: thin — decode, call the engine, return its response."""

from __future__ import annotations

import structlog
from litestar import Controller, post
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from service.http.deps import OrgId, ServicesDep
from service.http.responses import errors
from service.retrieval.engine import RetrievalEngine
from service.retrieval.types import SearchRequest, SearchResponse
from service.runtime import Services

log = structlog.get_logger(__name__)


def engine_of(services: Services) -> RetrievalEngine:
    engine = services.extras["retrieval"]
    assert isinstance(engine, RetrievalEngine)
    return engine


class SearchController(Controller):
    path = "/v1/memories/search"
    tags = ["search"]

    @post("/", status_code=HTTP_200_OK, summary="Search memories (hybrid, lexical, semantic or cascade)",
          responses=errors(422))
    async def search(self, services: ServicesDep, org_id: OrgId, data: JSONBody[SearchRequest]) -> SearchResponse:
        """One request shape for every strategy; ``auto`` (default) picks one and says why.

        Each result carries its lexical and semantic rank and score (null where a branch did not
        return it) and how its final score was made; ``metrics`` has per-branch timings and counts.
        """
        response = await engine_of(services).search(org_id, data)
        r, m = response.retrieval, response.metrics
        # Ids, strategies and timings only: the query and memory text never reach the logs.
        log.info("memories_searched", org_id=str(org_id), requested_strategy=response.requested_strategy,
                 retrieval_planned=r.planned, retrieval_ran=r.ran, retrieval_reason=r.reason, total_ms=m.total_ms,
                 embedding_ms=m.embedding_ms, lexical_ms=m.lexical_ms, semantic_ms=m.semantic_ms,
                 results=len(response.results))
        return response

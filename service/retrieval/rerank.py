"""The optional reranker stage: an HTTP cross-encoder re-orders a search's fused top-N.

Fusion ranks by what the branches measured separately; a cross-encoder reads query and text
together and is often better at the final order, at the price of a network call and model time per
search. So it is off by default (``PGCONTEXT_RERANK_PROVIDER=none``) and, when on, never trusted
with the answer: if the search has less time left than the reranker's timeout (context assembly's
cold budget is tens of milliseconds) it is not called, and if it fails, times out or answers
something unusable the fused order stands. The response's ``rerank`` says which happened and why.

Providers (``POST {api_base}/rerank``):

* ``tei`` — Hugging Face text-embeddings-inference: ``{"query", "texts", "truncate"}`` ->
  ``[{"index", "score"}, ...]``;
* ``cohere`` and ``jina`` — ``{"model", "query", "documents", "top_n"}`` ->
  ``{"results": [{"index", "relevance_score"}, ...]}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import httpx
import msgspec
import structlog

from service.retrieval.types import RerankReport, SearchResult
from service.settings import RerankSettings
from service.timing import elapsed_ms

log = structlog.get_logger(__name__)


class RerankFailed(Exception):
    """The reranker could not be used for this search (the message says why)."""


class Reranker:
    """One HTTP client per engine; :meth:`scores` is one ``/rerank`` call."""

    def __init__(self, settings: RerankSettings) -> None:
        if settings.provider == "none" or settings.api_base is None:
            raise ValueError("a Reranker needs a provider and an api_base")
        self.settings = settings
        self.url = f"{settings.api_base.rstrip('/')}/rerank"
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(settings.timeout_ms / 1000))

    def body(self, query: str, texts: Sequence[str]) -> dict[str, Any]:
        if self.settings.provider == "tei":
            return {"query": query, "texts": list(texts), "truncate": True}
        return {"model": self.settings.model, "query": query, "documents": list(texts), "top_n": len(texts)}

    def parse(self, payload: Any, count: int) -> list[float]:
        """One score per text, in input order; RerankFailed unless every text got exactly one."""
        if self.settings.provider == "tei":
            items, score_key = payload, "score"
        else:
            items, score_key = payload.get("results") if isinstance(payload, dict) else None, "relevance_score"
        if not isinstance(items, list):
            raise RerankFailed(f"{self.url} answered without a list of scores")
        scores: dict[int, float] = {}
        for item in items:
            index = item.get("index") if isinstance(item, dict) else None
            score = item.get(score_key) if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < count or index in scores:
                raise RerankFailed(f"{self.url} answered a bad or repeated index: {str(item)[:80]}")
            if not isinstance(score, int | float) or score != score:  # NaN is not an order
                raise RerankFailed(f"{self.url} answered a non-numeric {score_key}: {str(item)[:80]}")
            scores[index] = float(score)
        if len(scores) != count:
            raise RerankFailed(f"{self.url} scored {len(scores)} of {count} candidates")
        return [scores[i] for i in range(count)]

    async def scores(self, query: str, texts: Sequence[str], *, timeout_ms: float) -> list[float]:
        """Relevance of each text to ``query`` (higher is better), within ``timeout_ms``."""
        cut = [t[: self.settings.max_chars] for t in texts]
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                response = await self._client.post(self.url, json=self.body(query, cut),
                                                   timeout=timeout_ms / 1000)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise RerankFailed(f"{self.url} timed out after {timeout_ms:.0f} ms") from exc
        except httpx.HTTPError as exc:
            raise RerankFailed(f"{self.url} request failed: {type(exc).__name__}: {str(exc)[:200]}") from exc
        if response.status_code != 200:
            raise RerankFailed(f"{self.url} returned HTTP {response.status_code}: {response.text[:200]!r}")
        try:
            payload = msgspec.json.decode(response.content)
        except msgspec.DecodeError as exc:
            raise RerankFailed(f"{self.url} returned malformed JSON: {response.text[:200]!r}") from exc
        return self.parse(payload, len(texts))

    async def aclose(self) -> None:
        await self._client.aclose()


def build_reranker(settings: RerankSettings) -> Reranker | None:
    return None if settings.provider == "none" else Reranker(settings)


def candidates(reranker: Reranker | None, limit: int) -> int:
    """How many fused results a search should produce: its limit, or the reranker's top-N if larger."""
    return limit if reranker is None else max(limit, reranker.settings.top_n)


async def apply(reranker: Reranker, query: str, results: list[SearchResult], *, limit: int,
                remaining_ms: float | None) -> tuple[list[SearchResult], RerankReport, float | None]:
    """Re-order ``results`` (the fused top-N, best first) by the reranker; return the best ``limit``,
    the report and the call's wall time (None when not called).

    Skipped when ``remaining_ms`` (the search's time left; None = no deadline) is below the
    reranker's timeout; on failure the fused order is kept. Ties keep their fused order."""
    s = reranker.settings
    report = RerankReport(provider=s.provider, outcome="skipped", detail="", candidates=len(results))
    if not results:
        report.detail = "nothing to rerank"
        return results, report, None
    if remaining_ms is not None and remaining_ms < s.timeout_ms:
        report.detail = (f"skipped: {max(remaining_ms, 0):.0f} ms left in the search's budget, less than the "
                         f"reranker may take ({s.timeout_ms} ms, PGCONTEXT_RERANK_TIMEOUT_MS); fused order kept")
        return results[:limit], report, None
    started = time.perf_counter()
    try:
        scores = await reranker.scores(query, [r.text for r in results], timeout_ms=s.timeout_ms)
    except RerankFailed as exc:
        log.warning("rerank_failed", provider=s.provider, error=str(exc)[:300])
        report.outcome, report.detail = "failed", f"{exc}; fused order kept"
        return results[:limit], report, elapsed_ms(started)
    ms = elapsed_ms(started)
    order = sorted(range(len(results)), key=lambda i: (-scores[i], i))[:limit]
    reranked = [msgspec.structs.replace(results[i], final_score=scores[i], fused_score=results[i].final_score)
                for i in order]
    moved = sum(1 for rank, i in enumerate(order) if rank != i)
    report.outcome = "applied"
    report.detail = f"{s.provider} reranked the fused top {len(results)} ({moved} of the returned {len(order)} moved)"
    return reranked, report, ms

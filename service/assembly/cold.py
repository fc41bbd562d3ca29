"""The cold branch of an assembly: the retrieval engine's search, full or light, under the cold budget.

The search runs on an engine of its own whose lexical, embedding and vector deadlines are derived
from the cold budget (:func:`cold_step_timeouts`). Each branch ranks the best ``n`` of the agent's own
and (by default) the org-wide rows, passing over other agents' rows as it goes, and returns them with
their scoring fields; ``n`` follows the memory budget (:mod:`service.assembly.cold_limit`). A search
goes light (lexical, fewer postings per term) only when the recent full searches with as many assemblies
running say a full one would miss this one's budget (:mod:`service.retrieval.shedding`), and the
response then says so (``retrieval.reason`` ``light``). See :mod:`service.assembly.orchestrator` for the
whole timeline.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Final
from uuid import UUID

import msgspec

from service.assembly.admission import Admission
from service.assembly.branches import BranchTimedOut
from service.assembly.candidates import ColdResult, cold_candidates
from service.assembly.cold_limit import ColdLimit, memories_budget_bound, seen_bound
from service.assembly.followup import search_query
from service.assembly.intent import SelectiveBudget
from service.assembly.types import AssembleRequest
from service.errors import ServiceUnavailable
from service.retrieval import RetrievalEngine, SearchRequest
from service.retrieval.planner import planned_strategy
from service.retrieval.run import StepTimeouts
from service.retrieval.shedding import SHEDS, LatencyByLoad, LatencyEwma, Verdict
from service.retrieval.types import RetrievalReason, RetrievalReport, UsedStrategy
from service.settings import AssemblySettings, RetrievalSettings
from service.timing import elapsed_ms

COLD_MARGIN_MS = 2
"""The search's inner deadlines end this much before the cold branch's, leaving room to fuse and read rows."""
COLD_REASONS: Final[dict[str, RetrievalReason]] = {"timeout": "cold_timeout", "error": "cold_error",
                                                   "skipped": "cold_skipped", "ok": "planned"}
"""``retrieval.reason`` of an assembly whose cold branch gave no answer, by its outcome."""


VECTOR_QUERY_MS = 100
"""Of a long cold budget (a caller's longer deadline), what the query's embedding leaves for the vector
query after it; the embedding may take the rest. A short budget is split in halves."""


def cold_step_timeouts(cold_ms: float) -> StepTimeouts:
    """The search's inner deadlines for a cold budget of ``cold_ms`` (see the module docstring).

    The lexical query runs beside the embedding and has the whole budget. The embedding and the vector
    query run one after the other: half each of a short budget; of a long one, the vector query keeps
    :data:`VECTOR_QUERY_MS` and the embedding may take the rest. On a busy host the embedding is
    the step that waits (for the model's thread, and the model's thread for a core): a caller that
    gave 500 ms lost its full search to an embedding deadline of 245 ms while the vector query after
    it needed a few ms."""
    inner = max(1, int(cold_ms) - COLD_MARGIN_MS)
    half = max(1, inner // 2)
    return StepTimeouts(lexical_ms=inner, embedding_ms=max(half, inner - VECTOR_QUERY_MS), semantic_ms=half)


def cold_retrieval_settings(base: RetrievalSettings, cold_ms: int) -> RetrievalSettings:
    """The cold engine's settings: its deadlines those of a default cold budget of ``cold_ms``."""
    t = cold_step_timeouts(cold_ms)
    return dataclasses.replace(base, lexical_timeout_ms=t.lexical_ms, embedding_timeout_ms=t.embedding_ms,
                               semantic_timeout_ms=t.semantic_ms)


def org_wide_documents(req: AssembleRequest) -> bool:
    """Whether org-wide document chunks may enter the context: only from the collections the request
    names (``retrieval.filters.collections``). An org's imported trees are for the agents that ask
    for them; the agent's own documents (and every other org-wide memory) need no naming."""
    return req.retrieval.filters.collections is not None


class ColdBranch:
    """The cold search of every assembly of one orchestrator, and what it learns between them: how
    many candidates a budget needs (``limits``) and how long full searches take by load (``full``)."""

    def __init__(self, engine: RetrievalEngine, settings: AssemblySettings, admission: Admission) -> None:
        self.engine = engine
        self.settings = settings
        self.admission = admission
        self.limits = ColdLimit(settings)
        self.full = LatencyByLoad()
        """Recent latency of full (not light) cold searches that embed, by the most assemblies running
        during each (service.retrieval.shedding.LatencyByLoad): when a search goes light."""

    def forget_latencies(self) -> None:
        """Drop what full searches and query embeddings have taught shedding so far (the start's
        warm-up ran them cold: slower than any later one)."""
        self.full = LatencyByLoad()
        self.engine.queries.latency = LatencyEwma()

    def request(self, org_id: UUID, req: AssembleRequest, sel: SelectiveBudget | None) -> tuple[SearchRequest, int]:
        """The search for ``req`` and how many of its candidates to keep (400 on bad input)."""
        opts = req.retrieval
        wanted = opts.limit or self.limits.for_budget(org_id, memories_budget_bound(
            req, sel, self.settings.default_reserve_tokens))
        # the turns history-aware packing leaves out take no places of the others (a search's most rows)
        keep = min(self.engine.max_limit, wanted + seen_bound(req))
        if opts.include_org_wide:
            filters = opts.filters
        else:
            filters = msgspec.structs.replace(opts.filters, agent_id=req.agent_id)
        search = SearchRequest(query=req.query, strategy=opts.strategy, limit=keep,
                               filters=filters, tuning=opts.tuning)
        self.engine.validate(search)  # bad input is the caller's 400, not a failed branch
        if opts.complete_from_history:
            query = search_query(req.query, req.recent_messages)[0]
            if len(query) <= self.engine.settings.max_query_chars:  # names never make a valid query too long
                search = msgspec.structs.replace(search, query=query)
        return search, keep

    async def run(self, org_id: UUID, req: AssembleRequest, search: SearchRequest, keep: int,
                  timeout_ms: float, queued_ms: float, *, extended: bool = False) -> ColdResult:
        """The cold search of one assembly with ``timeout_ms`` for the branch, after ``queued_ms`` in
        line; ``extended``: the caller's deadline lengthened the budget."""
        # Light only when a full search would miss this one's budget, as measured (the recent full
        # searches' latency; see service.retrieval.shedding). Other searches in flight are no reason
        # by themselves: most full searches fit in the budget even then. Time spent waiting in line
        # is: the caller has already spent it, and a full search's extra CPU makes everyone behind
        # this one wait longer (a standing line is the service running out of cores).
        budget_ms = timeout_ms - COLD_MARGIN_MS
        left_ms = budget_ms - queued_ms
        intended = planned_strategy(search)
        embeds = intended != "lexical"  # a search that embeds (and walks HNSW) is what shedding saves
        running = self.admission.in_flight
        recent = self.full.at(running)  # full searches that ran with as many running as this one
        share = self.settings.light_cold_share
        if not embeds or (extended and recent.fits(budget_ms, share, waited_ms=queued_ms)):
            # A caller that gave more time is not shed on the default budget's terms: only when the
            # recent full searches would miss its own (and it neither probes nor waits for probes).
            verdict: Verdict = "fits"
        else:  # three probes at a time measure an unjudged window; the rest stay light meanwhile
            verdict = recent.judge(budget_ms, share, waited_ms=queued_ms)
        if verdict == "probe":
            recent.probing += 1
            try:
                return await self._search(org_id, req, search, keep, budget_ms, intended, None, running)
            finally:
                recent.probing -= 1
        note = None
        if verdict in SHEDS:
            waited = f"{queued_ms:.0f} ms in line, " if queued_ms >= 1 else ""
            if verdict == "late":
                why = (f"{max(0.0, left_ms):.0f} ms left of the {budget_ms:.0f} ms budget: too little for a full "
                       f"{intended} search")
            elif verdict == "probing":
                why = (f"{recent.probing} full {intended} searches with {running} running are measuring whether "
                       f"one fits the {left_ms:.0f} ms left of the {budget_ms:.0f} ms budget ({recent.describe()})")
            else:
                why = (f"full {intended} searches' {recent.describe()} with {running} running > "
                       f"{self.settings.light_cold_share:.0%} of the {left_ms:.0f} ms left of the {budget_ms:.0f} ms "
                       "budget")
            note = f"light lexical ({self.settings.light_cold_postings_per_term} postings per term: {waited}{why})"
        return await self._search(org_id, req, search, keep, budget_ms, intended, note, running)

    async def _search(self, org_id: UUID, req: AssembleRequest, search: SearchRequest, keep: int,
                      budget_ms: float, intended: UsedStrategy, light_note: str | None, running: int) -> ColdResult:
        """The cold search, light (lexical, fewer postings) with ``light_note`` as its reason."""
        wide = req.retrieval.include_org_wide
        s = self.settings
        embeds = intended != "lexical"
        light = light_note is not None

        def observe(ms: float) -> None:
            # Filed under the most that ran during it (at its start or its end): a search that began
            # alone as a burst started ran beside the burst, and says nothing about one that is alone.
            self.full.at(max(running, self.admission.in_flight)).observe(ms)

        planned = light and search.strategy == "auto"
        if planned:  # under load auto is lexical: no embedding, no HNSW walk
            search = msgspec.structs.replace(search, strategy="lexical")
        if light and req.retrieval.limit is None and keep > s.cold_limit:
            # Under load the budget does not buy more candidates: fewer rows, less ranking.
            keep = s.cold_limit
            search = msgspec.structs.replace(search, limit=keep)
        started = time.perf_counter()
        try:
            response, found = await self.engine.search_rows(
                org_id, search, (req.agent_id, wide, org_wide_documents(req)), budget_ms=budget_ms,
                postings_per_term=s.light_cold_postings_per_term if light else None,
                timeouts=cold_step_timeouts(budget_ms + COLD_MARGIN_MS))
        except ServiceUnavailable as exc:
            if embeds and not light:
                observe(elapsed_ms(started))
            if exc.details.get("timed_out") is True:
                raise BranchTimedOut(f"lexical: {exc.details.get('lexical')}; "
                                     f"semantic: {exc.details.get('semantic')}"[:300]) from exc
            raise
        if embeds and not light and response.retrieval.reason not in ("embedder_circuit_open", "embedder_busy"):
            observe(elapsed_ms(started))  # (auto skipping the embedder is no full search)
        if light_note is not None:
            if planned:
                response.requested_strategy, response.reason = "auto", f"auto: {light_note}"
            else:
                response.reason = f"{response.reason}; {light_note}"
            response.retrieval = RetrievalReport(planned=intended, ran=response.strategy, reduced=True, reason="light")
        scores = {r.id: r.final_score for r in response.results}
        # The branches return only the agent's own (and org-wide) rows, with their scoring fields, for
        # every strategy assembly can ask for (the cascade's exact step ranks lexical hits, which do).
        rows = [found[i] for i in scores if i in found]
        return ColdResult(cold_candidates(rows[:keep], scores, {r.id: r.score for r in response.results}), response)

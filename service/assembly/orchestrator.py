"""Context assembly: three concurrent branches under one deadline, then budget, rank, pack and format.

Timeline of one request (``deadline_ms`` = ``PGCONTEXT_DEADLINE_MS``, default 40, or the caller's
own deadline up to ``max_deadline_ms``: :mod:`service.assembly.deadline`), from when it is admitted
(at most ``max_in_flight`` assemblies run at once; the rest wait in line first — see
:mod:`service.assembly.admission`; the wait is ``metrics.queued_ms``)::

    t=0  directive ──(the whole wall)────────────┐
         hot set   ──(hot_timeout_ms, ~15; a miss ┤   each branch: ok | timeout | error | skipped
                     read from Postgres: the wall)┤
         cold      ──(cold_timeout_ms, ≤ wall)───┤   wall = deadline_ms - processing_reserve_ms
         history counted, selective plan made ───┘   (CPU work overlaps the branches' I/O)
    then budget -> leave out what the history holds -> score -> pack -> format in the reserve;
    total_ms ≈ wall + a few ms.

A caller's deadline longer than ``PGCONTEXT_DEADLINE_MS`` lengthens the wall and the hot and cold
timeouts in proportion (and the cold search's own step deadlines): a caller that can wait gets the
full planned retrieval.

* **Branches** run as tasks started together (:mod:`service.assembly.branches`). Every branch has
  its own timeout, capped by the wall (and by the caller's deadline, if sooner): how long the
  assembly waits for that branch alone — an overdue branch that answers while another is still
  within its timeout is used (``ok``, marked late in its ``detail``). A branch that fails or times
  out is recorded in ``branches`` and the rest is used. Hot and cold candidates are merged by id.
  The directive and hot-set reads (Redis, no CPU to speak of) are sent when the request arrives,
  before admission: one that waits in line is admitted with them in hand (``EarlyReads``; their
  timeouts still count from t=0 below). At concurrency 8 on two cores, hot sets that missed their
  15 ms behind a busy event loop were most of the L1 answers.
* **Cold** (:mod:`service.assembly.cold`) is the retrieval engine's search on an engine of its own
  whose lexical, embedding and vector deadlines are derived from the cold budget (lexical ≈ the
  budget, embedding and vector query half each; of a caller's longer budget the vector query keeps
  100 ms and the embedding may take the rest), so the engine's own fallbacks (e.g. a slow
  embedder -> lexical only) happen inside the cold budget instead of the whole branch timing out.
  Each branch ranks the best ``n`` of the agent's own and (by default) the org-wide rows, passing over
  other agents' rows as it goes (ranking the whole org and keeping what is in scope left an agent of a
  many-agent org a few candidates, or none), and returns them with the scoring fields (embedding,
  importance, last access, ...) (``RetrievalEngine.search_rows``): no second read, and no other agent's
  rows on the wire. The ``n`` candidates follow the memory budget (:mod:`service.assembly.cold_limit`): enough to
  fill it, from ``cold_limit`` to ``cold_limit_max``; a light search under load keeps to ``cold_limit``.
* **Relevance** of cold items is their fused score scaled to [0, 1]; of hot items the cosine of
  their embedding with the query's (taken from the engine's query-embedding cache, which the cold
  branch just filled), or, without one, the share of the query's content words they contain.
* **Directive** (:mod:`service.assembly.directive`): part of the contract, so its branch has the
  whole wall, and a Redis read that does not answer when recent ones had (at least
  ``directive_fallback_ms``) is raced by Postgres; a read with no answer by the wall is stood in
  for by this process's last copy (at most ``directive_last_known_s`` old: ``directive_unconfirmed``).
* **Ladder.** L0: hot and cold both usable (ok, even if empty); L1: exactly one; L2: none — the
  block then holds the directive and history only. L3: the caller's deadline (``X-Deadline-Ms``,
  absolute Unix ms, ``X-Timeout-Ms``, relative, or the body's ``timeout_ms``) passed or the client
  went away: 504, no context at all. The level counts memory sources; ``degradation_reasons``
  lists everything else the context lacks of what was planned: ``directive_missing`` (the read did
  not answer and no recent copy stood in: ``directive`` is null, ``branches.directive`` says why),
  ``directive_unconfirmed`` (the copy stood in), ``hot_unavailable``,
  ``cold_unavailable``, ``retrieval_reduced`` — in the response, the log line and
  ``pgcontext_assembly_degradations_total``.
* **CPU work.** Scoring and packing take a few ms for typical candidate counts and run on the
  event loop; above ``inline_cpu_candidates`` they move to a worker thread so one large request
  cannot stall every other request's I/O. ``recent_messages`` are counted once per message, newest
  first and only as far back as could fit (:func:`~service.assembly.budget.measure_history`); a
  history longer than ``inline_history_chars`` is counted in its own thread while the branches run
  (tiktoken releases the GIL while it encodes).
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import structlog

from service.assembly import metrics as assembly_metrics
from service.assembly.admission import Admission
from service.assembly.branches import BranchTask, EarlyReads, SlowPath, settle
from service.assembly.budget import Budget, HistoryCost, history_limit, measure_history, plan_budget, too_small
from service.assembly.candidates import hot_candidates
from service.assembly.cold import COLD_REASONS, ColdBranch
from service.assembly.deadline import CallerDeadline, plan_wall
from service.assembly.directive import DirectiveRead, DirectiveSource
from service.assembly.feedback import AccessRecorder
from service.assembly.format import format_context, format_directive
from service.assembly.history import leave_out_history, read_last
from service.assembly.hot import HotRead, HotSetStore, RedisCircuit
from service.assembly.hot_scope import in_scope, left_out
from service.assembly.intent import SelectiveBudget, plan_selective_budget
from service.assembly.packing import pack
from service.assembly.response import Ranked, build_response, log_assembled
from service.assembly.scoring import (
    Candidate,
    ScoringRules,
    score_candidates,
)
from service.assembly.types import (
    AssembleRequest,
    AssembleResponse,
    Level,
)
from service.db import Database
from service.directives.store import DirectiveStore
from service.directives.types import DirectiveOut
from service.errors import BadRequest, DeadlineExceeded, Unprocessable
from service.retrieval import RetrievalEngine, SearchRequest
from service.retrieval.planner import planned_strategy
from service.retrieval.types import RetrievalReport
from service.retrieval.validation import check_query
from service.settings import AssemblySettings
from service.tenancy.orgscope import in_thread, org_scope
from service.text.model_families import ModelTokens, UnknownModelError, accepted_choices, resolve_model
from service.text.tokens import TokenCounter, Tokenizers
from service.timing import elapsed_ms

log = structlog.get_logger(__name__)

INLINE_PLAN_CHARS = 500
"""Queries longer than this are classified (intent, complexity) off the event loop."""


class Orchestrator:
    """One per app (``services.extras["assembly"]``)."""

    def __init__(self, *, db: Database, directives: DirectiveStore, hot: HotSetStore, engine: RetrievalEngine,
                 tokenizers: Tokenizers, access: AccessRecorder, settings: AssemblySettings,
                 circuit: RedisCircuit) -> None:
        self.db = db
        self.directives = directives
        self.hot = hot
        self.engine = engine
        self.tokenizers = tokenizers
        self.access = access
        self.settings = settings
        self.circuit = circuit
        self.scoring = ScoringRules(recency_half_life_hours=settings.recency_half_life_hours)
        self.directive = DirectiveRead(directives, circuit, settings.directive_fallback_ms)
        self._cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="assemble")
        self._history_cpu = ThreadPoolExecutor(max_workers=1, thread_name_prefix="history")
        self.admission = Admission(settings.max_in_flight, settings.max_queued, target_ms=settings.queue_target_ms,
                                   interval_ms=settings.queue_interval_ms, hold_ms=settings.refusal_hold_ms)
        self.cold = ColdBranch(engine, settings, self.admission)

    # -- validation --------------------------------------------------------------------------------

    def counter_for(self, req: AssembleRequest) -> tuple[TokenCounter, ModelTokens]:
        try:
            tokens = resolve_model(req.model, req.encoding)
        except UnknownModelError as exc:
            raise BadRequest(str(exc), code="unknown_model",
                             details={"field": "model", "accepted": accepted_choices()}) from exc
        return self.tokenizers.get(tokens.encoding), tokens

    def _validate(self, req: AssembleRequest) -> None:
        s = self.settings
        # Before anything reads the query (the selective plan's patterns, the names, the search).
        check_query(req.query, max_query_chars=self.cold.engine.settings.max_query_chars)
        if req.max_context_tokens is None and not req.selective:
            raise Unprocessable("give max_context_tokens, selective: true, or both", code="validation_error",
                                details={"field": "max_context_tokens"})
        if (req.max_context_tokens or 0) > s.max_context_tokens or (req.reserve_tokens or 0) > s.max_context_tokens:
            raise BadRequest(f"token counts must be at most {s.max_context_tokens}", code="validation_error")
        if len(req.recent_messages) > s.max_messages:
            raise BadRequest(f"at most {s.max_messages} recent_messages", code="validation_error",
                             details={"field": "recent_messages"})
        for i, m in enumerate(req.recent_messages):
            if len(m.content) > s.max_message_chars or "\x00" in m.content or "\x00" in m.role:
                raise BadRequest(f"recent_messages[{i}] is longer than {s.max_message_chars} characters or holds NUL",
                                 code="validation_error", details={"field": f"recent_messages[{i}]"})
        if req.history_turns is not None and req.conversation_id is None:
            raise Unprocessable("history_turns needs conversation_id (the conversation whose last turns the model "
                                "sees)", code="validation_error", details={"field": "history_turns"})
        if req.retrieval.filters.agent_id is not None:
            raise Unprocessable("retrieval.filters.agent_id is not allowed: the request's agent_id scopes the search",
                                code="validation_error", details={"field": "retrieval.filters.agent_id"})

    # -- the pipeline ------------------------------------------------------------------------------

    def _budget(self, req: AssembleRequest, sel: SelectiveBudget, counter: TokenCounter, directive: str | None,
                history: list[tuple[str, str]], measured: HistoryCost, reserve: int,
                window: int | None) -> tuple[Budget, tuple[tuple[str, str], ...]]:
        """The budget and the recent messages the history section keeps (the newest that fit); 422
        when the directive, the reserve and the envelope alone overflow the window."""
        budget, kept = plan_budget(counter, directive=directive, history=history, reserve_tokens=reserve,
                                   max_context_tokens=window,
                                   selective=sel if req.selective else None, measured=measured)
        if budget.overflow > 0:
            raise too_small(budget, window, counter, asked=(req.max_context_tokens, req.reserve_tokens),
                            default_reserve=self.settings.default_reserve_tokens)
        return budget, kept

    def _rank_pack_format(self, candidates: list[Candidate], sel: SelectiveBudget, counter: TokenCounter,
                          directive: str | None, budget: Budget, kept: tuple[tuple[str, str], ...],
                          measured: HistoryCost) -> Ranked:
        started = time.perf_counter()
        scored = score_candidates(candidates, intent=sel.intent, counter=counter, rules=self.scoring,
                                  show_dates=sel.temporal)
        ranked = time.perf_counter()
        result = pack(scored, budget_tokens=budget.memories_available, intent=sel.intent, counter=counter,
                      scoring=self.scoring)
        packed = time.perf_counter()
        budget = budget.with_memories_tokens(result.tokens_used)
        context = format_context(directive, result.chosen, kept)
        # Exact by construction (see service.assembly.format): the sections' counts add up.
        context_tokens = (counter.count(format_directive(directive)) + result.tokens_used
                          + measured.section(len(kept)))
        done = time.perf_counter()
        return Ranked(scored, result, budget, context, context_tokens, elapsed_ms(started, ranked),
                      elapsed_ms(ranked, packed), elapsed_ms(packed, done))

    def _plan_budget(self, query: str, planned: SelectiveBudget | None) -> asyncio.Future[SelectiveBudget]:
        """Intent and complexity of the query (unless ``planned`` already): on the event loop when
        short, else in the history thread while the branches' I/O is in flight (a 4,000-character
        query took ~14 ms of classification, a stall of every other request on the loop)."""
        loop = asyncio.get_running_loop()
        if planned is not None or len(query) <= INLINE_PLAN_CHARS:
            done: asyncio.Future[SelectiveBudget] = loop.create_future()
            done.set_result(planned or plan_selective_budget(query))
            return done
        return in_thread(self._history_cpu, plan_selective_budget, query)

    def _measure_history(self, counter: TokenCounter, history: list[tuple[str, str]],
                         limit: int | None) -> asyncio.Future[HistoryCost]:
        """Count the recent messages (only as far back as could fit, :func:`measure_history`): on the
        event loop when short, else in the history thread while the branches' I/O is in flight. A
        long history is megabytes of BPE work (200 messages of 32,000 characters took ~2 s and
        stalled every other request on the loop); one thread keeps such requests from taking
        more than one core between them."""
        loop = asyncio.get_running_loop()
        if sum(len(content) for _, content in history) <= self.settings.inline_history_chars:
            done: asyncio.Future[HistoryCost] = loop.create_future()
            done.set_result(measure_history(counter, history, limit))
            return done
        return in_thread(self._history_cpu, measure_history, counter, history, limit)

    async def assemble(self, org_id: UUID, req: AssembleRequest, caller: CallerDeadline) -> AssembleResponse:
        """Validate, wait to be admitted (:mod:`service.assembly.admission`), then assemble; the
        in-process caches of text read and write ``org_id``'s entries only (:mod:`service.tenancy.orgscope`)."""
        with org_scope(org_id):
            return await self._admit_and_assemble(org_id, req, caller)

    async def _admit_and_assemble(self, org_id: UUID, req: AssembleRequest,
                                  caller: CallerDeadline) -> AssembleResponse:
        self._validate(req)
        counter, model = self.counter_for(req)
        # Selective mode sizes the cold search by its budget, so it is planned first; otherwise the
        # plan is made while the branches' I/O is in flight.
        sel = plan_selective_budget(req.query) if req.selective else None
        search, keep = self.cold.request(org_id, req, sel)
        # The cache reads go out now, not after admission: a request waiting in line has them then.
        early = self._early_reads(org_id, req)
        try:
            async with self.admission.admit(caller.remaining_ms(), org=org_id) as queued_ms:
                # The caller's deadline bounds the whole assembly, whatever inside waits (a locked table,
                # a contended pool): past it the answer is the ladder's L3 at once, not seconds later.
                left_ms = caller.remaining_ms()
                bound = asyncio.timeout(None if left_ms is None else max(left_ms, 0.0) / 1000)
                try:
                    async with bound:
                        return await self._assemble(org_id, req, caller, (counter, model), search, keep, queued_ms,
                                                    sel, early)
                except TimeoutError:
                    if not bound.expired():
                        raise
                    raise DeadlineExceeded("the caller's deadline passed during assembly", code="deadline_exceeded",
                                           details={"level": "L3"}) from None
        finally:
            early.drop()

    def _early_reads(self, org_id: UUID, req: AssembleRequest) -> EarlyReads:
        early = EarlyReads()
        early.start("directive", lambda: self.directive.read(org_id, req.agent_id))
        if left_out(req) is None and self.circuit.available():
            slow = SlowPath()  # a miss reads Postgres: the assembly then waits for it up to the wall
            early.start("hot", lambda: self.hot.get(org_id, req.agent_id, on_miss=slow.take), slow=slow)
        return early

    async def assemble_quietly(self, org_id: UUID, req: AssembleRequest, caller: CallerDeadline) -> AssembleResponse:
        """An assembly outside admission that leaves no trace in metrics, logs, access statistics or
        the latencies shedding learns from: the start's warm-up (:mod:`service.assembly.warmup`)."""
        with org_scope(org_id):
            self._validate(req)
            sel = plan_selective_budget(req.query) if req.selective else None
            search, keep = self.cold.request(org_id, req, sel)
            early = self._early_reads(org_id, req)
            try:
                return await self._assemble(org_id, req, caller, self.counter_for(req), search, keep, 0.0, sel,
                                            early, quiet=True)
            finally:
                early.drop()
                self.cold.forget_latencies()

    async def _assemble(self, org_id: UUID, req: AssembleRequest, caller: CallerDeadline,
                        counting: tuple[TokenCounter, ModelTokens],
                        search: SearchRequest, keep: int, queued_ms: float,
                        planned: SelectiveBudget | None, early: EarlyReads, *, quiet: bool = False) -> AssembleResponse:
        started = time.perf_counter()
        s = self.settings
        counter, model = counting
        if caller.passed():
            raise DeadlineExceeded("the caller's deadline passed before assembly started", code="deadline_exceeded",
                                   details={"level": "L3"})
        wall = plan_wall(s, caller.remaining_ms())
        cold_ms = wall.cold_ms

        directive_read, hot_read = early.get("directive"), early.get("hot")
        assert directive_read is not None, "assemble() starts the directive read"
        directive_branch: BranchTask[tuple[DirectiveOut | None, DirectiveSource]] = BranchTask.adopt(
            "directive", wall.directive_ms, directive_read)
        hot_branch: BranchTask[HotRead]
        if hot_read is not None:  # assemble() decided on arrival whether the hot set is read at all
            hot_branch = BranchTask.adopt("hot", wall.hot_ms, hot_read, self.circuit, slow_timeout_ms=wall.wall_ms)
        else:
            hot_branch = BranchTask.skipped("hot", left_out(req) or "Redis failed recently; retrying soon")
        cold_branch = BranchTask.start("cold", cold_ms, lambda: self.cold.run(org_id, req, search, keep, cold_ms,
                                                                              queued_ms, extended=wall.extended))
        last_read = asyncio.ensure_future(read_last(self.db, org_id, req)) if req.history_turns is not None else None
        branches: tuple[BranchTask[Any], ...] = (directive_branch, hot_branch, cold_branch)
        try:
            await asyncio.sleep(0)  # let the branches send their first I/O before the CPU work below
            budget_started = time.perf_counter()
            planning = self._plan_budget(req.query, planned)
            history = [(m.role, m.content) for m in req.recent_messages]
            # A model counted with another family's encoding budgets only a share of its window (see
            # service.text.model_families): the window rounds down, the reserve kept free rounds up.
            reserve = model.scale(req.reserve_tokens if req.reserve_tokens is not None else s.default_reserve_tokens,
                                  round_up=True)
            window = None if req.max_context_tokens is None else model.scale(req.max_context_tokens)
            measuring = self._measure_history(counter, history, history_limit(window, reserve, counter))
            budget_pre_ms = elapsed_ms(budget_started)
            await settle(branches)
            measured = await measuring
            sel = await planning
        finally:
            for branch in branches:
                branch.cancel()  # only does something when we are being cancelled or failed before settling
        directive_run, hot_run, cold_run = directive_branch.result(), hot_branch.result(), cold_branch.result()
        if directive_run.outcome != "ok" and (copy := self.directives.last_known.get(org_id, req.agent_id,
                                                                                    s.directive_last_known_s)):
            directive_run = directive_run.stood_in((copy.directive, "memory"),
                                                   f"used the copy this process read {copy.age_s():.1f} s ago")

        directive = directive_run.value[0] if directive_run.value is not None else None
        query_vector = self.engine.cached_embedding(org_id, search.query)
        candidates: list[Candidate] = []
        if hot_run.value is not None:
            scoped = in_scope(hot_run.value, req.retrieval.filters, org_wide=req.retrieval.include_org_wide)
            candidates += hot_candidates(scoped, search.query, query_vector)
        if cold_run.value is not None:
            candidates += cold_run.value.candidates
        directive_text = directive.content if directive is not None else None
        budgeting = time.perf_counter()
        # The history is trimmed to fit before candidates are left out as in it: a turn trimmed out of
        # the history section is not in the model's view, so it is a candidate like any other memory.
        budget, kept = self._budget(req, sel, counter, directive_text, history, measured, reserve, window)
        budget_ms = budget_pre_ms + elapsed_ms(budgeting)
        candidates, in_history = await leave_out_history(req, kept, candidates, cold_run.value, last_read, counter,
                                                         wall.wall_ms / 1000 - (time.perf_counter() - started),
                                                         show_dates=sel.temporal)
        work = (candidates, sel, counter, directive_text, budget, kept, measured)
        if len(candidates) > s.inline_cpu_candidates:
            ranked = await in_thread(self._cpu, self._rank_pack_format, *work)
        else:
            ranked = self._rank_pack_format(*work)
        self.cold.limits.learn(org_id, ranked.scored)

        if caller.passed():
            raise DeadlineExceeded("the caller's deadline passed during assembly", code="deadline_exceeded",
                                   details={"level": "L3"})
        usable = [name for name, run in (("hot", hot_run), ("cold", cold_run)) if run.outcome == "ok"]
        if cold_run.value is not None:
            retrieval = cold_run.value.search.retrieval
        else:  # the cold branch gave no answer: nothing ran that the context could use
            retrieval = RetrievalReport(planned=planned_strategy(search), ran=None, reduced=True,
                                        reason=COLD_REASONS[cold_run.outcome])
        level: Level = "L0" if len(usable) == 2 else "L1" if usable else "L2"
        sources = (["directive"] if directive_run.outcome == "ok" else []) + usable
        response = build_response(req, ranked, directive, level, sources, directive_run, hot_run, cold_run,
                                  budget_ms, started, counting, sel, retrieval, in_history)
        response.metrics.queued_ms, response.metrics.deadline_ms = queued_ms, round(wall.deadline_ms, 3)
        if not quiet:
            self.access.record(org_id, [m.id for m in response.memories_used])
            log_assembled(org_id, req, response)
            assembly_metrics.record(response)
        return response

    async def aclose(self) -> None:
        await self.directive.aclose()
        await self.hot.aclose()
        await self.access.aclose()
        self._cpu.shutdown(wait=False, cancel_futures=True)
        self._history_cpu.shutdown(wait=False, cancel_futures=True)

"""Settings of context assembly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from service.settings.env import usable_cpus


@dataclass(frozen=True, slots=True)
class AssemblySettings:
    """Context assembly (POST /v1/context/assemble): deadlines, hot set, scoring and budget defaults."""

    deadline_ms: int = 40
    """Outer wall of one assembly (``PGCONTEXT_DEADLINE_MS``): every retrieval branch ends by
    ``deadline_ms - processing_reserve_ms``; ranking, packing and formatting use the reserve."""
    processing_reserve_ms: int = 6
    """Part of the wall kept for scoring, packing and formatting after the branches stop."""
    directive_timeout_ms: int = 0
    """Directive branch (Redis envelope, Postgres on a miss); 0 = the whole retrieval wall. The
    directive is part of every context: a few hundred bytes must not lose to a timer of a few ms
    on a busy host (an assembly without it says so: ``degradation_reasons`` ``directive_missing``)."""
    directive_fallback_ms: int = 5
    """A Redis read of the directive that has not answered within this, or within the 95th percentile
    of the recent reads if longer (at most four times this), also asks Postgres, and the first answer
    wins (a slow Redis costs the directive this much, not the wall)."""
    directive_last_known_s: int = 300
    """When the directive's read has not answered by the wall (a busy host: the answer waits for a core),
    the assembly uses the copy this process last read or wrote for the agent, if it is at most this
    old, and says so (``degradation_reasons``: ``directive_unconfirmed``). 0: never; the context then
    goes without the directive (``directive_missing``)."""
    max_deadline_ms: int = 1000
    """Longest deadline a caller can ask for (``X-Timeout-Ms``, ``X-Deadline-Ms`` or the body's
    ``timeout_ms``): a caller that can wait gets a longer wall and branch timeouts, up to this, so
    its assembly runs the full planned retrieval where the default deadline would cut it short.
    At most ``deadline_ms`` from a caller that gives no deadline; a shorter caller deadline
    shortens the wall. Each such assembly holds an admission slot for as long as it runs."""
    hot_timeout_ms: int = 15
    """Hot branch (the agent's hot set in Redis, filled from Postgres on a miss). Counted from the
    assembly's start; a miss (and an org's first read after a start) is read from Postgres and waited
    for up to the wall, like the directive, instead of leaving the first assembly after each write or
    restart without its hot set; the read itself (like the directive's) is sent when the request arrives, so one
    that waits in line is admitted with it done (``branches.hot.detail``: "read while the request
    waited in line")."""
    cold_timeout_ms: int = 0
    """Cold branch (hybrid search); 0 = up to the retrieval wall. The search's own lexical, embedding
    and vector deadlines are derived from it so its fallbacks happen inside it."""
    cold_limit: int = 20
    """Fewest cold candidates handed to ranking (after scoping to the agent and org-wide memories).
    Larger budgets get more: enough to fill the memory budget (see ``cold_candidates_per_slot``),
    up to ``cold_limit_max``; a light cold search (under load) keeps to this many."""
    cold_limit_max: int = 60
    """Most cold candidates the memory budget can ask for."""
    cold_candidates_per_slot: float = 2.0
    """Cold candidates per memory the budget can hold: the packer drops near-duplicates and weak
    matches, so filling the budget takes more candidates than it holds."""
    cold_tokens_per_memory: int = 40
    """Typical tokens of a packed memory line, until the org's own recent candidates say otherwise."""
    max_in_flight: int = field(default_factory=lambda: 2 * usable_cpus())
    """Assemblies processed at once per machine (divided among the workers; 0 = no limit). Further
    ones wait in line (briefly, see ``queue_target_ms``), and their deadline starts when they are admitted
    (the wait is reported as ``metrics.queued_ms`` and counts against the caller's own deadline).
    When the cores are the limit, interleaving more requests only stretches every one of them past
    its wall; waiting in line keeps each admitted one inside it. Default: 2 per CPU core (an
    assembly costs ~5-10 ms of CPU across the service and a co-located Postgres); raise it when
    Postgres runs elsewhere and requests mostly wait on the network."""
    max_queued: int = 256
    """Assemblies allowed to wait per worker; beyond that a request is refused at once with 503
    ``overloaded`` and ``Retry-After``."""
    queue_target_ms: int = 100
    """Longest wait for a slot while the line is standing (not empty for ``queue_interval_ms``):
    CoDel's target. A request still waiting at twice this is refused (503 ``overloaded``), and while
    the line is full or nobody was admitted within this of arriving for ``queue_interval_ms``,
    freed slots go to the newest waiters first, so a standing line drains to what the slots serve
    this fast."""
    queue_interval_ms: int = 500
    """Longest wait for a slot when the line is not standing (a burst), and how long the line must
    have been non-empty to count as standing. A request whose caller deadline leaves less than the
    measured assembly time is refused on arrival, and waits at most until it would."""
    refusal_hold_ms: int = 1000
    """A refused assembly (503 ``overloaded``) is answered no sooner than this after it arrived (or
    just before the caller's deadline): a held refusal costs a timer, while clients that ignore
    ``Retry-After`` and retry at once would spend the cores on refusals (0 = answer at once)."""
    light_cold_share: float = 0.8
    """A cold search that would embed the query is light when the recent full ones at the same load
    (the median latency of the last nine that ran with as many assemblies running, per process)
    took more than this share of what is left of its cold budget once its wait in line is taken
    off (0 = never): ``auto`` plans lexical (no embedding, no HNSW walk) and BM25 reads
    ``light_cold_postings_per_term`` postings per query term instead of the retrieval default. A
    light search inside the deadline (L0) beats a full one that times out (L1), but only then: the
    response says so (``retrieval.reason: light``). After a second without a full search at that
    load the next ones run full again to measure, at most three at a time, before it sheds again;
    while the load lasts each shedding window doubles that second, up to 4 s, and only a request
    with this share of its budget still ahead of it measures (see service/retrieval/shedding.py)."""
    light_cold_postings_per_term: int = 200
    """Postings per query term of a light cold search (the retrieval default is 500)."""
    hot_set_size: int = 16
    """Most memories in an agent's hot set (pinned first, then importance and recent use)."""
    hot_ttl_s: int = 300
    """Lifetime of a cached hot set; bounds how long "recently used" can lag. (A set that missed a
    write while Redis was unreachable is not served once Redis is back: see ``PGCONTEXT_REDIS_EPOCH_CHECK_S``.)"""
    hot_refresh_s: int = 60
    """A cached set older than this is still served, and rebuilt in the background (single flight):
    an agent in use never waits for a fill because its set aged, only after a write changed it. Each
    agent's set is rebuilt at its own point between 75% and 100% of this age, so sets filled
    together (after a start) are not all refilled in one burst."""
    hot_fill_timeout_ms: int = 2000
    """statement_timeout of the Postgres query that fills a missed hot set; the fill finishes in
    the background when the request stops waiting, so the next request hits."""
    hot_access_half_life_hours: float = 24.0
    """Half-life of "recently used" when ranking memories into the hot set."""
    redis_retry_s: float = 2.0
    """After a Redis failure the hot branch is skipped (and directives read from Postgres) this long."""
    recency_half_life_hours: float = 14 * 24.0
    """Half-life of the recency score (creation time; a recent access counts at half strength)."""
    default_reserve_tokens: int = 512
    """Tokens kept free for the model's answer when a request does not say."""
    max_messages: int = 200
    """Most recent_messages accepted."""
    max_message_chars: int = 32_000
    """Longest message content accepted."""
    max_context_tokens: int = 1_000_000
    """Largest max_context_tokens / reserve_tokens accepted."""
    inline_cpu_candidates: int = 96
    """Up to this many candidates scoring + packing run on the event loop (a few ms); above, in a
    worker thread so one big request cannot stall every other request's I/O."""
    inline_history_chars: int = 16_000
    """Up to this many characters of ``recent_messages`` are counted on the event loop (a few ms at
    most); a longer history is counted in a worker thread, and only as far back as could fit
    ``max_context_tokens``, so one request with a huge history cannot stall the others."""
    access_flush_s: float = 2.0
    """Access statistics (last_accessed_at, access_count) of packed memories are batched in-process
    and written this often, off the request path."""
    feedback_alpha: float = 0.3
    """Weight of one feedback event in the usefulness moving average (usefulness stays in [-1, 1])."""
    tiktoken_dir: Path | None = None
    """Offline tiktoken BPE cache; None = ``<data_dir>/tiktoken``."""

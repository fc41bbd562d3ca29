"""Typed settings, one group per subsystem, read from ``PGCONTEXT_*`` environment variables.

Settings are read once, by :func:`load_settings`, when the CLI or the app factory starts — never at
import time — so tests and tools can build as many differently-configured apps as they need.

The groups live in modules by subsystem (``storage``, ``retrieval``, ``assembly``; the value
parsers in ``env``); this module assembles them. ``service.cli.config_reference`` reads all of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from service.settings.assembly import AssemblySettings
from service.settings.env import (
    SettingsError,
    env_at_least_one,
    env_bool,
    env_float,
    env_int,
    env_int_in,
    env_list,
    env_number_in,
    env_str,
    usable_cpus,
)
from service.settings.facts import FactSettings
from service.settings.retrieval import (
    RERANK_DEFAULT_API_BASE,
    ConversationSettings,
    DocumentSettings,
    RerankProvider,
    RerankSettings,
    RetrievalSettings,
)
from service.settings.storage import (
    DatabaseSettings,
    EmbeddingSettings,
    LimitSettings,
    RateLimitSettings,
    RedisSettings,
    ServerSettings,
)

__all__ = [
    "AssemblySettings", "ConversationSettings", "DatabaseSettings", "DocumentSettings", "EmbeddingSettings",
    "FactSettings", "LimitSettings", "RateLimitSettings", "RedisSettings", "RerankProvider", "RerankSettings",
    "RetrievalSettings",
    "ServerSettings", "Settings", "SettingsError", "load_settings", "usable_cpus",
]


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
    conversations: ConversationSettings = field(default_factory=ConversationSettings)
    assembly: AssemblySettings = field(default_factory=AssemblySettings)
    facts: FactSettings = field(default_factory=FactSettings)


def _rerank_settings(env: Mapping[str, str]) -> RerankSettings:
    provider = (env_str(env, "PGCONTEXT_RERANK_PROVIDER") or "none").lower()
    if provider not in ("none", "tei", "cohere", "jina"):
        raise SettingsError(f"PGCONTEXT_RERANK_PROVIDER must be none, tei, cohere or jina, got {provider!r}")
    api_base = env_str(env, "PGCONTEXT_RERANK_API_BASE") or RERANK_DEFAULT_API_BASE.get(provider)
    if provider == "tei" and api_base is None:
        raise SettingsError("PGCONTEXT_RERANK_PROVIDER=tei needs PGCONTEXT_RERANK_API_BASE (the TEI server's URL)")
    model = env_str(env, "PGCONTEXT_RERANK_MODEL")
    if provider in ("cohere", "jina") and model is None:
        raise SettingsError(f"PGCONTEXT_RERANK_PROVIDER={provider} needs PGCONTEXT_RERANK_MODEL")
    settings = RerankSettings(
        provider=provider,  # type: ignore[arg-type]
        api_base=api_base,
        api_key=env_str(env, "PGCONTEXT_RERANK_API_KEY"),
        model=model,
        top_n=env_int(env, "PGCONTEXT_RERANK_TOP_N", 20),
        timeout_ms=env_int(env, "PGCONTEXT_RERANK_TIMEOUT_MS", 300),
        max_chars=env_int(env, "PGCONTEXT_RERANK_MAX_CHARS", 2000),
    )
    if settings.top_n < 1 or settings.timeout_ms < 1 or settings.max_chars < 1:
        raise SettingsError("PGCONTEXT_RERANK_TOP_N, _TIMEOUT_MS and _MAX_CHARS must be at least 1")
    return settings


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Read settings from ``env`` (default: ``os.environ``). Call once at start-up."""
    env = os.environ if env is None else env
    provider = env_str(env, "PGCONTEXT_EMBEDDING_PROVIDER") or "local"
    if provider not in ("local", "openai"):
        raise SettingsError(f"PGCONTEXT_EMBEDDING_PROVIDER must be 'local' or 'openai', got {provider!r}")
    data_dir = Path(env_str(env, "PGCONTEXT_DATA_DIR") or ".pgcontext").expanduser().resolve()
    return Settings(
        data_dir=data_dir,
        database=DatabaseSettings(
            url=env_str(env, "PGCONTEXT_DATABASE_URL"),
            app_url=env_str(env, "PGCONTEXT_APP_DATABASE_URL"),
            app_role_password=env_str(env, "PGCONTEXT_APP_ROLE_PASSWORD"),
            pool_min=env_int(env, "PGCONTEXT_DB_POOL_MIN", 4),
            pool_max=env_int(env, "PGCONTEXT_DB_POOL_MAX", 20),
            statement_timeout_ms=env_int(env, "PGCONTEXT_STATEMENT_TIMEOUT_MS", 5000),
            acquire_timeout_ms=max(1, env_int(env, "PGCONTEXT_DB_ACQUIRE_TIMEOUT_MS", 2000)),
            client_grace_ms=max(0, env_int(env, "PGCONTEXT_DB_CLIENT_GRACE_MS", 1000)),
            cleanup_timeout_ms=max(1, env_int(env, "PGCONTEXT_DB_CLEANUP_TIMEOUT_MS", 5000)),
            migrate_on_start=env_bool(env, "PGCONTEXT_MIGRATE_ON_START", True),
            read_urls=env_list(env, "PGCONTEXT_READ_DATABASE_URLS"),
            read_max_lag_ms=env_int(env, "PGCONTEXT_READ_MAX_LAG_MS", 1000),
            read_poll_ms=env_int(env, "PGCONTEXT_READ_POLL_MS", 100),
            read_lsn_ttl_s=env_float(env, "PGCONTEXT_READ_LSN_TTL_S", 60.0),
            embedded_shared_buffers_mb=env_int_in(env, "PGCONTEXT_EMBEDDED_PG_SHARED_BUFFERS_MB", 0, 0, 1024 * 1024),
        ),
        redis=RedisSettings(
            url=env_str(env, "PGCONTEXT_REDIS_URL"),
            socket_timeout_s=env_float(env, "PGCONTEXT_REDIS_TIMEOUT_S", 0.25),
            cluster=env_bool(env, "PGCONTEXT_REDIS_CLUSTER", False),
            org_hot_set_bytes=max(0, env_int(env, "PGCONTEXT_REDIS_ORG_HOT_SET_BYTES", 16 * 1024 * 1024)),
            org_directive_bytes=max(0, env_int(env, "PGCONTEXT_REDIS_ORG_DIRECTIVE_BYTES", 16 * 1024 * 1024)),
            epoch_check_s=max(0.0, env_float(env, "PGCONTEXT_REDIS_EPOCH_CHECK_S", 1.0)),
        ),
        embedding=EmbeddingSettings(
            provider=provider,  # type: ignore[arg-type]
            quantize=env_bool(env, "PGCONTEXT_EMBEDDING_QUANTIZE", True),
            batch_size=env_int(env, "PGCONTEXT_EMBEDDING_BATCH_SIZE", 64),
            threads=env_int(env, "PGCONTEXT_EMBEDDING_THREADS", 0),
            bulk_batch=max(1, env_int(env, "PGCONTEXT_EMBEDDING_BULK_BATCH", 16)),
            bulk_yield_ms=max(0, env_int(env, "PGCONTEXT_EMBEDDING_BULK_YIELD_MS", 200)),
            bulk_nice=min(19, max(0, env_int(env, "PGCONTEXT_EMBEDDING_BULK_NICE", 10))),
            bulk_min_share=min(1.0, max(0.0, env_float(env, "PGCONTEXT_EMBEDDING_BULK_MIN_SHARE", 0.2))),
            bulk_starved_ms=max(1, env_int(env, "PGCONTEXT_EMBEDDING_BULK_STARVED_MS", 1000)),
            bulk_concurrency=max(0, env_int(env, "PGCONTEXT_EMBEDDING_BULK_CONCURRENCY", 0)),
            query_concurrency=max(0, env_int(env, "PGCONTEXT_EMBEDDING_QUERY_CONCURRENCY", 0)),
            api_base=env_str(env, "PGCONTEXT_EMBEDDING_API_BASE"),
            api_key=env_str(env, "PGCONTEXT_EMBEDDING_API_KEY"),
            model=env_str(env, "PGCONTEXT_EMBEDDING_MODEL") or "text-embedding-3-small",
            timeout_s=env_float(env, "PGCONTEXT_EMBEDDING_TIMEOUT_S", 10.0),
        ),
        limits=LimitSettings(
            max_text_chars=env_int(env, "PGCONTEXT_MAX_TEXT_CHARS", 32_000),
            max_batch=env_int(env, "PGCONTEXT_MAX_BATCH", 256),
            max_page_size=env_int(env, "PGCONTEXT_MAX_PAGE_SIZE", 200),
        ),
        server=ServerSettings(
            host=env_str(env, "PGCONTEXT_HOST") or "127.0.0.1",
            port=env_int_in(env, "PGCONTEXT_PORT", 8080, 1, 65535),
            log_level=env_str(env, "PGCONTEXT_LOG_LEVEL") or "info",
            auth_cache_ttl_s=env_float(env, "PGCONTEXT_AUTH_CACHE_TTL_S", 5.0),
            auth_failure_burst=max(0, env_int(env, "PGCONTEXT_AUTH_FAILURE_BURST", 20)),
            auth_failure_rate_per_s=max(0.0, env_float(env, "PGCONTEXT_AUTH_FAILURE_RATE_PER_S", 1.0)),
            workers=env_int(env, "PGCONTEXT_WORKERS", 1),
            metrics_token=env_str(env, "PGCONTEXT_METRICS_TOKEN"),
            warmup_timeout_s=max(0.0, env_float(env, "PGCONTEXT_WARMUP_TIMEOUT_S", 30.0)),
        ),
        rate_limit=RateLimitSettings(
            rps=max(0.0, env_float(env, "PGCONTEXT_RATE_LIMIT_RPS", 150.0)),
            burst=max(1, env_int(env, "PGCONTEXT_RATE_LIMIT_BURST", 300)),
            heavy_cost=max(1, env_int(env, "PGCONTEXT_RATE_LIMIT_HEAVY_COST", 4)),
            embed_chars_per_token=max(0, env_int(env, "PGCONTEXT_RATE_LIMIT_EMBED_CHARS_PER_TOKEN", 40)),
            embed_max_chars=max(0, env_int(env, "PGCONTEXT_RATE_LIMIT_EMBED_MAX_CHARS", 1000)),
            text_chars_per_token=max(0, env_int(env, "PGCONTEXT_RATE_LIMIT_TEXT_CHARS_PER_TOKEN", 400)),
            body_bytes_per_token=max(0, env_int(env, "PGCONTEXT_RATE_LIMIT_BODY_BYTES_PER_TOKEN", 16384)),
            hot_miss_cost=max(0, env_int(env, "PGCONTEXT_RATE_LIMIT_HOT_MISS_COST", 1)),
            timeout_ms=max(1, env_int(env, "PGCONTEXT_RATE_LIMIT_TIMEOUT_MS", 50)),
            retry_s=max(0.0, env_float(env, "PGCONTEXT_RATE_LIMIT_RETRY_S", 2.0)),
            max_in_flight=max(0, env_int(env, "PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT", 4 * usable_cpus())),
        ),
        retrieval=RetrievalSettings(
            lexical_timeout_ms=env_at_least_one(env, "PGCONTEXT_RETRIEVAL_LEXICAL_TIMEOUT_MS", 1000),
            semantic_timeout_ms=env_at_least_one(env, "PGCONTEXT_RETRIEVAL_SEMANTIC_TIMEOUT_MS", 1000),
            embedding_timeout_ms=env_at_least_one(env, "PGCONTEXT_RETRIEVAL_EMBEDDING_TIMEOUT_MS", 2000),
            query_cache_size=env_int(env, "PGCONTEXT_RETRIEVAL_QUERY_CACHE_SIZE", 1024),
            postings_per_term=env_at_least_one(env, "PGCONTEXT_RETRIEVAL_POSTINGS_PER_TERM", 500),
            bm25_k1=env_number_in(env, "PGCONTEXT_RETRIEVAL_BM25_K1", 0.9, 0.0, 100.0),
            bm25_b=env_number_in(env, "PGCONTEXT_RETRIEVAL_BM25_B", 0.4, 0.0, 1.0),
            search_context_weight=max(0.0, env_float(env, "PGCONTEXT_RETRIEVAL_SEARCH_CONTEXT_WEIGHT", 0.25)),
            speaker_key=(env_str(env, "PGCONTEXT_RETRIEVAL_SPEAKER_KEY") or "speaker").strip(),
            speaker_boost=max(0.0, env_float(env, "PGCONTEXT_RETRIEVAL_SPEAKER_BOOST", 1.5)),
            ef_search=env_at_least_one(env, "PGCONTEXT_RETRIEVAL_EF_SEARCH", 100),
            max_query_chars=env_int(env, "PGCONTEXT_RETRIEVAL_MAX_QUERY_CHARS", 4000),
            embedder_cooldown_s=env_float(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_COOLDOWN_S", 5.0),
            embedder_failures_to_open=max(1, env_int(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_FAILURES_TO_OPEN", 3)),
            embedder_stall_ms=max(1, env_int(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_STALL_MS", 1000)),
            embedder_max_in_flight=max(0, env_int(env, "PGCONTEXT_RETRIEVAL_EMBEDDER_MAX_IN_FLIGHT", 2)),
            branch_delay_ms=env_int(env, "PGCONTEXT_RETRIEVAL_BRANCH_DELAY_MS", 0),
            rerank=_rerank_settings(env),
        ),
        documents=DocumentSettings(
            max_files_per_request=env_int(env, "PGCONTEXT_DOCUMENTS_MAX_FILES", 256),
            max_file_bytes=env_int(env, "PGCONTEXT_DOCUMENTS_MAX_FILE_BYTES", 1_000_000),
            max_request_file_bytes=env_int(env, "PGCONTEXT_DOCUMENTS_MAX_REQUEST_BYTES", 6 * 1024 * 1024),
            max_path_chars=env_int(env, "PGCONTEXT_DOCUMENTS_MAX_PATH_CHARS", 1024),
            max_chunk_tokens=env_int(env, "PGCONTEXT_DOCUMENTS_CHUNK_TOKENS", 256),
            max_section_tokens=env_int(env, "PGCONTEXT_DOCUMENTS_SECTION_TOKENS", 1024),
            tokenizer=env_str(env, "PGCONTEXT_DOCUMENTS_TOKENIZER") or "cl100k_base",
            max_list_page=env_int(env, "PGCONTEXT_DOCUMENTS_MAX_LIST_PAGE", 1000),
            write_timeout_ms=env_int(env, "PGCONTEXT_DOCUMENTS_WRITE_TIMEOUT_MS", 60_000),
        ),
        conversations=ConversationSettings(
            context_turns=env_int_in(env, "PGCONTEXT_CONVERSATION_CONTEXT_TURNS", 2, 0, 16),
        ),
        assembly=AssemblySettings(
            deadline_ms=env_int(env, "PGCONTEXT_DEADLINE_MS", 40),
            processing_reserve_ms=env_int(env, "PGCONTEXT_ASSEMBLY_PROCESSING_RESERVE_MS", 6),
            directive_timeout_ms=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_DIRECTIVE_TIMEOUT_MS", 0)),
            directive_fallback_ms=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_DIRECTIVE_FALLBACK_MS", 5)),
            directive_last_known_s=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_DIRECTIVE_LAST_KNOWN_S", 300)),
            max_deadline_ms=max(1, env_int(env, "PGCONTEXT_ASSEMBLY_MAX_DEADLINE_MS", 1000)),
            hot_timeout_ms=env_int(env, "PGCONTEXT_ASSEMBLY_HOT_TIMEOUT_MS", 15),
            cold_timeout_ms=env_int(env, "PGCONTEXT_ASSEMBLY_COLD_TIMEOUT_MS", 0),
            cold_limit=env_int(env, "PGCONTEXT_ASSEMBLY_COLD_LIMIT", 20),
            cold_limit_max=env_int(env, "PGCONTEXT_ASSEMBLY_COLD_LIMIT_MAX", 60),
            cold_candidates_per_slot=env_float(env, "PGCONTEXT_ASSEMBLY_COLD_CANDIDATES_PER_SLOT", 2.0),
            cold_tokens_per_memory=env_int(env, "PGCONTEXT_ASSEMBLY_COLD_TOKENS_PER_MEMORY", 40),
            max_in_flight=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT", 2 * usable_cpus())),
            max_queued=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_MAX_QUEUED", 256)),
            queue_target_ms=max(1, env_int(env, "PGCONTEXT_ASSEMBLY_QUEUE_TARGET_MS", 100)),
            queue_interval_ms=max(1, env_int(env, "PGCONTEXT_ASSEMBLY_QUEUE_INTERVAL_MS", 500)),
            refusal_hold_ms=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_REFUSAL_HOLD_MS", 1000)),
            light_cold_share=max(0.0, env_float(env, "PGCONTEXT_ASSEMBLY_LIGHT_COLD_SHARE", 0.8)),
            light_cold_postings_per_term=max(1, env_int(env, "PGCONTEXT_ASSEMBLY_LIGHT_COLD_POSTINGS_PER_TERM", 200)),
            hot_set_size=env_int(env, "PGCONTEXT_ASSEMBLY_HOT_SET_SIZE", 16),
            hot_ttl_s=env_int(env, "PGCONTEXT_ASSEMBLY_HOT_TTL_S", 300),
            hot_refresh_s=env_int(env, "PGCONTEXT_ASSEMBLY_HOT_REFRESH_S", 60),
            hot_fill_timeout_ms=env_int(env, "PGCONTEXT_ASSEMBLY_HOT_FILL_TIMEOUT_MS", 2000),
            hot_access_half_life_hours=env_float(env, "PGCONTEXT_ASSEMBLY_HOT_ACCESS_HALF_LIFE_HOURS", 24.0),
            redis_retry_s=env_float(env, "PGCONTEXT_ASSEMBLY_REDIS_RETRY_S", 2.0),
            recency_half_life_hours=env_float(env, "PGCONTEXT_ASSEMBLY_RECENCY_HALF_LIFE_HOURS", 14 * 24.0),
            default_reserve_tokens=env_int(env, "PGCONTEXT_ASSEMBLY_DEFAULT_RESERVE_TOKENS", 512),
            max_messages=env_int(env, "PGCONTEXT_ASSEMBLY_MAX_MESSAGES", 200),
            max_message_chars=env_int(env, "PGCONTEXT_ASSEMBLY_MAX_MESSAGE_CHARS", 32_000),
            inline_cpu_candidates=env_int(env, "PGCONTEXT_ASSEMBLY_INLINE_CPU_CANDIDATES", 96),
            inline_history_chars=max(0, env_int(env, "PGCONTEXT_ASSEMBLY_INLINE_HISTORY_CHARS", 16_000)),
            access_flush_s=env_float(env, "PGCONTEXT_ASSEMBLY_ACCESS_FLUSH_S", 2.0),
            feedback_alpha=env_float(env, "PGCONTEXT_ASSEMBLY_FEEDBACK_ALPHA", 0.3),
            tiktoken_dir=Path(raw).expanduser().resolve() if (raw := env_str(env, "PGCONTEXT_TIKTOKEN_DIR")) else None,
        ),
        facts=FactSettings(
            dedup_cosine=env_number_in(env, "PGCONTEXT_FACTS_DEDUP_COSINE", 0.70, 0.0, 1.0),
            dedup_max_synonyms=env_int_in(env, "PGCONTEXT_FACTS_DEDUP_MAX_SYNONYMS", 1, 0, 8),
            dedup_candidates=env_int_in(env, "PGCONTEXT_FACTS_DEDUP_CANDIDATES", 5, 1, 50),
            consolidation_api_base=env_str(env, "PGCONTEXT_CONSOLIDATION_API_BASE"),
            consolidation_api_key=env_str(env, "PGCONTEXT_CONSOLIDATION_API_KEY"),
            consolidation_model=env_str(env, "PGCONTEXT_CONSOLIDATION_MODEL") or "gpt-4o-mini",
            consolidation_band=env_number_in(env, "PGCONTEXT_CONSOLIDATION_BAND", 0.75, 0.0, 1.0),
            consolidation_timeout_s=max(0.1, env_float(env, "PGCONTEXT_CONSOLIDATION_TIMEOUT_S", 20.0)),
            consolidation_poll_s=max(0.05, env_float(env, "PGCONTEXT_CONSOLIDATION_POLL_S", 1.0)),
            consolidation_max_attempts=env_int_in(env, "PGCONTEXT_CONSOLIDATION_MAX_ATTEMPTS", 5, 1, 100),
            consolidation_retry_s=max(0.0, env_float(env, "PGCONTEXT_CONSOLIDATION_RETRY_S", 2.0)),
            consolidation_worker=env_bool(env, "PGCONTEXT_CONSOLIDATION_WORKER", True),
            consolidation_lease_s=max(0.1, env_float(env, "PGCONTEXT_CONSOLIDATION_LEASE_S", 60.0)),
        ),
    )

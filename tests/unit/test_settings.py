"""Settings: parsed from an environment mapping, typed, and bad values rejected with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.embedded.postgres import default_shared_buffers_mb
from service.settings import Settings, SettingsError, load_settings, usable_cpus


def test_defaults_from_an_empty_environment() -> None:
    s = load_settings({})
    assert isinstance(s, Settings)
    assert s.database.url is None and s.redis.url is None  # embedded servers
    assert s.data_dir == Path(".pgcontext").resolve()
    assert s.embedding.provider == "local" and s.embedding.quantize is True and s.embedding.dim == 384
    assert s.limits.max_batch == 256 and s.limits.max_text_chars == 32_000
    assert s.server.host == "127.0.0.1" and s.server.port == 8080


def test_values_are_parsed_to_their_types(tmp_path: Path) -> None:
    s = load_settings({
        "PGCONTEXT_DATABASE_URL": "postgresql://u@db/x",
        "PGCONTEXT_APP_DATABASE_URL": "postgresql://app@db/x",
        "PGCONTEXT_REDIS_URL": "redis://cache:6379/0",
        "PGCONTEXT_DATA_DIR": str(tmp_path / "d"),
        "PGCONTEXT_DB_POOL_MIN": "1",
        "PGCONTEXT_DB_POOL_MAX": "7",
        "PGCONTEXT_STATEMENT_TIMEOUT_MS": "250",
        "PGCONTEXT_REDIS_TIMEOUT_S": "0.5",
        "PGCONTEXT_EMBEDDING_PROVIDER": "openai",
        "PGCONTEXT_EMBEDDING_QUANTIZE": "off",
        "PGCONTEXT_EMBEDDING_BATCH_SIZE": "32",
        "PGCONTEXT_EMBEDDING_API_BASE": "http://127.0.0.1:9/v1",
        "PGCONTEXT_MAX_TEXT_CHARS": "100",
        "PGCONTEXT_MAX_BATCH": "10",
        "PGCONTEXT_MAX_PAGE_SIZE": "20",
        "PGCONTEXT_PORT": "9999",
        "PGCONTEXT_AUTH_CACHE_TTL_S": "0",
    })
    assert s.database.url == "postgresql://u@db/x" and s.database.app_url == "postgresql://app@db/x"
    assert s.redis.url == "redis://cache:6379/0" and s.redis.socket_timeout_s == 0.5
    assert s.data_dir == (tmp_path / "d").resolve()
    assert (s.database.pool_min, s.database.pool_max, s.database.statement_timeout_ms) == (1, 7, 250)
    assert s.embedding.provider == "openai" and s.embedding.quantize is False and s.embedding.batch_size == 32
    assert s.embedding.api_base == "http://127.0.0.1:9/v1"
    assert (s.limits.max_text_chars, s.limits.max_batch, s.limits.max_page_size) == (100, 10, 20)
    assert s.server.port == 9999 and s.server.auth_cache_ttl_s == 0.0


def test_assembly_admission_defaults_to_two_per_usable_cpu_and_can_be_set() -> None:
    assert load_settings({}).assembly.max_in_flight == 2 * usable_cpus()
    assert load_settings({}).assembly.max_queued == 256
    s = load_settings({"PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT": "0", "PGCONTEXT_ASSEMBLY_MAX_QUEUED": "3"}).assembly
    assert (s.max_in_flight, s.max_queued) == (0, 3)  # 0: no limit
    assert load_settings({"PGCONTEXT_ASSEMBLY_MAX_IN_FLIGHT": "-2"}).assembly.max_in_flight == 0


def test_empty_values_mean_unset() -> None:
    s = load_settings({"PGCONTEXT_DATABASE_URL": "", "PGCONTEXT_PORT": "", "PGCONTEXT_EMBEDDING_QUANTIZE": ""})
    assert s.database.url is None and s.server.port == 8080 and s.embedding.quantize is True


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_true_booleans(value: str) -> None:
    assert load_settings({"PGCONTEXT_EMBEDDING_QUANTIZE": value}).embedding.quantize is True


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF"])
def test_false_booleans(value: str) -> None:
    assert load_settings({"PGCONTEXT_EMBEDDING_QUANTIZE": value}).embedding.quantize is False


@pytest.mark.parametrize(("name", "value"), [
    ("PGCONTEXT_PORT", "eighty"),
    ("PGCONTEXT_PORT", "80.5"),
    ("PGCONTEXT_DB_POOL_MAX", "many"),
    ("PGCONTEXT_MAX_BATCH", "1e3"),
    ("PGCONTEXT_REDIS_TIMEOUT_S", "fast"),
    ("PGCONTEXT_AUTH_CACHE_TTL_S", "5s"),
    ("PGCONTEXT_EMBEDDING_QUANTIZE", "maybe"),
    ("PGCONTEXT_EMBEDDING_PROVIDER", "torch"),
    ("PGCONTEXT_RETRIEVAL_BM25_K1", "-1"),  # Postgres would divide by zero in every lexical search
    ("PGCONTEXT_RETRIEVAL_BM25_K1", "nan"),
    ("PGCONTEXT_RETRIEVAL_BM25_B", "1.5"),
    ("PGCONTEXT_RETRIEVAL_POSTINGS_PER_TERM", "0"),
    ("PGCONTEXT_RETRIEVAL_EF_SEARCH", "-5"),
    ("PGCONTEXT_RETRIEVAL_LEXICAL_TIMEOUT_MS", "0"),  # statement_timeout 0 would mean none at all
])
def test_bad_values_raise_settings_error(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})


def test_reranker_is_off_by_default_and_configurable() -> None:
    assert load_settings({}).retrieval.rerank.provider == "none"
    tei = load_settings({"PGCONTEXT_RERANK_PROVIDER": "tei", "PGCONTEXT_RERANK_API_BASE": "http://127.0.0.1:8081",
                         "PGCONTEXT_RERANK_TOP_N": "30", "PGCONTEXT_RERANK_TIMEOUT_MS": "25"}).retrieval.rerank
    assert (tei.provider, tei.api_base, tei.top_n, tei.timeout_ms, tei.model) == (
        "tei", "http://127.0.0.1:8081", 30, 25, None)
    cohere = load_settings({"PGCONTEXT_RERANK_PROVIDER": "cohere", "PGCONTEXT_RERANK_MODEL": "rerank-v3.5",
                            "PGCONTEXT_RERANK_API_KEY": "k"}).retrieval.rerank
    assert cohere.api_base == "https://api.cohere.com/v2" and cohere.api_key == "k"
    jina = load_settings({"PGCONTEXT_RERANK_PROVIDER": "jina", "PGCONTEXT_RERANK_MODEL": "m"}).retrieval.rerank
    assert jina.api_base == "https://api.jina.ai/v1"


@pytest.mark.parametrize(("env", "match"), [
    ({"PGCONTEXT_RERANK_PROVIDER": "bge"}, "PGCONTEXT_RERANK_PROVIDER"),
    ({"PGCONTEXT_RERANK_PROVIDER": "tei"}, "PGCONTEXT_RERANK_API_BASE"),
    ({"PGCONTEXT_RERANK_PROVIDER": "cohere"}, "PGCONTEXT_RERANK_MODEL"),
    ({"PGCONTEXT_RERANK_PROVIDER": "tei", "PGCONTEXT_RERANK_API_BASE": "http://x", "PGCONTEXT_RERANK_TOP_N": "0"},
     "PGCONTEXT_RERANK_TOP_N"),
    ({"PGCONTEXT_RERANK_TIMEOUT_MS": "soon"}, "PGCONTEXT_RERANK_TIMEOUT_MS"),
])
def test_bad_reranker_settings(env: dict[str, str], match: str) -> None:
    with pytest.raises(SettingsError, match=match):
        load_settings(env)


def test_settings_error_is_a_value_error() -> None:
    assert issubclass(SettingsError, ValueError)


def test_reading_is_explicit_not_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCONTEXT_PORT", "8123")
    assert load_settings().server.port == 8123
    monkeypatch.setenv("PGCONTEXT_PORT", "8124")
    assert load_settings().server.port == 8124


@pytest.mark.parametrize(("raw", "expected"), [(None, 0), ("0", 0), ("7", 7), ("4096", 4096)])
def test_embedded_shared_buffers(raw: str | None, expected: int) -> None:
    env = {} if raw is None else {"PGCONTEXT_EMBEDDED_PG_SHARED_BUFFERS_MB": raw}
    assert load_settings(env).database.embedded_shared_buffers_mb == expected


@pytest.mark.parametrize("raw", ["-1", "2000000", "1GB"])
def test_bad_embedded_shared_buffers(raw: str) -> None:
    with pytest.raises(SettingsError, match="PGCONTEXT_EMBEDDED_PG_SHARED_BUFFERS_MB"):
        load_settings({"PGCONTEXT_EMBEDDED_PG_SHARED_BUFFERS_MB": raw})


@pytest.mark.parametrize(("memory_gib", "expected_mb"), [(0, 128), (0.5, 128), (2, 256), (4, 512), (8, 1024),
                                                         (24, 1024), (512, 1024)])
def test_default_embedded_shared_buffers_is_an_eighth_of_memory_within_bounds(memory_gib: float,
                                                                              expected_mb: int) -> None:
    assert default_shared_buffers_mb(int(memory_gib * 2**30)) == expected_mb

"""Offline tiktoken: seeding the cache, model mapping, counting and chat accounting."""

from __future__ import annotations

import hashlib
import math
import os
import threading
from pathlib import Path
from uuid import uuid4

import pytest
import tiktoken

from service.tenancy.orgscope import org_scope
from service.text.model_families import resolve_model
from service.text.tokens import (
    ENCODINGS,
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    TokenCounter,
    Tokenizers,
    UnknownModelError,
    encoding_for_model,
    load_encoding,
    seed_bpe_file,
)

CL100K_FILE = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
O200K_FILE = "fb374d419588a4632f3f557e76b4b70aebbca790"


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> Tokenizers:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken"))


@pytest.fixture(scope="module")
def cl100k(tokenizers: Tokenizers) -> TokenCounter:
    return tokenizers.get("cl100k_base")


@pytest.fixture(scope="module")
def o200k(tokenizers: Tokenizers) -> TokenCounter:
    return tokenizers.get("o200k_base")


def test_hello_world_has_the_reference_ids(cl100k: TokenCounter, o200k: TokenCounter) -> None:
    assert cl100k.encode("hello world") == [15339, 1917]
    assert o200k.encode("hello world") == [24912, 2375]
    assert cl100k.count("hello world") == 2


def test_cache_holds_the_files_tiktoken_looks_for(tokenizers: Tokenizers) -> None:
    tokenizers.preload()
    names = {p.name for p in tokenizers.cache_dir.iterdir()}
    assert {CL100K_FILE, O200K_FILE} <= names
    # The names are the sha1 of tiktoken's download URLs, so tiktoken finds them offline.
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    assert hashlib.sha1(url.encode()).hexdigest() == CL100K_FILE


def test_loading_does_not_leak_the_cache_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/somewhere/else")
    Tokenizers(tmp_path).get("cl100k_base")
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    Tokenizers(tmp_path).get("o200k_base")
    assert "TIKTOKEN_CACHE_DIR" not in os.environ


def test_a_corrupted_cache_file_is_replaced(tmp_path: Path) -> None:
    target = tmp_path / CL100K_FILE
    target.write_bytes(b"garbage")
    seed_bpe_file(tmp_path, "cl100k_base")
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    assert digest == "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
    assert not list(tmp_path.glob("*.tmp"))


def test_encode_decode_round_trip(o200k: TokenCounter) -> None:
    text = "Row-level security: FORCE it. 日本語も大丈夫 🚀\n\tend"
    assert o200k.decode(o200k.encode(text)) == text


def test_special_token_text_is_counted_as_plain_text(cl100k: TokenCounter) -> None:
    # The model API treats these as ordinary text too; tiktoken's encode() would raise.
    assert cl100k.count("<|endoftext|>") > 1
    assert 100257 not in cl100k.encode("<|endoftext|>")


def test_count_messages_uses_the_chat_format_overheads(cl100k: TokenCounter) -> None:
    messages = [("system", "Be brief."), ("user", "hello world")]
    expected = sum(MESSAGE_OVERHEAD + cl100k.count(r) + cl100k.count(c) for r, c in messages) + REPLY_PRIMING
    assert cl100k.count_messages(messages) == expected
    assert cl100k.count_messages([("user", "hello world")]) == 3 + 1 + 2 + 3
    assert cl100k.count_messages([]) == REPLY_PRIMING
    assert cl100k.count_messages(messages, prime_reply=False) == expected - REPLY_PRIMING


def test_counts_are_cached_but_identical(cl100k: TokenCounter) -> None:
    text = "the same memory text, counted on every request " * 3
    assert cl100k.count(text) == cl100k.count(text) == len(cl100k.encode(text))
    long_text = "x " * 5000  # past the cache's size limit: still exact
    assert cl100k.count(long_text) == len(cl100k.encode(long_text))
    assert cl100k.count_many(["a", "hello world"]) == [1, 2]


class CountingEncoding:
    """A tiktoken encoding that counts how often text is really encoded (cache misses)."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding
        self.name = encoding.name
        self.encoded: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.encoded.append(text)
        return self.encoding.encode_ordinary(text)


def test_cached_counts_are_kept_per_org(tokenizers: Tokenizers) -> None:
    encoding = CountingEncoding(load_encoding("cl100k_base", tokenizers.cache_dir))
    counter = TokenCounter(encoding)  # type: ignore[arg-type]
    org_a, org_b = uuid4(), uuid4()
    text = "a memory line both orgs happen to hold"
    expected = len(encoding.encoding.encode_ordinary(text))
    with org_scope(org_a):
        assert counter.count(text) == counter.count(text) == expected  # the second is org A's hit
    assert encoding.encoded == [text]
    # Another org's count is never a hit on org A's entry (nor is unscoped work), so how long it
    # takes says nothing about what org A counted.
    with org_scope(org_b):
        assert counter.count(text) == expected
    assert counter.count(text) == expected
    assert encoding.encoded == [text, text, text]
    assert counter.cache_info().currsize == 3  # one cache, one bound, for all orgs


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("GPT-4o-2024-08-06", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-5-mini", "o200k_base"),
        ("openai/gpt-4o", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("text-embedding-3-small", "cl100k_base"),
        ("ft:gpt-3.5-turbo:acme::abc123", "cl100k_base"),
        ("cl100k_base", "cl100k_base"),
        ("o200k_base", "o200k_base"),
    ],
)
def test_encoding_for_model(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


@pytest.mark.parametrize("model", ["o10", "gpt-2", "", "p50k_base", "claudette", "llamas", "geminis", "phi-3",
                                   "deepseek-v3", "command-r"])
def test_unknown_models_are_refused_with_the_accepted_list(model: str) -> None:
    with pytest.raises(UnknownModelError) as info:
        encoding_for_model(model)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert all(choice in message for choice in ("gpt-4o*", "claude*", "gemini*", "llama*", "mistral*", "qwen*",
                                                "cl100k_base", "o200k_base")), message


@pytest.mark.parametrize(
    ("model", "family", "factor"),
    [
        ("claude-3-5-sonnet", "claude", 0.75),
        ("claude-sonnet-4-5-20250929", "claude", 0.75),
        ("anthropic/claude-3-opus", "claude", 0.75),
        ("anthropic.claude-3-5-sonnet-20240620-v1:0", "claude", 0.75),
        ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", "claude", 0.75),
        ("gemini-1.5-pro", "gemini", 0.85),
        ("gemini-2.5-flash", "gemini", 0.85),
        ("publishers/google/models/gemini-2.0-flash", "gemini", 0.85),
        ("gemma-2-9b-it", "gemini", 0.85),
        ("llama-3.1-70b-instruct", "llama", 0.8),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama", 0.8),
        ("llama3", "llama", 0.8),
        ("meta.llama3-70b-instruct-v1:0", "llama", 0.8),
        ("codellama-34b", "llama", 0.8),
        ("mistral-large-latest", "mistral", 0.75),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistral", 0.75),
        ("open-mistral-nemo", "mistral", 0.75),
        ("codestral-2501", "mistral", 0.75),
        ("qwen2.5-72b-instruct", "qwen", 0.9),
        ("Qwen/Qwen3-32B", "qwen", 0.9),
        ("qwq-32b", "qwen", 0.9),
        ("gpt-4o", "openai", 1.0),
        ("gpt-4", "openai", 1.0),
    ],
)
def test_model_families_count_with_a_margin(model: str, family: str, factor: float) -> None:
    tokens = resolve_model(model)
    assert (tokens.family, tokens.safety_factor) == (family, factor)
    assert tokens.encoding == ("o200k_base" if model == "gpt-4o" else "cl100k_base")
    # The window is multiplied down (what surely fits), the reserve kept free up.
    assert tokens.scale(1000) == int(1000 * factor) and tokens.scale(999, round_up=True) == math.ceil(999 * factor)
    assert (tokens.reason() is None) == (factor == 1.0)


def test_an_explicit_encoding_wins_and_is_exact() -> None:
    tokens = resolve_model("my-house-model", "o200k_base")
    assert (tokens.encoding, tokens.family, tokens.safety_factor) == ("o200k_base", "o200k_base", 1.0)
    assert resolve_model("claude-3-opus", "cl100k_base").safety_factor == 1.0
    with pytest.raises(UnknownModelError, match="cl100k_base, o200k_base"):
        resolve_model("gpt-4o", "p50k_base")


def test_tokenizers_share_one_counter_per_encoding(tokenizers: Tokenizers) -> None:
    assert tokenizers.for_model("gpt-4o") is tokenizers.for_model("gpt-4.1")
    assert tokenizers.for_model("gpt-4o") is tokenizers.get("o200k_base")
    assert tokenizers.for_model("gpt-4").encoding_name == "cl100k_base"
    with pytest.raises(UnknownModelError):
        tokenizers.get("r50k_base")
    assert set(ENCODINGS) == {"cl100k_base", "o200k_base"}


def test_concurrent_first_use_loads_once(tmp_path: Path) -> None:
    shared = Tokenizers(tmp_path)
    seen: list[TokenCounter] = []
    lock = threading.Lock()

    def use() -> None:
        counter = shared.for_model("gpt-4o-mini")
        assert counter.count("hello world") == 2
        with lock:
            seen.append(counter)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and all(c is seen[0] for c in seen)
    assert [p.name for p in tmp_path.iterdir()] == [O200K_FILE]

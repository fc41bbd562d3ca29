"""Which tiktoken encoding counts a model's tokens, and how much of its window to trust that count with.

OpenAI models are counted exactly: tiktoken *is* their tokenizer. Other families use tokenizers that
are not available offline (Anthropic's is not published at all), so their text is counted with
``cl100k_base`` and the window is multiplied down by the family's ``safety_factor``: a request for
``max_context_tokens: 100000`` on a Claude model packs at most 75,000 cl100k tokens. The count errs
on the safe side as long as the model's tokenizer needs at most ``1 / safety_factor`` times as many
tokens as cl100k for the same text.

Why ``cl100k_base`` and these factors (from the published vocabularies; only Mistral's tokenizers
are available here to measure):

* ``cl100k_base`` (100K tokens) splits text into more tokens than ``o200k_base``, so it is the
  cautious choice of the two for any family.
* Claude (``0.75``): Anthropic's tokenizer is unpublished; Anthropic documents that its newer
  tokenizers use up to ~35% more tokens for the same text than its earlier ones.
* Gemini and Gemma (``0.85``): a 256K SentencePiece vocabulary, usually fewer tokens than cl100k on
  English, more on some code and symbols.
* Llama (``0.8``): Llama 3+ use a 128K tiktoken vocabulary built on cl100k's (counts at or under
  cl100k); Llama 2 and Code Llama use a 32K SentencePiece vocabulary, noticeably more tokens.
* Mistral family (``0.75``): the older 32K SentencePiece vocabularies (Mistral 7B, Mixtral) split
  text finest of all these; Tekken (Nemo and later, 131K) is close to cl100k. Measured with the
  tokenizers ``mistral-common`` 1.13.1 publishes (``benchmarks/token_margins.py``, 2026-11-30), as
  tokens per cl100k token: SentencePiece v1/v3 1.194 on 1,000 SciFact abstracts, 1.071 on 3,000
  LoCoMo turns, 1.276 on this repository's Python (single texts up to 1.40); Tekken 0.968, 1.017,
  1.066. 0.75 covers up to 1.33.
* Qwen (``0.9``): a 151K byte-level BPE vocabulary extending cl100k's, at or under its counts.

A caller that knows better names the ``encoding`` itself (then the count is trusted as exact).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

ENCODINGS: Final[tuple[str, ...]] = ("cl100k_base", "o200k_base")
"""Encodings available offline (see :mod:`service.text.tokens`)."""


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    prefixes: tuple[str, ...]
    encoding: str
    safety_factor: float
    """The share of the caller's window (and reserve) that is budgeted in ``encoding`` tokens."""


@dataclass(frozen=True, slots=True)
class ModelTokens:
    """How one request's tokens are counted."""

    encoding: str
    family: str
    """A family name below, or ``encoding`` when the caller named the encoding."""
    safety_factor: float

    def scale(self, tokens: int, *, round_up: bool = False) -> int:
        """``tokens`` of the model in ``encoding`` tokens: a window rounds down (what surely fits it),
        a reserve kept free rounds up."""
        if self.safety_factor == 1.0:
            return tokens
        scaled = tokens * self.safety_factor
        return math.ceil(scaled) if round_up else math.floor(scaled)

    def reason(self) -> str | None:
        """One line for the budget's reasons when the count is an estimate."""
        if self.safety_factor == 1.0:
            return None
        return (f"{self.family} model: counted with {self.encoding}, window and reserve multiplied by "
                f"{self.safety_factor} as a safety margin (its own tokenizer is not available)")


# Checked in order, so "gpt-4o"/"gpt-4.1" come before "gpt-4".
FAMILIES: Final[tuple[Family, ...]] = (
    Family("openai", ("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4"), "o200k_base", 1.0),
    Family("openai", ("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-3", "text-embedding-ada-002"),
           "cl100k_base", 1.0),
    Family("claude", ("claude",), "cl100k_base", 0.75),
    Family("gemini", ("gemini", "gemma"), "cl100k_base", 0.85),
    Family("llama", ("llama", "meta-llama", "codellama"), "cl100k_base", 0.8),
    Family("mistral", ("mistral", "mixtral", "codestral", "ministral", "magistral", "devstral", "pixtral",
                       "open-mistral", "open-mixtral"), "cl100k_base", 0.75),
    Family("qwen", ("qwen", "qwq"), "cl100k_base", 0.9),
)

# Bedrock ids put the vendor before a dot ("anthropic.claude-3-5-sonnet-20240620-v1:0"), cross-region
# profiles a region before that ("us.anthropic...."); gateways put it before a slash ("openai/gpt-4o").
VENDORS: Final[tuple[tuple[str, ...], tuple[str, ...]]] = (
    ("us", "eu", "apac", "global"), ("anthropic", "meta", "mistral", "google", "qwen"))
"""(cross-region prefixes, vendors) of Bedrock ids (also in the OpenAPI schema's model pattern)."""
_VENDOR_DOT: Final = re.compile(rf"^(?:(?:{'|'.join(VENDORS[0])})\.)?(?:{'|'.join(VENDORS[1])})\.")


class UnknownModelError(ValueError):
    """A model name that maps to no known encoding."""


def accepted_choices() -> str:
    """What an unknown model's error lists: every prefix and the encodings."""
    prefixes = ", ".join(f"{p}*" for f in FAMILIES for p in f.prefixes)
    return f"{prefixes}, or an encoding name ({', '.join(ENCODINGS)}) in model or encoding"


def resolve_model(model: str, encoding: str | None = None) -> ModelTokens:
    """How to count ``model``'s tokens; an explicit ``encoding`` wins and is trusted as exact.

    Raises :class:`UnknownModelError` naming the accepted choices.
    """
    if encoding is not None:
        chosen = encoding.strip().lower()
        if chosen not in ENCODINGS:
            raise UnknownModelError(f"unknown encoding {encoding!r}: expected one of {', '.join(ENCODINGS)}")
        return ModelTokens(chosen, chosen, 1.0)
    name = model.strip().lower()
    if name in ENCODINGS:
        return ModelTokens(name, name, 1.0)
    # Fine-tunes are "ft:<base>:<org>:...".
    name = _VENDOR_DOT.sub("", name.rsplit("/", 1)[-1].removeprefix("ft:"))
    for family in FAMILIES:
        for prefix in family.prefixes:
            # A separator (or a digit, as in "qwen2.5" and "llama3") after the prefix keeps "o1"
            # from claiming names that merely start with it.
            rest = name[len(prefix):]
            if name.startswith(prefix) and (not rest or rest[0] in "-.:_" or
                                            (rest[0] in "0123456789" and family.name != "openai")):
                return ModelTokens(family.encoding, family.name, family.safety_factor)
    raise UnknownModelError(f"unknown model {model!r}: expected one of {accepted_choices()}")

"""The prompt-ready context block, and the one definition of how a memory is written into it.

Layout (sections with nothing in them are left out)::

    <directive>
    You are the billing agent. Answer in English.
    </directive>
    <memories>
    [1a2b3c4d] Invoices are issued on the 1st of each month.
    [9f8e7d6c] The EU region keeps backups for 35 days;
      continuation lines of a memory are indented by two spaces.
    </memories>
    <history>
    user: When is the next invoice?
    assistant: On the 1st.
    </history>

A memory's tag is a short prefix of its id (8 characters, longer only where two ids share one), so
the model can cite a memory and a caller can map the citation back through the structured JSON.

Why the token arithmetic is exact: tiktoken splits text into pre-tokens with a regular expression
before applying BPE, and BPE never merges across pre-tokens. In both cl100k_base and o200k_base a
pre-token that contains a newline can only continue with more whitespace (or, in o200k, a ``/``
after punctuation), so a line break followed by ``[``, ``<`` or a letter always ends a pre-token.
Every section and every memory line here ends with ``\\n`` and the next one starts with ``<``,
``[`` or a role name, hence ``count(a + b) == count(a) + count(b)`` at each of those joins: the
memories section costs exactly the open/close tags plus the sum of its items as the packer
counted them, and the whole block costs exactly the sum of its sections. Texts are cleaned
(line endings normalised, lone surrogates replaced, ends stripped) so what is counted is what is
written.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

from service.tokens import TokenCounter

DIRECTIVE_OPEN: Final = "<directive>\n"
DIRECTIVE_CLOSE: Final = "</directive>\n"
MEMORIES_OPEN: Final = "<memories>\n"
MEMORIES_CLOSE: Final = "</memories>\n"
HISTORY_OPEN: Final = "<history>\n"
HISTORY_CLOSE: Final = "</history>\n"
CONTINUATION_INDENT: Final = "  "
TAG_MIN_LENGTH: Final = 8

_UNSAFE_TAG_CHARS = re.compile(r"[^0-9A-Za-z_-]")
_UNSAFE_ROLE_CHARS = re.compile(r"[^\w-]+")


class FormattedMemory(Protocol):
    """Anything carrying a memory already written by :func:`format_memory` (e.g. a packed item)."""

    @property
    def formatted(self) -> str: ...


def clean_text(text: str) -> str:
    """Normalise line endings, replace lone surrogates with U+FFFD and strip the ends."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Same repair tiktoken applies internally; doing it here keeps written == counted.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def _indent_continuations(text: str) -> str:
    # Indentation keeps a memory's later lines from looking like the start of another memory.
    return text.replace("\n", "\n" + CONTINUATION_INDENT)


def _common_prefix(a: str, b: str, at_least: int) -> int:
    """Length of the common prefix, or something below ``at_least`` when it is that short."""
    if a[:at_least] != b[:at_least]:
        return 0  # the usual case for random ids: no need to find the exact length
    k = at_least
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def memory_tags(ids: Iterable[str], min_length: int = TAG_MIN_LENGTH) -> dict[str, str]:
    """Short, unique, format-safe tags for memory ids: the shortest prefix of at least
    ``min_length`` characters that no other id shares (ids are sanitised to ``[0-9A-Za-z_-]``)."""
    bases = {mid: _UNSAFE_TAG_CHARS.sub("", mid) or "m" for mid in ids}
    ordered = sorted(set(bases.values()))
    length_for: dict[str, int] = {}
    for i, base in enumerate(ordered):
        shared = 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(ordered):
                shared = max(shared, _common_prefix(base, ordered[j], min_length))
        length_for[base] = min(len(base), max(min_length, shared + 1))
    tags: dict[str, str] = {}
    used: set[str] = set()
    for mid, base in bases.items():
        tag = base[: length_for[base]]
        # Distinct ids can sanitise to the same base; a numeric suffix keeps their tags apart.
        candidate, n = tag, 1
        while candidate in used:
            n += 1
            candidate = f"{tag}_{n}"
        used.add(candidate)
        tags[mid] = candidate
    return tags


def format_memory(tag: str, text: str) -> str:
    """One memory as written in the memories section, trailing newline included.

    The packer counts exactly this string, so this is the single definition of a memory line.
    """
    body = clean_text(text)
    if not body:
        return f"[{tag}]\n"
    return f"[{tag}] {_indent_continuations(body)}\n"


def format_directive(directive: str | None) -> str:
    """The directive section, or ``""`` when there is no directive."""
    body = clean_text(directive or "")
    if not body:
        return ""
    return f"{DIRECTIVE_OPEN}{body}\n{DIRECTIVE_CLOSE}"


def clean_role(role: str) -> str:
    """A role as one word (``user``, ``assistant``, ...); anything else is replaced by ``_``."""
    return _UNSAFE_ROLE_CHARS.sub("_", role.strip()).strip("_") or "unknown"


def format_history(history: Sequence[tuple[str, str]]) -> str:
    """The history section, one ``role: content`` line (plus indented continuations) per message."""
    if not history:
        return ""
    lines = [f"{clean_role(role)}: {_indent_continuations(clean_text(content))}\n" for role, content in history]
    return HISTORY_OPEN + "".join(lines) + HISTORY_CLOSE


def format_memories(memories: Sequence[FormattedMemory]) -> str:
    """The memories section from already formatted memories, or ``""`` when there are none."""
    if not memories:
        return ""
    return MEMORIES_OPEN + "".join(m.formatted for m in memories) + MEMORIES_CLOSE


def memories_section_overhead(counter: TokenCounter) -> int:
    """Tokens of the memories section's open and close tags, paid once if any memory is packed."""
    return counter.count(MEMORIES_OPEN) + counter.count(MEMORIES_CLOSE)


def format_context(
    directive: str | None,
    memories: Sequence[FormattedMemory],
    history: Sequence[tuple[str, str]],
) -> str:
    """The whole prompt-ready block: directive, memories, history, in that order."""
    return format_directive(directive) + format_memories(memories) + format_history(history)

"""The prompt-ready context block, and the one definition of how a memory is written into it.

Layout (sections with nothing in them are left out)::

    <directive>
    You are the billing agent. Answer in English.
    </directive>
    <memories>
    1 Invoices are issued on the 1st of each month.
    2 (8 May 2023) The EU region keeps backups for 35 days;
      continuation lines of a memory are indented by two spaces.
    </memories>
    <history>
    user: When is the next invoice?
    assistant: On the 1st.
    </history>

A memory's tag is its number in the section, 1, 2, ... in packing order, opening its line: one
token for the first 999 in cl100k_base and o200k_base, whatever the ids look like. Measured on
conversation turns (~33 tokens a line): an id prefix such as ``[01a22d20-f31c-75]`` took 12 tokens,
a third of the context; ``[n]`` would take 3 (9%), ``n.`` 2 (6%), the bare number 1 (3%). The
model cites memory n; the response's ``refs`` maps each tag back to its memory id. An event date,
where shown, follows the tag in brackets: ``(8 May 2023)``, seven tokens of content.

Why the token arithmetic is exact: tiktoken splits text into pre-tokens with a regular expression
before applying BPE, and BPE never merges across pre-tokens. In both cl100k_base and o200k_base a
pre-token that contains a newline can only continue with more whitespace (or, in o200k, a ``/``
after punctuation), so a line break followed by ``[``, ``<`` or a letter always ends a pre-token.
Every section and every memory line here ends with ``\\n`` and the next one starts with ``<``,
``[`` or a role name, hence ``count(a + b) == count(a) + count(b)`` at each of those joins: the
memories section costs exactly the open/close tags plus the sum of its items as the packer
counted them, and the whole block costs exactly the sum of its sections. Within a memory line the
tag's digits are followed by a space, which no digit pre-token takes in (digits go in runs of at
most three, alone), so ``count(tag + body) == count(tag) + count(body)``: the packer counts each
memory's body once and adds its tag's cost when it knows the position. Texts are cleaned
(line endings normalised, lone surrogates replaced, ends stripped; in memories and messages a
section tag is written ``&lt;/memories&gt;``, so stored text cannot close its section) so what is
counted is what is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from typing import Final, Protocol

from service.text.tokens import TokenCounter

DIRECTIVE_OPEN: Final = "<directive>\n"
DIRECTIVE_CLOSE: Final = "</directive>\n"
MEMORIES_OPEN: Final = "<memories>\n"
MEMORIES_CLOSE: Final = "</memories>\n"
HISTORY_OPEN: Final = "<history>\n"
HISTORY_CLOSE: Final = "</history>\n"
CONTINUATION_INDENT: Final = "  "
_UNSAFE_ROLE_CHARS = re.compile(r"[^\w-]+")


class FormattedMemory(Protocol):
    """Anything carrying a memory already written by :func:`format_memory` (e.g. a packed item)."""

    @property
    def formatted(self) -> str: ...


_LINE_BREAK: Final = re.compile(r"\r\n|[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
"""Every line boundary of ``str.splitlines`` but ``\\n`` itself (U+2028, U+2029, NEL, ...): a reader,
or a model, breaks the line there, so they become ``\\n`` and start an indented continuation line."""


def clean_text(text: str) -> str:
    """Normalise line endings (every line boundary to ``\\n``), replace lone surrogates with U+FFFD and
    strip the ends."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # Same repair tiktoken applies internally; doing it here keeps written == counted.
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return _LINE_BREAK.sub("\n", text).strip()


_SECTION_TAG: Final = re.compile(r"<(\s*/?\s*)(directive|memories|history)(\s*)>", re.IGNORECASE)


def _escape_sections(text: str) -> str:
    """A section tag inside a memory or a message (``</memories>``, ``<directive>``, ...) written as
    ``&lt;/memories&gt;``: stored text cannot close its section or open another, whatever a model
    makes of line starts. Nothing else is changed."""
    return _SECTION_TAG.sub(r"&lt;\1\2\3&gt;", text)


def _indent_continuations(text: str) -> str:
    # Indentation keeps a memory's later lines from looking like the start of another memory.
    return text.replace("\n", "\n" + CONTINUATION_INDENT)


_MONTHS: Final = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def short_date(moment: date) -> str:
    """``8 May 2023``: unambiguous in every locale, and five tokens (ISO ``2023-05-08`` takes six)."""
    return f"{moment.day} {_MONTHS[moment.month - 1]} {moment.year}"


def memory_tag(position: int) -> str:
    """The tag of the memory at ``position`` (1-based) in the memories section, without brackets."""
    if position < 1:
        raise ValueError("memory positions start at 1")
    return str(position)


def format_body(text: str, when: str | None = None) -> str:
    """A memory line after its tag: `` (when) text`` with continuation lines indented, then ``\\n``.

    ``when`` is a short event date (:func:`short_date`); it is content, written before the text.
    """
    body = _escape_sections(clean_text(text))
    if when:
        body = f"({when}) {body}" if body else f"({when})"
    if not body:
        return "\n"
    return f" {_indent_continuations(body)}\n"


def format_memory(tag: str, text: str, when: str | None = None) -> str:
    """One memory as written in the memories section, trailing newline included: the tag, then
    :func:`format_body` (the single definition of a memory line)."""
    return tag + format_body(text, when)


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
    return HISTORY_OPEN + "".join(format_history_line(role, content) for role, content in history) + HISTORY_CLOSE


def format_history_line(role: str, content: str) -> str:
    """One message of the history section: ``role: content`` (continuations indented), then ``\n``.
    Each line starts with a role word and ends with ``\n``, so the section costs exactly its tags
    plus the sum of its lines (see the module docstring)."""
    return f"{clean_role(role)}: {_indent_continuations(_escape_sections(clean_text(content)))}\n"


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

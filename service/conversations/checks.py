"""What a conversation request must hold beyond what its types state: ids of path and query
parameters (they reach the handlers unchecked), speakers that are names on one line, the limits
read from the settings, and the agent a request names being the conversation's."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

import msgspec

from service.conversations.types import ID_RULE, MessageIn
from service.errors import BadRequest, Conflict, PayloadTooLarge, Unprocessable
from service.memories.validation import check_metadata, check_occurred_at, check_text
from service.retrieval.types import ConversationId
from service.settings import LimitSettings

SPEAKER_REFUSED_RANGES: Final = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E), (0x200B, 0x200B), (0x200E, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xDFFF), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)
"""The characters a speaker may not hold: Unicode's control (Cc, C1 included), format (Cf: bidi overrides
and isolates, zero-width characters, the byte order mark), line and paragraph separator (Zl, Zp) and
surrogate (Cs) characters, as of Unicode 14 (tests/unit/test_conversations_checks.py compares the table
with :mod:`unicodedata`), but the zero-width non-joiner and joiner (:data:`NAME_JOINERS`). A speaker's
name is written before the words in a context (``3 Dana: ...``): any of these could break that line,
hide in it or turn it around."""
NAME_JOINERS: Final = frozenset({0x200C, 0x200D})
"""Format characters that names are written with: U+200C in Persian and Indic names, U+200D in them and
in emoji sequences (a name such as "👩‍🚀 Ana")."""


def _escaped(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else chr(code)


def _class_body(ranges: Iterable[tuple[int, int]]) -> str:
    return "".join(_escaped(a) if a == b else f"{_escaped(a)}-{_escaped(b)}" for a, b in ranges)


SPEAKER_REFUSED: Final = _class_body(SPEAKER_REFUSED_RANGES)
""":data:`SPEAKER_REFUSED_RANGES` as the body of a regex character class: ``\\uXXXX`` escapes, which
Python's and JSON Schema's regexes read alike, and the characters beyond U+FFFF as themselves."""
SPEAKER_REFUSED_IN_SCHEMA: Final = _class_body(r for r in SPEAKER_REFUSED_RANGES if not 0xD800 <= r[0] <= 0xDFFF)
""":data:`SPEAKER_REFUSED` without the surrogates, for the OpenAPI schema: validators that read text as
Unicode scalar values (jsonschema-rs) cannot name them and would drop the whole pattern, and a body
holding a lone surrogate is refused when it is decoded anyway."""
_REFUSED: Final = re.compile(f"[{SPEAKER_REFUSED}]")


def check_ident(value: str | None, field: str) -> None:
    """A conversation, session or message id, by the rule of the request bodies' ids
    (:data:`~service.retrieval.types.ConversationId`)."""
    if value is None:
        return
    try:
        msgspec.convert(value, ConversationId)
    except msgspec.ValidationError:
        raise BadRequest(f"{field} must be {ID_RULE}", code="validation_error", details={"field": field}) from None


def whose(agent_id: str | None) -> str:
    """How an error names a conversation's (or a key's) owner: ``agent 'barista'`` or ``the whole org``."""
    return f"agent {agent_id!r}" if agent_id else "the whole org"


def check_owner(conversation_id: str, owner: str | None, agent_id: str | None) -> None:
    """409 ``conversation_agent_mismatch`` (``details.agent_id``: the ``owner``) when the request's
    ``agent_id`` (None: org-wide) is not the conversation's; an append or removal that names its agent
    acts only on that agent's conversation."""
    if agent_id != owner:
        raise Conflict(f"conversation {conversation_id!r} belongs to {whose(owner)}, not {whose(agent_id)}",
                       code="conversation_agent_mismatch", details={"agent_id": owner})


def clean_speaker(speaker: str, field: str) -> str:
    """A speaker as stored: its surrounding whitespace trimmed (``" Dana "`` is ``"Dana"``, so a re-sent
    message compares equal however it is padded); 400 when it holds a character of
    :data:`SPEAKER_REFUSED_RANGES` or nothing but whitespace."""
    name = speaker.strip()
    if not name or _REFUSED.search(speaker):
        raise BadRequest(f"{field} must be a name on one line (no control, format or line separator characters, "
                         "not blank)", code="validation_error", details={"field": field})
    return name


def check_messages(messages: list[MessageIn], limits: LimitSettings) -> list[MessageIn]:
    """The messages as written, or a 4xx: limits the types cannot state (count, text sizes, names on one
    line, metadata, times, no ``message_id`` twice in one append); speakers come back trimmed."""
    if not messages:
        raise BadRequest("messages must not be empty", code="validation_error", details={"field": "messages"})
    if len(messages) > limits.max_batch:
        raise PayloadTooLarge(f"an append holds at most {limits.max_batch} messages, got {len(messages)}",
                              code="batch_too_large", details={"limit": limits.max_batch})
    seen: dict[str, int] = {}
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        check_text(m.content, limits, field=f"{where}.content")
        if m.speaker is not None and (speaker := clean_speaker(m.speaker, f"{where}.speaker")) != m.speaker:
            m = msgspec.structs.replace(m, speaker=speaker)
        check_ident(m.session_id, f"{where}.session_id")
        check_ident(m.message_id, f"{where}.message_id")
        check_metadata(m.metadata, limits)
        if m.occurred_at is not None:
            check_occurred_at(m.occurred_at, field=f"{where}.occurred_at")
        if m.message_id is not None:
            if m.message_id in seen:
                raise Unprocessable(f"{where}.message_id {m.message_id!r} is also messages[{seen[m.message_id]}]'s",
                                    code="duplicate_message_id", details={"field": f"{where}.message_id"})
            seen[m.message_id] = i
        out.append(m)
    return out

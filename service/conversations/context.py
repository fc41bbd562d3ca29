"""A message's search context, derived from the turns before it (pure functions, no I/O).

A reply rarely repeats the words of the question it answers ("I'm off to go swimming with the kids"
answers "What do you do to relax?"), so lexical search would miss it for a question asked in those
words. Each message is therefore stored with a ``search_context``: the last ``context_turns`` turns
of its session before it in its conversation (however many turns of other sessions came between; the
messages without a session make one of their own), oldest first, one ``speaker: words`` line each.
BM25 weighs those words at ``PGCONTEXT_RETRIEVAL_SEARCH_CONTEXT_WEIGHT`` against the message's own
(docs/retrieval.md "Search context"); the context is never packed into an assembled context.
Measured choices (how many turns, whether the speaker's own name is in it): docs/retrieval.md
"Conversations".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Turn:
    """What a derived context needs of a message."""

    session_id: str | None
    speaker: str | None
    role: str | None
    text: str


def label(speaker: str | None, role: str | None) -> str | None:
    """Who said a message, as written before its words: the speaker's name, else the role."""
    return speaker or role


def said(turn: Turn) -> str:
    """One turn as ``speaker: words`` (just the words when neither speaker nor role is known): how a
    message reads in a derived context and in an assembled one."""
    who = label(turn.speaker, turn.role)
    return f"{who}: {turn.text}" if who else turn.text


def derive_contexts(before: Sequence[Turn], new: Sequence[Turn], turns: int) -> list[str | None]:
    """The search context of each of ``new`` (appended in this order after ``before``, the messages
    already in the conversation, in order, holding at least the last ``turns`` of each session of
    ``new``): the last ``turns`` turns of its session before it, earlier ones of ``new`` included,
    oldest first; None when there are none."""
    if turns <= 0:
        return [None] * len(new)
    sessions: dict[str | None, list[str]] = {}
    for turn in before:
        sessions.setdefault(turn.session_id, []).append(said(turn))
    out: list[str | None] = []
    for turn in new:
        earlier = sessions.setdefault(turn.session_id, [])
        out.append("\n".join(earlier[-turns:]) if earlier else None)
        earlier.append(said(turn))
    return out

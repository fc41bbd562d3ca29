"""A message's search context, derived from the turns before it (pure functions, no I/O).

A reply rarely repeats the words of the question it answers ("I'm off to go swimming with the kids"
answers "What do you do to relax?"), so lexical search would miss it for a question asked in those
words. Each message is therefore stored with a ``search_context``: the ``context_turns`` turns
before it in its conversation that belong to its session, oldest first, one ``speaker: words`` line
each. BM25 weighs those words at ``PGCONTEXT_RETRIEVAL_SEARCH_CONTEXT_WEIGHT`` against the message's
own (docs/retrieval.md "Search context"); the context is never packed into an assembled context.
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
    """The search context of each of ``new`` (appended in this order after ``before``, which ends with
    at least the last ``turns`` messages already in the conversation): up to ``turns`` turns right
    before it, those of its session, oldest first; None when there are none."""
    history = list(before)
    out: list[str | None] = []
    for turn in new:
        window = history[max(0, len(history) - turns):] if turns > 0 else []
        same = [said(t) for t in window if t.session_id == turn.session_id]
        out.append("\n".join(same) if same else None)
        history.append(turn)
    return out

"""A follow-up's search query: completed with the names the conversation just used.

In a chat, the question an assembly is asked is often the user's last turn, and a last turn often
leans on the ones before it: "What does she paint?" after "Let's talk about Caroline". Searched
alone, the pronoun is a stopword to BM25 and a faint vector to the embedding model, and the speaker
boost (docs/retrieval.md "Speakers") sees no name. So a query with no name of its own and either

* a third-person pronoun (``he``, ``she``, ``they``, ``him``, ``her``, ``them``, ``his``, ``hers``,
  ``their``, ``theirs``), or
* at most :data:`SHORT_TERMS` content words (``why?``, ``and then?``)

is searched after the names (:func:`names_in`) of the latest earlier message of ``recent_messages``
that has any, read from its last :data:`CONTEXT_CHARS` characters: "Caroline What does she paint?".
A last message that is the query itself (clients often send the current turn in both) is skipped.
Only the search changes: the context, the intent and the history the model sees are the request's
own. The response's cold branch says when it happened, and ``retrieval.complete_from_history:
false`` turns it off.

Names only, not the message's other words: on LoCoMo dev asked as follow-ups
(``benchmarks/retrieval_locomo.py --followups``), the whole previous message lowered the evidence in
a 1,000-token context below not completing at all (0.728 against 0.775), its names raised it to
0.80-0.81, as high as the questions that name the person themselves (docs/retrieval.md "Follow-ups").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Protocol

from service.assembly.format import clean_text
from service.assembly.terms import STOPWORDS, content_words, words

ANAPHORS: Final = frozenset(["he", "she", "they", "him", "her", "them", "his", "hers", "their", "theirs"])
"""Pronouns that point at someone named before: a query holding one is completed."""
SHORT_TERMS: Final = 2
"""A query with at most this many content words is completed."""
CONTEXT_CHARS: Final = 300
"""Of the message a query is completed with, at most its last this many characters (cut at a word)."""


class Said(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    space = cut.find(" ")
    return cut[space + 1:] if 0 <= space < len(cut) - 1 else cut


_NAME = re.compile(r"(?<![\w'’-])[A-Z][\w'’-]*")
_SENTENCE_END = re.compile(r"(?:^|[.!?:;\n]\s*|[\"“(]\s*)$")


def names_in(text: str) -> list[str]:
    """Proper names in ``text``: capitalised words that do not open a sentence (and are not stopwords),
    without a possessive ``'s``, each once, in order."""
    found: list[str] = []
    for m in _NAME.finditer(text):
        if _SENTENCE_END.search(text[:m.start()]):
            continue
        name = re.sub(r"['’]s$", "", m.group(0))
        if name.lower() not in STOPWORDS and name != "I" and name not in found:
            found.append(name)
    return found


def needs_context(query: str) -> bool:
    """Whether ``query`` leans on what was said before it: no name of its own, and a pronoun or hardly
    any content words."""
    if names_in(query):
        return False
    said = set(words(query))
    return not ANAPHORS.isdisjoint(said) or len(content_words(said)) <= SHORT_TERMS


def search_query(query: str, recent: Sequence[Said]) -> tuple[str, str | None]:
    """The query the cold search runs, and the names it was completed with (None: the query as is)."""
    if not needs_context(query):
        return query, None
    asked = clean_text(query)
    for message in reversed(recent):
        said = clean_text(message.content)
        if not said or said == asked:
            continue
        if names := names_in(_tail(" ".join(said.split()), CONTEXT_CHARS)):
            context = " ".join(names)
            return f"{context} {query}", context
    return query, None

"""A follow-up's search query: completed with the names the conversation just used.

In a chat, the question an assembly is asked is often the user's last turn, and a last turn often
leans on the ones before it: "What does she paint?" after "Let's talk about Caroline". Searched
alone, the pronoun is a stopword to BM25 and a faint vector to the embedding model, and the speaker
boost (docs/retrieval.md "Speakers") sees no name. So a query with no name of its own and either

* a third-person pronoun (``he``, ``she``, ``they``, ``him``, ``her``, ``them``, ``his``, ``hers``,
  ``their``, ``theirs``), or
* at most :data:`SHORT_TERMS` content words (``why?``, ``and then?``), unless it speaks in the
  first person ("What did I order?" is about the user, who needs no name)

is searched after the names (:func:`names_in`) of the latest of the last :data:`LOOK_BACK` messages of
``recent_messages`` that has any, read from its last :data:`CONTEXT_CHARS` characters: "Caroline
What does she paint?".
A last message that is the query itself (clients often send the current turn in both) is skipped, and
a query that says one of those names in lower case ("what does caroline paint?") is searched as it is.
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
from collections.abc import Iterator, Sequence
from typing import Final

from service.assembly.format import clean_text
from service.assembly.terms import STOPWORDS, content_words, words
from service.assembly.types import Message
from service.retrieval.speakers import person_asked_about

ANAPHORS: Final = frozenset(["he", "she", "they", "him", "her", "them", "his", "hers", "their", "theirs"])
"""Pronouns that point at someone named before: a query holding one is completed."""
SHORT_TERMS: Final = 2
"""A query with at most this many content words is completed."""
CONTEXT_CHARS: Final = 300
"""Of the message a query is completed with, at most its last this many characters (cut at a word)."""
LOOK_BACK: Final = 4
"""Earlier messages read for names, latest first (besides a last one that is the query itself)."""


def _tail(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    space = cut.find(" ")
    return cut[space + 1:] if 0 <= space < len(cut) - 1 else cut


_NAME = re.compile(r"(?<![\w'’-])[A-Z][\w'’-]*")
_OPENS_SENTENCE = frozenset('.!?:;"“(')


def _opens_sentence(text: str, at: int) -> bool:
    """Whether the word at ``at`` opens a sentence: nothing before it but space, or a line break or
    sentence punctuation right before it."""
    j = at - 1
    while j >= 0 and text[j].isspace():
        if text[j] == "\n":
            return True
        j -= 1
    return j < 0 or text[j] in _OPENS_SENTENCE


def _names(text: str) -> Iterator[str]:
    seen: set[str] = set()
    for m in _NAME.finditer(text):
        if _opens_sentence(text, m.start()):
            continue
        name = re.sub(r"['’]s$", "", m.group(0))
        if name.lower() not in STOPWORDS and name != "I" and name not in seen:
            seen.add(name)
            yield name


def names_in(text: str) -> list[str]:
    """Proper names in ``text``: capitalised words that do not open a sentence (and are not stopwords),
    without a possessive ``'s``, each once, in order."""
    return list(_names(text))


def needs_context(query: str) -> bool:
    """Whether ``query`` leans on what was said before it: no name of its own, and a pronoun or hardly
    any content words. A short query in the first or second person ("What did I order?", "What did
    you suggest?") is about one side of the chat, which needs no name: only a third-person pronoun
    makes it lean."""
    if next(_names(query), None) is not None:
        return False
    said = set(words(query))
    if not ANAPHORS.isdisjoint(said):
        return True
    return len(content_words(said)) <= SHORT_TERMS and person_asked_about(query) is None


def search_query(query: str, recent: Sequence[Message]) -> tuple[str, str | None]:
    """The query the cold search runs, and the names it was completed with (None: the query as is)."""
    if not needs_context(query):
        return query, None
    asked = clean_text(query)
    earlier = list(recent[-(LOOK_BACK + 1):])
    if earlier and clean_text(earlier[-1].content) == asked:
        earlier.pop()
    for message in reversed(earlier[-LOOK_BACK:]):
        said = clean_text(message.content)
        if names := names_in(_tail(" ".join(said[-2 * CONTEXT_CHARS:].split()), CONTEXT_CHARS)):
            if not set(words(" ".join(names))).isdisjoint(words(query)):
                return query, None  # it names one of them after all, in lower case: "what does caroline paint?"
            context = " ".join(names)
            return f"{context} {query}", context
    return query, None

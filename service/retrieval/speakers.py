"""Who said a memory, in hybrid search: the speaker boost of ``auto`` fusion (for the speakers a query
names, and against the other roles than the asker's when it speaks in the first person, than the other
side's in the second), and the semantic branch's query without the speakers it names (docs/retrieval.md
"Speakers").

A memory's speaker is who said it: a conversation message's ``speaker`` column, else its
``metadata[key]`` (``PGCONTEXT_RETRIEVAL_SPEAKER_KEY``, default ``speaker``), e.g. ``"Melanie"`` on
a chat turn written as a plain memory. Pure logic but for :func:`semantic_hits`, which
orders the semantic branch's work around the lexical branch (no I/O of its own).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal
from uuid import UUID

import numpy as np
import numpy.typing as npt

from service.errors import forget_outcome
from service.retrieval.hits import Hit

MAX_SPEAKER_CHARS: Final = 100
"""Longer metadata values are not taken for names."""
FIRST_PERSON: Final = re.compile(r"(?<![\w'’.])(?:i|me|my|mine|myself|i['’](?:m|ve|d|ll))(?![\w'’]|\.\w)",
                                 re.IGNORECASE)
"""A first-person word: ``i.e.`` and words that merely hold one (``iPhone``, ``mind``) do not count."""
ADDRESSEE_VERBS: Final = frozenset(["tell", "show", "give", "remind", "help", "let", "send", "teach"])
"""Asked as a request ("Tell me about X"), a ``me`` after one of these is who wants the answer, not
what the query is about."""
POLITE: Final = frozenset(["please", "pls"])
"""Words a request may open with ("please show me", "Please, could you ...")."""
_ADDRESSEE_OPENERS: Final = POLITE | {"you"}
"""What an addressee verb may follow in a request ("Can you tell me", "please show me")."""
SECOND_PERSON: Final = re.compile(r"(?<![\w'’])(?:you|your|yours|yourself|you['’](?:re|ve|d|ll))(?![\w'’])",
                                  re.IGNORECASE)
"""A second-person word: a query holding one outside a request ("What did you suggest?") is about the
other side's words."""
REQUEST_VERBS: Final = frozenset(["can", "could", "would", "will", "do"])
"""A ``you`` right after one of these, opening the query, makes a request ("Can you remind me ...",
"Do you know where my ..."): not what the query is about."""
MODAL_VERBS: Final = frozenset(["can", "could", "would", "will", "should", "shall", "might", "may"])
"""A ``you`` after one of these asks for something (a request, a hypothetical), wherever it stands."""
OPINION_VERBS: Final = frozenset(["think", "recommend", "suggest", "advise", "propose", "reckon"])
"""Said now ("What do you recommend?"), a ``you`` before one of these asks for new words; said before
("What did you recommend?", after one of :data:`PAST_AUXILIARIES`), it asks for the other side's."""
PAST_AUXILIARIES: Final = frozenset(["did", "didn't", "have", "had", "haven't", "hadn't"])
RECALL_VERBS: Final = frozenset(["know", "remember", "recall", "recollect"])
"""A ``you`` before one of these asks what is remembered, not what the other side said: "What do you
know about my diet?" is about the user's words."""
SUBJECT_LEADS: Final = frozenset(["did", "does", "do", "am", "is", "was", "are", "were", "have", "has", "had", "will",
                                  "would", "can", "could", "should", "shall", "may", "might", "must", "and", "what",
                                  "when", "where", "who", "whom", "which", "why", "how", "that", "if", "as"])
"""Words after which an ``I`` or a ``you`` is a clause's subject ("What did you suggest", "the book that I
lent"), not an object ("What did I tell you")."""
OBJECT_FORMS: Final = frozenset(["me", "my", "mine", "myself", "your", "yours", "yourself"])
_WORD_BEFORE = re.compile(r"([\w'’]+)\W*$")
_WORD_AFTER = re.compile(r"\s+(?:still\s+|even\s+)?(\w+)")
USER_ROLE: Final = "user"
"""The role of the messages a first-person query is about, unless the request says otherwise."""
OTHER_SIDE: Final = {"user": "assistant", "assistant": "user"}
"""The role of the messages a second-person query is about, by the first person's role."""
MAX_SPEAKERS: Final = 64
"""At most this many distinct speakers are matched against one query (the rest are not boosted)."""


def _leads(lead: str, end: int, words: frozenset[str]) -> bool:
    """Whether what stands at ``end`` of ``lead`` opens the query or a clause (nothing or punctuation
    before it), or follows one of ``words``."""
    before = _WORD_BEFORE.search(lead, 0, end)
    if before is None:
        return True
    return before.group(1).lower() in words or re.search(r"[.,!?;:]", lead[before.end(1):end]) is not None


def _said_as_request(lead: str, verb: re.Match[str], openers: frozenset[str]) -> bool:
    """Whether ``verb`` (the last word of ``lead``) opens a request: it opens the query or a clause, or
    follows one of ``openers``."""
    return _leads(lead, verb.start(), openers)


def _lead(query: str, word: re.Match[str]) -> str:
    """The 64 characters before ``word``: two words back is all the checks read."""
    return query[max(0, word.start() - 64):word.start()]


def _word_before(query: str, word: re.Match[str]) -> tuple[str, re.Match[str] | None]:
    """:func:`_lead` and the last word in it."""
    lead = _lead(query, word)
    return lead, _WORD_BEFORE.search(lead)


def _addressed(query: str, word: re.Match[str]) -> bool:
    """Whether the first-person ``word`` is a ``me`` that asks for the answer: after an
    :data:`ADDRESSEE_VERBS` verb said as a request ("Tell me", "Can you show me", "please show me"),
    not as a question's verb ("What did she tell me?")."""
    if word.group(0).lower() != "me":
        return False
    lead, verb = _word_before(query, word)
    return (verb is not None and verb.group(1).lower() in ADDRESSEE_VERBS
            and _said_as_request(lead, verb, _ADDRESSEE_OPENERS))


def _opens_request(query: str, word: re.Match[str]) -> bool:
    """Whether the second-person ``word`` asks for something rather than about the other side's words:
    the ``you`` of a request ("Can you remind me ...", "Do you know where my ..."; see
    :data:`REQUEST_VERBS`), of a modal anywhere ("What would you recommend for my trip?"; see
    :data:`MODAL_VERBS`), before a verb asking what is remembered ("What do you know about my ...?";
    see :data:`RECALL_VERBS`) or for an opinion now ("What do you think of my plan?", but not "What did
    you suggest?"; see :data:`OPINION_VERBS`)."""
    after = _WORD_AFTER.match(query, word.end())
    following = after.group(1).lower() if after is not None else ""
    if following in RECALL_VERBS:
        return True
    lead, verb = _word_before(query, word)
    before = verb.group(1).lower() if verb is not None else ""
    asks = before in MODAL_VERBS or (following in OPINION_VERBS and before not in PAST_AUXILIARIES)
    if asks and word.group(0).lower() == "you":  # not "What would your plan be?"
        return True
    return verb is not None and before in REQUEST_VERBS and _said_as_request(lead, verb, POLITE)


def _stands_as_subject(query: str, word: re.Match[str]) -> bool:
    """Whether ``word`` (an ``I`` or a ``you``, not a possessive or an object form) is a clause's subject:
    it opens the query or a clause, or follows one of :data:`SUBJECT_LEADS`."""
    if word.group(0).lower() in OBJECT_FORMS:
        return False
    lead = _lead(query, word)
    return _leads(lead, len(lead), SUBJECT_LEADS)


def person_asked_about(query: str) -> Literal["first", "second"] | None:
    """Whose words ``query`` is about, by the grammatical person it speaks in: ``first`` (its asker's)
    for a first-person word (``I``, ``me``, ``my``, ``mine``, ``myself``, ``I'm``, ...; a ``me`` that only
    asks for the answer, as in "Tell me about pgvector", does not count), ``second`` (the other side's)
    for a second-person word outside a request ("What did you suggest?", but not "Can you remind me
    ..."). A query holding both is about the one that stands as the subject ("What did you suggest for
    my birthday?": second; "What did I tell you?": first), else about neither, as is a query holding
    none."""
    first = [m for m in FIRST_PERSON.finditer(query) if not _addressed(query, m)]
    second = [m for m in SECOND_PERSON.finditer(query) if not _opens_request(query, m)]
    if not second:
        return "first" if first else None
    if not first:
        return "second"
    for word in sorted([*first, *second], key=lambda m: m.start()):
        if _stands_as_subject(query, word):
            return "first" if word in first else "second"
    return None


@dataclass(frozen=True, slots=True)
class SpeakerBoost:
    """Memories said or written by someone the query names rank higher: ``boost`` standard deviations
    are added to their z-score fusion score.

    Who said a memory is a message's ``speaker``, else its ``metadata[key]`` (a string, e.g.
    ``"Melanie"`` for a chat turn). Asked
    about a person ("What activities does Melanie partake in?"), the evidence is that person's own
    turns far more often than the other speakers' turns that mention them (LoCoMo dev: 97% of the
    evidence of questions naming one speaker), yet to BM25 the name is a low-idf term every one of
    their turns shares, and to MiniLM a small part of one vector. The boost is in the fusion's own
    unit, so it weighs as much as one standard deviation of either branch's candidate scores at 1.0.

    A chat written with roles rather than names has its asker too: a query in the first person ("What
    did I say about my sister?") is about the conversation's user (or, as the request says, about the
    assistant), one in the second ("What did you suggest?") about the other side, and the messages of
    the other roles lose the boost (:meth:`not_asked_about`)."""

    key: str
    boost: float
    asker: str | None = USER_ROLE
    """The role whose messages a first-person query is about (``tuning.first_person``; a second-person
    one is about the other side's); None: neither."""

    @property
    def active(self) -> bool:
        return bool(self.key) and self.boost > 0.0

    def _patterns(self, query: str, hits: Sequence[Hit]) -> dict[str, re.Pattern[str] | None]:
        """Each distinct speaker of ``hits`` (at most :data:`MAX_SPEAKERS`) -> its pattern if the
        query names them, else None."""
        found: dict[str, re.Pattern[str] | None] = {}
        if not self.active:
            return found
        for hit in hits:
            name = self._speaker(hit)
            if name is None or name in found or not (0 < len(name.strip()) <= MAX_SPEAKER_CHARS):
                continue
            if len(found) >= MAX_SPEAKERS:
                break
            pattern = re.compile(r"(?<!\w)" + r"\s+".join(map(re.escape, name.split())) + r"(?!\w)", re.IGNORECASE)
            found[name] = pattern if pattern.search(query) else None
        return found

    def named(self, query: str, hits: Sequence[Hit]) -> set[UUID]:
        """The ids of the candidates whose speaker the query names as a whole word (case-insensitive)."""
        patterns = self._patterns(query, hits)
        if all(pattern is None for pattern in patterns.values()):
            return set()  # the query names nobody (most queries): no second pass over the candidates
        return {h.id for h in hits if patterns.get(self._speaker(h) or "") is not None}

    def asked_about(self, query: str) -> tuple[Literal["first", "second"], str] | None:
        """The grammatical person ``query`` speaks in (:func:`person_asked_about`) and the role of the
        messages that makes it about: the :attr:`asker`'s for the first, the other side's for the second;
        None when it speaks in neither, or when whose messages that means is not known."""
        if not self.active or self.asker is None:
            return None
        person = person_asked_about(query)
        role = self.asker if person == "first" else OTHER_SIDE.get(self.asker) if person == "second" else None
        return None if person is None or role is None else (person, role)

    def not_asked_about(self, query: str,
                        hits: Sequence[Hit]) -> tuple[Literal["first", "second"], str, set[UUID]] | None:
        """When ``query`` is about one role's messages (:meth:`asked_about`), the grammatical person, that
        role and the ids of the messages of other roles (asked "What did I say ...?" by the user: the
        assistant's, a tool's, ...); else None. Lowering those, rather than raising the role's, ranks
        that role's turns above the rest of the chat and leaves them where they were against facts and
        documents, which a "How do I ...?" may well be asking for."""
        about = self.asked_about(query)
        if about is None:
            return None
        person, role = about
        return person, role, {h.id for h in hits
                              if h.message is not None and h.message.role is not None and h.message.role != role}

    def _speaker(self, hit: Hit) -> str | None:
        if (spoken := hit.speaker) is not None:
            return spoken
        metadata = hit.metadata
        name = metadata.get(self.key) if type(metadata) is dict else None
        return name if type(name) is str else None

    def without_names(self, query: str, hits: Sequence[Hit]) -> str | None:
        """``query`` without the speakers of ``hits`` it names (and their possessive ``'s``), for the
        dense branch; None when it names none, or nothing but names.

        The boost carries who the question is about; what is left for the embedding is what it asks
        about. A MiniLM vector of "What activities does Melanie partake in?" leans towards the turns
        that *mention* Melanie, mostly the other speaker's ("Thanks, Melanie!"), rather than hers
        (LoCoMo dev, offline: evidence in the fused top 25 0.792 -> 0.819; docs/retrieval.md "Speakers")."""
        topic = query
        for pattern in self._patterns(query, hits).values():
            if pattern is not None:
                topic = re.sub(pattern.pattern + r"(?:['\u2019]s\b)?", " ", topic, flags=re.IGNORECASE)
        if topic == query:
            return None
        topic = " ".join(topic.split())
        return topic if re.search(r"\w", topic) else None


async def semantic_hits(query: str, lexical: asyncio.Future[list[Hit]], speaker: SpeakerBoost,
                        embed: Callable[[str], Awaitable[npt.NDArray[np.float32]]],
                        walk: Callable[[npt.NDArray[np.float32]], Awaitable[list[Hit]]],
                        background: set[asyncio.Future[list[Hit]]]) -> tuple[list[Hit], str | None]:
    """The semantic branch of a hybrid search with speakers, and the text it searched when that was
    not ``query``: for a query that names speakers of the ``lexical`` branch's candidates, the nearest
    neighbours of the query without their names (:meth:`SpeakerBoost.without_names`: the boost
    carries who the question is about); for any other query, those of the query itself.

    Nothing waits for the lexical branch that did not have to: the query's own embedding and its
    HNSW walk start as usual, and only when the lexical candidates show that the query names someone
    is the topic embedded and walked (the first walk's rows are then dropped; a walk still running is
    left to finish in ``background`` rather than cancelled, since asyncpg cancels a query over a new
    connection). A query that names nobody costs what it did; one that names someone, one more
    embedding and walk after the lexical branch. The query's own embedding is always computed (and
    cached by ``embed``): context assembly scores its hot set against it."""
    vector = await embed(query)
    first: asyncio.Future[list[Hit]] | None = None
    if not lexical.done():
        first = asyncio.ensure_future(walk(vector))
    try:
        try:
            hits = await asyncio.shield(lexical)
        except Exception:  # (a cancellation is not an Exception: it propagates)
            hits = []  # the lexical branch failed (its own outcome says so): the query as it is
        topic = speaker.without_names(query, hits)
        if topic is None:
            return await (first if first is not None else walk(vector)), None
        return await walk(await embed(topic)), topic
    finally:
        if first is not None:
            if not first.done():
                background.add(first)  # held so that the loop does not drop it while it finishes
                first.add_done_callback(background.discard)
            first.add_done_callback(forget_outcome)

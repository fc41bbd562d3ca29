"""Who said a memory: which candidates' speakers a query names, and the query without them (pure logic)."""

from __future__ import annotations

import asyncio
from uuid import UUID, uuid4

import numpy as np
import pytest

from service.memories.types import MessageRef
from service.retrieval.hits import Hit
from service.retrieval.speakers import (
    MAX_SPEAKERS,
    SpeakerBoost,
    person_asked_about,
    semantic_hits,
)

A = uuid4()


def spoken(ident: UUID, score: float, speaker: object) -> Hit:
    return Hit(id=ident, text=str(ident), kind="episode", source=None, level=None, breadcrumb=None, score=score,
               metadata={"speaker": speaker})


@pytest.mark.parametrize(("speaker", "query", "named"), [
    ("Melanie", "What did Melanie paint?", True),
    ("Melanie", "what did MELANIE paint", True),
    ("Melanie", "Melanie's kids", True),
    ("Mel", "What did Melanie paint?", False),  # a whole word, not a prefix
    ("Ann", "Where did Joanna go?", False),
    ("Mary Ann", "What did Mary  Ann say?", True),  # a multi-word name, any spacing
    ("Mary Ann", "What did Mary say?", False),
    ("Zoë", "Where does zoë live?", True),
    ("C++", "who wrote C++ code", True),  # escaped, not a pattern
    ("", "anything", False),
    ("   ", "anything", False),
    (42, "42", False),  # not a string
    (["Melanie"], "Melanie", False),
    ({"name": "Melanie"}, "Melanie", False),
    ("x" * 101, "x" * 101, False),  # too long for a name
])
def test_speaker_names_match_as_whole_words(speaker: object, query: str, named: bool) -> None:
    h = spoken(A, 1.0, speaker)
    assert SpeakerBoost("speaker", 1.0).named(query, [h]) == ({A} if named else set())


def said_by(ident: UUID, speaker: str | None, metadata_speaker: object = None) -> Hit:
    """A conversation's message (its speaker a column), with or without a ``metadata.speaker`` too."""
    ref = MessageRef(conversation_id="c", position=1, session_id=None, speaker=speaker, role="user", message_id=None)
    return Hit(id=ident, text="hello", kind="message", source=None, level=None, breadcrumb=None, score=1.0,
               metadata={} if metadata_speaker is None else {"speaker": metadata_speaker}, message=ref)


def test_a_messages_speaker_column_is_who_said_it() -> None:
    boost = SpeakerBoost("speaker", 1.5)
    column, both, role_only = uuid4(), uuid4(), uuid4()
    hits = [said_by(column, "Melanie"), said_by(both, "Caroline", "Melanie"), said_by(role_only, None, "Melanie")]
    # the column wins over metadata; a message without a speaker falls back to metadata.speaker
    assert boost.named("What does Melanie paint?", hits) == {column, role_only}
    assert boost.named("What does Caroline paint?", hits) == {both}
    assert boost.without_names("What does Caroline paint?", hits) == "What does paint?"


def in_role(ident: UUID, role: str | None, speaker: str | None = None) -> Hit:
    ref = MessageRef(conversation_id="c", position=1, session_id=None, speaker=speaker, role=role, message_id=None)
    return Hit(id=ident, text="hello", kind="message", source=None, level=None, breadcrumb=None, score=1.0,
               message=ref)


@pytest.mark.parametrize(("query", "person"), [
    ("What did I say about my sister?", "first"),
    ("what is my dog called", "first"),
    ("Where do I live?", "first"),
    ("I'm looking for the recipe", "first"),
    ("I’ve lost it", "first"),
    ("Is the red one mine?", "first"),
    ("What did the counsellor tell me?", "first"),
    ("Remind myself", "first"),
    ("Tell me about pgvector", None),  # a "me" that asks for the answer
    ("Could you show me the config?", None),
    ("remind me, what is the plan", None),
    ("Okay, show me the config", None),
    ("Please tell me about pgvector", None),
    ("What did you say?", "second"),  # about the other side's words
    ("What's your favourite colour?", "second"),
    ("Tell me what you said", "second"),
    ("What did you suggest for my birthday?", "second"),  # both: the subject decides
    ("Did you book my table?", "second"),
    ("What did I tell you about my sister?", "first"),
    ("What would you recommend for my trip?", "first"),  # a modal's "you" asks for something
    ("What do you think of my plan?", "first"),  # an opinion now, not words said before
    ("What do you suggest?", None),
    ("What did you suggest?", "second"),
    ("Why didn't you recommend it?", "second"),
    ("What would your plan be?", "second"),  # the modal's subject is not "you"
    ("Can you tell me what you said about my sister?", "second"),
    ("Where is the book that you lent me?", "second"),
    ("What is your view of my plan?", None),  # both, neither the subject
    ("Can you remind me what my sister said?", "first"),  # a request's "you"
    ("Do you know where my keys are?", "first"),
    ("What do you know about my diet?", "first"),  # what is remembered, not what the other side said
    ("What do you still remember about me?", "first"),
    ("What did you recall?", None),
    ("Please, could you check my calendar?", "first"),
    ("Could you tell me what I said?", "first"),
    ("When is my youth center's show?", "first"),  # "youth" is not "you"
    ("Remind me what my sister said", "first"),
    ("Tell me what I said", "first"),
    ("Where does she live?", None),
    ("What is AI?", None),
    ("the iPhone model", None),  # a word that merely holds a first-person one
    ("keep in mind the plan", None),
    ("the plan, i.e. the budget", None),
    ("Melanie's recipe", None),
])
def test_whose_messages_a_query_is_about(query: str, person: str | None) -> None:
    user, assistant, tool, unassigned, plain = uuid4(), uuid4(), uuid4(), uuid4(), uuid4()
    hits = [in_role(user, "user"), in_role(assistant, "assistant"), in_role(tool, "tool"), in_role(unassigned, None),
            spoken(plain, 1.0, "Melanie")]
    assert person_asked_about(query) == person
    boost = SpeakerBoost("speaker", 1.5)
    # first person: the user's messages, second: the assistant's; the other roles' messages lose the
    # boost, role-less messages and other memories keep their standing
    lowered = {"first": ("user", {assistant, tool}), "second": ("assistant", {user, tool})}
    assert boost.not_asked_about(query, hits) == (None if person is None else (person, *lowered[person]))
    assert boost.named(query, hits) == ({plain} if "Melanie" in query else set())
    assert SpeakerBoost("speaker", 0.0).not_asked_about(query, hits) is None  # off with the boost
    assert boost.without_names(query, hits) == (None if "Melanie" not in query else "recipe")


def test_the_request_says_whose_the_first_person_is() -> None:
    user, assistant, tool = uuid4(), uuid4(), uuid4()
    hits = [in_role(user, "user"), in_role(assistant, "assistant"), in_role(tool, "tool")]
    asked_by_the_agent = SpeakerBoost("speaker", 1.5, "assistant")
    assert asked_by_the_agent.not_asked_about("What did I promise to send?", hits) == (
        "first", "assistant", {user, tool})
    assert asked_by_the_agent.not_asked_about("What did you ask me to send?", hits) == (
        "second", "user", {assistant, tool})
    ignored = SpeakerBoost("speaker", 1.5, None)
    for query in ("What did I promise to send?", "What did you ask me to send?"):
        assert ignored.asked_about(query) is None and ignored.not_asked_about(query, hits) is None


def test_a_first_person_query_naming_someone() -> None:
    mine, hers = uuid4(), uuid4()
    hits = [in_role(mine, "user", "Caroline"), in_role(hers, "assistant", "Melanie")]
    boost = SpeakerBoost("speaker", 1.5)
    assert boost.named("What did I tell Melanie?", hits) == {hers}
    assert boost.not_asked_about("What did I tell Melanie?", hits) == ("first", "user", {hers})  # they cancel out


@pytest.mark.parametrize(("query", "topic"), [
    ("What activities does Melanie partake in?", "What activities does partake in?"),
    ("What is Melanie's favourite book?", "What is favourite book?"),
    ("What is Melanie\u2019s favourite book?", "What is favourite book?"),
    ("Did Caroline tell melanie about the race?", "Did tell about the race?"),  # every named speaker
    ("Did Mary  Ann go?", "Did go?"),
    ("What do people do to relax?", None),  # no one named
    ("Melanie", None),  # nothing but a name: the query as it is
    ("Melanie's?", None),
    ("Melanies are many", None),  # not the name as a word
])
def test_the_dense_query_leaves_out_the_named_speakers(query: str, topic: str | None) -> None:
    hits = [spoken(uuid4(), 1.0, who) for who in ("Melanie", "Caroline", "Mary Ann", "Melanie")]
    assert SpeakerBoost("speaker", 1.0).without_names(query, hits) == topic
    assert SpeakerBoost("speaker", 0.0).without_names(query, hits) is None  # off with the boost


def test_speaker_boost_matches_a_bounded_number_of_distinct_names() -> None:
    hits = [spoken(uuid4(), 1.0, f"Person{n}") for n in range(MAX_SPEAKERS + 10)]
    query = " ".join(f"Person{n}" for n in range(len(hits)))
    assert len(SpeakerBoost("speaker", 1.0).named(query, hits)) == MAX_SPEAKERS


class Branch:
    """The semantic branch's two steps, recorded: ``embed`` returns a vector naming its text, ``walk``
    returns one hit whose text is the vector's name (after ``walk_s``)."""

    def __init__(self, walk_s: float = 0.0) -> None:
        self.embedded: list[str] = []
        self.walked: list[str] = []
        self.walk_s = walk_s
        self.names: dict[int, str] = {}

    async def embed(self, text: str) -> np.ndarray:
        self.embedded.append(text)
        vector = np.full(2, len(self.names), dtype=np.float32)
        self.names[len(self.names)] = text
        return vector

    async def walk(self, vector: np.ndarray) -> list[Hit]:
        text = self.names[int(vector[0])]
        self.walked.append(text)
        await asyncio.sleep(self.walk_s)
        return [Hit(id=uuid4(), text=text, kind="fact", source=None, level=None, breadcrumb=None, score=1.0)]


async def lexical_after(delay: float, hits: list[Hit] | Exception) -> list[Hit]:
    await asyncio.sleep(delay)
    if isinstance(hits, Exception):
        raise hits
    return hits


QUESTION = "What does Melanie paint?"
CANDIDATES = [spoken(uuid4(), 2.0, "Melanie"), spoken(uuid4(), 1.0, "Caroline")]


async def test_a_query_naming_a_speaker_walks_its_topic() -> None:
    branch, background = Branch(), set[asyncio.Future[list[Hit]]]()
    lexical = asyncio.ensure_future(lexical_after(0.0, CANDIDATES))
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # the lexical branch is done before the embedding
    hits, topic = await semantic_hits(QUESTION, lexical, SpeakerBoost("speaker", 1.0), branch.embed, branch.walk,
                                      background)
    assert topic == "What does paint?" and [h.text for h in hits] == [topic]
    assert branch.embedded == [QUESTION, topic]  # the query's own embedding too (assembly scores the hot set by it)
    assert branch.walked == [topic] and not background


async def test_a_slow_lexical_branch_does_not_hold_up_the_walk_of_a_query_naming_nobody() -> None:
    branch, background = Branch(), set[asyncio.Future[list[Hit]]]()
    lexical = asyncio.ensure_future(lexical_after(0.05, CANDIDATES))
    hits, topic = await semantic_hits("What do people paint?", lexical, SpeakerBoost("speaker", 1.0), branch.embed,
                                      branch.walk, background)
    assert topic is None and [h.text for h in hits] == ["What do people paint?"]
    assert branch.walked == ["What do people paint?"]  # started before the lexical branch ended, used as it is


async def test_a_slow_lexical_branch_naming_a_speaker_replaces_the_first_walk() -> None:
    branch, background = Branch(walk_s=0.2), set[asyncio.Future[list[Hit]]]()
    lexical = asyncio.ensure_future(lexical_after(0.01, CANDIDATES))
    hits, topic = await semantic_hits(QUESTION, lexical, SpeakerBoost("speaker", 1.0), branch.embed, branch.walk,
                                      background)
    assert topic == "What does paint?" and [h.text for h in hits] == [topic]
    assert branch.walked == [QUESTION, topic]
    await asyncio.sleep(0.25)
    assert not background  # the first walk finished and let go


async def test_a_failed_lexical_branch_leaves_the_query_as_it_is() -> None:
    branch, background = Branch(), set[asyncio.Future[list[Hit]]]()
    lexical = asyncio.ensure_future(lexical_after(0.01, RuntimeError("lexical down")))
    hits, topic = await semantic_hits(QUESTION, lexical, SpeakerBoost("speaker", 1.0), branch.embed, branch.walk,
                                      background)
    assert topic is None and [h.text for h in hits] == [QUESTION] and branch.embedded == [QUESTION]
    with pytest.raises(RuntimeError):
        lexical.result()

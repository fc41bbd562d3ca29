"""A follow-up's search query: completed with the names the conversation just used (service.assembly.followup)."""

from __future__ import annotations

import pytest

from service.assembly.followup import CONTEXT_CHARS, LOOK_BACK, names_in, needs_context, search_query
from service.assembly.types import Message


@pytest.mark.parametrize(("text", "names"), [
    ("Tell me about Melanie.", ["Melanie"]),
    ("When did Caroline go to the LGBTQ support group?", ["Caroline", "LGBTQ"]),
    ("What is Caroline's identity? And Jon’s?", ["Caroline", "Jon"]),  # possessives; "And" opens a sentence
    ("Melanie painted it. Then she left", []),  # names that open a sentence are not told from other words
    ("I think so, and I agree", []),
    ("We met Gina and Gina again in Paris", ["Gina", "Paris"]),
    ("ask (Oscar) about it", []),
    ("see you then\n  Maria will come", []),  # a line break opens a sentence too
])
def test_names_are_the_capitalised_words_inside_a_sentence(text: str, names: list[str]) -> None:
    assert names_in(text) == names


def test_a_possessive_is_the_name() -> None:
    assert names_in("What is the date of Caroline's talk and Jon’s?") == ["Caroline", "Jon"]


@pytest.mark.parametrize(("query", "leans"), [
    ("What activities does she partake in?", True),
    ("When did they meet up with their friends?", True),
    ("Why?", True),  # at most two content words
    ("and after that?", True),
    ("What activities does Melanie partake in?", False),  # a name of its own
    ("What did Caroline and her friends do?", False),
    ("Which tricks did the puppy learn in the park?", False),  # stands alone
    ("What did I order?", False),  # short, but about the asker: no name needed
    ("and my sister?", False),
    ("What did you suggest?", False),  # about the other side
    ("What did I tell her?", True),  # the pronoun still points back
    ("What did you tell her?", True),
    ("Tell me why?", True),  # a "me" that asks for the answer is not the first person
])
def test_a_query_leans_on_the_conversation_when_it_has_a_pronoun_or_almost_no_words(query: str, leans: bool) -> None:
    assert needs_context(query) is leans


def test_the_query_is_searched_after_the_names_the_conversation_just_used() -> None:
    recent = [Message(role="user", content="Did Jon open the studio?"),
              Message(role="assistant", content="Yes, Jon opened it with Gina in May."),
              Message(role="user", content="What does she dance?")]
    # the last message is the query itself (clients send the current turn in both): the one before is used,
    # whoever said it
    assert search_query("What does she dance?", recent) == ("Jon Gina What does she dance?", "Jon Gina")
    # a query that stands alone is searched as it is
    assert search_query("What does Gina dance?", recent) == ("What does Gina dance?", None)


def test_a_query_that_names_someone_in_lower_case_is_searched_as_it_is() -> None:
    recent = [Message(role="user", content="Did Caroline and Melanie go camping?")]
    # not "Caroline Melanie what does caroline paint?": that would favour both speakers
    assert search_query("what does caroline paint?", recent) == ("what does caroline paint?", None)
    assert search_query("what does she paint?", recent)[1] == "Caroline Melanie"


def test_without_names_before_it_the_query_is_searched_as_it_is() -> None:
    recent = [Message(role="user", content="tell me more"), Message(role="assistant", content="Sure.")]
    assert search_query("What did she say?", recent) == ("What did she say?", None)
    assert search_query("What did she say?", []) == ("What did she say?", None)


def test_only_the_end_of_a_long_message_is_read() -> None:
    long = "We talked with Maria about " + "the weather " * (CONTEXT_CHARS // 12) + "and then with Jon."
    assert search_query("What did he say?", [Message(role="user", content=long)]) == ("Jon What did he say?", "Jon")
    # the most recent message with a name decides
    older = [Message(role="user", content="Ask Maria."), Message(role="user", content="no names here")]
    assert search_query("What did she say?", older)[1] == "Maria"


def test_only_the_last_few_messages_are_read() -> None:
    names = [Message(role="user", content="Ask Maria.")]
    quiet = [Message(role="assistant", content="ok")] * LOOK_BACK
    asked = [Message(role="user", content="What did she say?")]
    assert search_query("What did she say?", names + quiet[1:] + asked)[1] == "Maria"
    assert search_query("What did she say?", names + quiet + asked)[1] is None
    assert search_query("What did she say?", names + quiet) == ("What did she say?", None)

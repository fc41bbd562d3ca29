"""The LoCoMo benchmark's question and message shapes (benchmarks/locomo_data.py): what its figures rest on."""

from __future__ import annotations

import pytest

from benchmarks.locomo_data import (
    FIRST_PERSON,
    SECOND_PERSON,
    Person,
    Query,
    Turn,
    as_message,
    in_person,
    one_speaker_questions,
)


@pytest.mark.parametrize(("question", "person", "asked"), [
    ("What activities does Melanie partake in?", FIRST_PERSON, "What activities do I partake in?"),
    ("When did Caroline go to the LGBTQ support group?", FIRST_PERSON, "When did I go to the LGBTQ support group?"),
    ("What is Caroline's favourite book?", FIRST_PERSON, "What is my favourite book?"),
    ("What does Melanie do with her kids?", FIRST_PERSON, "What do I do with my kids?"),
    ("Has Melanie painted a lake?", FIRST_PERSON, "Have I painted a lake?"),
    ("Is Caroline a member of the choir?", FIRST_PERSON, "Am I a member of the choir?"),
    ("What did the counsellor tell Caroline?", FIRST_PERSON, "What did the counsellor tell me?"),
    ("Why did Jon give up his job?", FIRST_PERSON, "Why did I give up my job?"),
    ("What did Gina say to him?", FIRST_PERSON, "What did I say to me?"),
    ("What activities does Melanie partake in?", SECOND_PERSON, "What activities do you partake in?"),
    ("What is Caroline's favourite book?", SECOND_PERSON, "What is your favourite book?"),
    ("What does Melanie do with her kids?", SECOND_PERSON, "What do you do with your kids?"),
    ("Is Caroline a member of the choir?", SECOND_PERSON, "Are you a member of the choir?"),
    ("When was Jon laid off?", SECOND_PERSON, "When were you laid off?"),
    ("What did the counsellor tell Caroline?", SECOND_PERSON, "What did the counsellor tell you?"),
])
def test_a_question_about_someone_asked_by_or_of_them(question: str, person: Person, asked: str) -> None:
    name = next(n for n in ("Melanie", "Caroline", "Jon", "Gina") if n in question)
    assert in_person(question, name, person) == asked


def turn(ident: str, text: str, speaker: str) -> Turn:
    return Turn(ident, text, "conv", None, {"speaker": speaker, "session": 1})


def test_the_conversation_as_the_users_chat_has_roles_not_names() -> None:
    mine, theirs = turn("1", "Caroline: I paint.", "Caroline"), turn("2", "Melanie: Nice!", "Melanie")
    assert as_message(mine) == {"content": "I paint.", "message_id": "1", "speaker": "Caroline", "session_id": "1"}
    assert as_message(mine, "Caroline") == {"content": "I paint.", "message_id": "1", "role": "user",
                                           "session_id": "1"}
    assert as_message(theirs, "Caroline")["role"] == "assistant"
    questions = [Query("q1", "What does Caroline paint?", "conv", "4"),
                 Query("q2", "Did Caroline and Melanie meet?", "conv", "1"),  # both named: not asked
                 Query("q3", "What is the weather?", "conv", "4")]  # nobody named: not asked
    assert one_speaker_questions(questions, [mine, theirs]) == [(Query("q1", "What do I paint?", "conv", "4"),
                                                             "Caroline")]
    # asked of Caroline, the assistant: Melanie is the user
    assert one_speaker_questions(questions, [mine, theirs], SECOND_PERSON) == [
        (Query("q1", "What do you paint?", "conv", "4"), "Melanie")]

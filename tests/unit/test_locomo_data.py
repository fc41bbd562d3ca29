"""The LoCoMo benchmark's question and message shapes (benchmarks/locomo_data.py): what its figures rest on."""

from __future__ import annotations

import pytest

from benchmarks.locomo_data import Query, Turn, as_message, as_user_questions, first_person


@pytest.mark.parametrize(("question", "asked"), [
    ("What activities does Melanie partake in?", "What activities do I partake in?"),
    ("When did Caroline go to the LGBTQ support group?", "When did I go to the LGBTQ support group?"),
    ("What is Caroline's favourite book?", "What is my favourite book?"),
    ("What does Melanie do with her kids?", "What do I do with my kids?"),
    ("Has Melanie painted a lake?", "Have I painted a lake?"),
    ("Is Caroline a member of the choir?", "Am I a member of the choir?"),
    ("What did the counsellor tell Caroline?", "What did the counsellor tell me?"),
    ("Why did Jon give up his job?", "Why did I give up my job?"),
    ("What did Gina say to him?", "What did I say to me?"),
])
def test_a_question_about_someone_asked_by_them(question: str, asked: str) -> None:
    name = next(n for n in ("Melanie", "Caroline", "Jon", "Gina") if n in question)
    assert first_person(question, name) == asked


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
    assert as_user_questions(questions, [mine, theirs]) == [(Query("q1", "What do I paint?", "conv", "4"),
                                                             "Caroline")]

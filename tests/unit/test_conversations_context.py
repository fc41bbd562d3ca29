"""What the service derives for a message: its search context (the turns right before it, of its session,
``speaker: words``) and the text its vector is computed from."""

from __future__ import annotations

import pytest

from service.conversations.append import embedding_text
from service.conversations.context import Turn, derive_contexts, said


def turn(text: str, speaker: str | None = "Ann", session: str | None = "s1", role: str | None = None) -> Turn:
    return Turn(session_id=session, speaker=speaker, role=role, text=text)


def test_a_turn_reads_speaker_then_words() -> None:
    assert said(turn("hi")) == "Ann: hi"
    assert said(turn("hi", speaker=None, role="assistant")) == "assistant: hi"
    assert said(turn("hi", speaker="Bo", role="user")) == "Bo: hi"  # the name over the role
    assert said(turn("hi", speaker=None)) == "hi"


def test_each_new_turn_sees_the_turns_before_it_including_earlier_ones_of_the_same_append() -> None:
    before = [turn("one"), turn("two", "Bo")]
    new = [turn("three"), turn("four", "Bo")]
    assert derive_contexts(before, new, 2) == ["Ann: one\nBo: two", "Bo: two\nAnn: three"]
    assert derive_contexts(before, new, 1) == ["Bo: two", "Ann: three"]
    assert derive_contexts(before, new, 3) == ["Ann: one\nBo: two", "Ann: one\nBo: two\nAnn: three"]
    assert derive_contexts([], new, 2) == [None, "Ann: three"]


def test_the_context_is_the_last_turns_of_the_same_session() -> None:
    before = [turn("old", session="s1"), turn("older", session="s1"), turn("other", session="s2")]
    new = [turn("back", session="s1"), turn("none", session=None), turn("again", session=None)]
    # the session's last N turns, however many turns of other sessions came since; no session is one of its own
    assert derive_contexts(before, new, 2) == ["Ann: old\nAnn: older", None, "Ann: none"]
    assert derive_contexts(before, new, 1) == ["Ann: older", None, "Ann: none"]
    # sessions interleaved in one append: A, B, A, A
    new = [turn("a1", session="A"), turn("b1", session="B"), turn("a2", session="A"), turn("a3", session="A")]
    assert derive_contexts([], new, 2) == [None, None, "Ann: a1", "Ann: a1\nAnn: a2"]


@pytest.mark.parametrize("turns", [0, -1])
def test_no_turns_no_context(turns: int) -> None:
    assert derive_contexts([turn("a")], [turn("b"), turn("c")], turns) == [None, None]


def test_a_message_is_embedded_after_its_speakers_name() -> None:
    assert embedding_text("I paint sunsets.", "Melanie") == \
        "Melanie: I paint sunsets."
    assert embedding_text("I paint sunsets.", None) == "I paint sunsets."

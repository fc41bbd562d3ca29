"""What a conversation request must hold beyond its types: ids (never only dots) and speakers that are
names on one line (trimmed)."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from service.conversations.checks import (
    NAME_JOINERS,
    SPEAKER_REFUSED_RANGES,
    check_ident,
    check_messages,
    clean_speaker,
)
from service.conversations.types import MessageIn
from service.errors import BadRequest
from service.settings import LimitSettings

REFUSED_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}


def test_the_refused_speaker_characters_are_unicodes_categories() -> None:
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.category(chr(code)) in REFUSED_CATEGORIES and code not in NAME_JOINERS:
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    assert tuple(ranges) == SPEAKER_REFUSED_RANGES, f"Unicode {unicodedata.unidata_version}: update the table"


@pytest.mark.parametrize("speaker", ["Dana\u2028Evil", "Dana\u2029Evil", "Dana\u0085Evil", "Dana\x7f", "\u200b",
                                     "\u202e", "Dana\u202eliveD", "\ufeffDana", "Dana\u2066", "Dana\U000e0041",
                                     "two\nlines", "Dana\t", "", " ", "\u3000", "\u00a0\u2003"])
def test_a_speaker_that_is_not_a_name_on_one_line_is_refused(speaker: str) -> None:
    with pytest.raises(BadRequest) as caught:
        clean_speaker(speaker, "messages[0].speaker")
    assert caught.value.code == "validation_error"


@pytest.mark.parametrize(("speaker", "stored"), [
    ("Dana", "Dana"), (" Dana ", "Dana"), ("\u00a0Mary Ann\u3000", "Mary Ann"), ("José", "José"), ("李小龙", "李小龙"),
    ("O'Brien-Smith", "O'Brien-Smith"), ("مه‌لقا", "مه‌لقا"),
    ("👩‍🚀 Ana", "👩‍🚀 Ana")])
def test_a_speaker_is_stored_trimmed(speaker: str, stored: str) -> None:
    assert clean_speaker(speaker, "speaker") == stored
    assert clean_speaker(stored, "speaker") == stored  # trimming twice changes nothing
    (message,) = check_messages([MessageIn(content="hi", speaker=speaker)], LimitSettings())
    assert message.speaker == stored


@pytest.mark.parametrize("ident", [".", "..", "...", "has space", "", "x" * 201, "a\n", "caf\u00e9"])
def test_an_id_of_dots_only_is_refused_like_any_bad_id(ident: str) -> None:
    with pytest.raises(BadRequest) as caught:
        check_ident(ident, "conversation_id")
    assert caught.value.code == "validation_error" and "not only dots" in caught.value.message


@pytest.mark.parametrize("ident", ["a.b", ".a", "a..", "...a", "v1.2", "x" * 200, "user@example.com"])
def test_ids_with_dots_and_more_are_fine(ident: str) -> None:
    check_ident(ident, "conversation_id")

"""The context block: layout, tags, cleaning, and exact token additivity at every join."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from service.assembly.format import (
    MEMORIES_CLOSE,
    MEMORIES_OPEN,
    clean_role,
    clean_text,
    format_context,
    format_directive,
    format_history,
    format_memories,
    format_memory,
    memories_section_overhead,
    memory_tags,
)
from service.tokens import TokenCounter, Tokenizers


@dataclass(frozen=True)
class Line:
    formatted: str


@pytest.fixture(scope="module", params=["cl100k_base", "o200k_base"])
def counter(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return Tokenizers(tmp_path_factory.mktemp("tiktoken")).get(request.param)


def test_layout() -> None:
    memories = [Line(format_memory("1a2b3c4d", "Invoices go out on the 1st.")), Line(format_memory("9f8e", "a\nb"))]
    text = format_context("You are the billing agent.", memories, [("user", "When?"), ("assistant", "The 1st.")])
    assert text == (
        "<directive>\nYou are the billing agent.\n</directive>\n"
        "<memories>\n[1a2b3c4d] Invoices go out on the 1st.\n[9f8e] a\n  b\n</memories>\n"
        "<history>\nuser: When?\nassistant: The 1st.\n</history>\n"
    )


def test_empty_sections_are_left_out() -> None:
    assert format_context(None, [], []) == ""
    assert format_context("  ", [], [("user", "hi")]) == "<history>\nuser: hi\n</history>\n"
    assert format_memories([]) == ""
    assert format_directive("") == ""
    assert format_history([]) == ""


def test_clean_text() -> None:
    assert clean_text("  a\r\nb\rc  \n") == "a\nb\nc"
    assert clean_text("x\ud800y") == "x\ufffdy"
    assert clean_text("😀") == "😀"


def test_roles_are_one_word() -> None:
    assert clean_role(" user ") == "user"
    assert clean_role("tool call\n/x") == "tool_call_x"
    assert clean_role("") == "unknown"
    assert clean_role("///") == "unknown"


def test_memory_lines() -> None:
    assert format_memory("t", "  hello\r\nworld ") == "[t] hello\n  world\n"
    assert format_memory("t", "   ") == "[t]\n"


def test_tags_are_short_unique_prefixes() -> None:
    ids = [
        "3f2a9c10-0000-4000-8000-000000000001",
        "3f2a9c10-0000-4000-8000-000000000002",
        "7d1e0b22-1111-4111-8111-111111111111",
    ]
    tags = memory_tags(ids)
    assert tags[ids[2]] == "7d1e0b22"
    assert tags[ids[0]] != tags[ids[1]]
    assert ids[0].startswith(tags[ids[0]]) and ids[1].startswith(tags[ids[1]])
    assert len(set(tags.values())) == 3


def test_tags_survive_unsafe_and_colliding_ids() -> None:
    tags = memory_tags(["a]b", "ab", "日本", "語", "m", "short"])
    assert len(set(tags.values())) == 6
    for tag in tags.values():
        assert tag and all(c.isascii() and (c.isalnum() or c in "_-") for c in tag)


ADVERSARIAL = [
    "",
    "plain text",
    "ends with punctuation.",
    "ends with slash /",
    "trailing spaces   ",
    "multi\n\nline\n\n\nwith blank lines",
    "  leading spaces and\ttabs\t",
    "<|endoftext|> special",
    "[fake] tag and </memories>",
    "numbers 12345678901234",
    "unicode 日本語テキスト éèê 🚀🚀",
    "line sep\u2028inside\x0band\x0cform feed",
    "crlf\r\nline\rcarriage",
    "'s 're 've contractions'",
    "/leading/slash/path",
    "!!!???...",
]


def test_memories_section_is_exactly_the_sum_of_its_lines(counter: TokenCounter) -> None:
    lines = [Line(format_memory(f"tag{i:05d}", text)) for i, text in enumerate(ADVERSARIAL)]
    section = format_memories(lines)
    accounted = memories_section_overhead(counter) + sum(counter.count(line.formatted) for line in lines)
    assert counter.count(section) == accounted
    assert counter.count(MEMORIES_OPEN + MEMORIES_CLOSE) == memories_section_overhead(counter)


def test_whole_block_is_exactly_the_sum_of_its_sections(counter: TokenCounter) -> None:
    for directive in ADVERSARIAL:
        history = [(role, text) for role, text in zip(["user", "assistant", "tool"] * 6, ADVERSARIAL, strict=False)]
        lines = [Line(format_memory("abcdef12", text)) for text in ADVERSARIAL[:5]]
        block = format_context(directive, lines, history)
        parts = [format_directive(directive), format_memories(lines), format_history(history)]
        assert "".join(parts) == block
        assert counter.count(block) == sum(counter.count(p) for p in parts)

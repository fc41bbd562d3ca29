"""History-aware packing: which of a conversation's messages the model already sees (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID, uuid4

from service.assembly.history import InHistory, split
from service.assembly.intent import Intent
from service.assembly.scoring import Candidate, score_candidates
from service.assembly.types import AssembleRequest, Message
from service.memories.types import MessageRef
from service.retrieval.types import SearchResult
from service.text.tokens import Tokenizers


def ref(conversation: str, position: int, speaker: str | None = "Ann") -> MessageRef:
    return MessageRef(conversation_id=conversation, position=position, session_id=None, speaker=speaker,
                      role=None, message_id=None)


def request(**fields: object) -> AssembleRequest:
    return AssembleRequest(agent_id="a", query="q", model="gpt-4o", max_context_tokens=1000, **fields)  # type: ignore[arg-type]


def seen_in(req: AssembleRequest, last: int | None) -> InHistory | None:
    """What the model sees of ``req``'s conversation when its history section holds every recent message."""
    return InHistory.of(req, [(m.role, m.content) for m in req.recent_messages], last)


def test_recent_messages_match_by_words_whitespace_aside_or_as_a_history_line() -> None:
    seen = seen_in(request(conversation_id="c1", recent_messages=[
        Message(role="user", content="I adopted  a puppy\nnamed Oscar."),
        Message(role="user", content="Ann: We went hiking on Sunday.")]), None)
    assert seen is not None
    assert seen.why(ref("c1", 3), "I adopted a puppy named Oscar.") is not None
    assert seen.why(ref("c1", 4), "We went hiking on Sunday.") is not None  # as the history wrote it
    assert seen.why(ref("c1", 5), "Something else.") is None
    assert seen.why(ref("c2", 3), "I adopted a puppy named Oscar.") is None  # another conversation
    assert seen.why(None, "I adopted a puppy named Oscar.") is None  # not a message


def test_only_the_messages_the_history_section_keeps_are_seen() -> None:
    req = request(conversation_id="c1", recent_messages=[Message(role="user", content="The code is ALPHA-7."),
                                                         Message(role="user", content="Tell me about it.")])
    seen = InHistory.of(req, [("user", "Tell me about it.")], None)  # the budget trimmed the oldest out
    assert seen is not None
    assert seen.why(ref("c1", 2), "Tell me about it.") is not None
    assert seen.why(ref("c1", 1), "The code is ALPHA-7.") is None  # in neither section otherwise
    nothing = InHistory.of(req, [], None)  # no message fits: none is seen
    assert nothing is not None and nothing.why(ref("c1", 2), "Tell me about it.") is None


def test_history_turns_leave_out_the_last_turns() -> None:
    seen = seen_in(request(conversation_id="c1", history_turns=2), 10)
    assert seen is not None and seen.after == 8
    assert [p for p in range(1, 11) if seen.why(ref("c1", p), f"turn {p}")] == [9, 10]
    unread = seen_in(request(conversation_id="c1", history_turns=2), None)  # length not read in time
    assert unread is not None and unread.after is None and unread.why(ref("c1", 10), "turn 10") is None
    assert seen_in(request(), 10) is None  # no conversation named: nothing is left out


def test_split_reports_what_it_leaves_out(tmp_path: Path) -> None:
    counter = Tokenizers(tmp_path).get("o200k_base")
    now = datetime.now(UTC)
    ids = [uuid4() for _ in range(3)]
    texts = ["I adopted a puppy.", "We went hiking.", "A fact, not a message."]
    candidates = [Candidate(id=str(i), text=t, origin="cold", relevance=1.0, score=0.5, created_at=now)
                  for i, t in zip(ids, texts, strict=True)]
    results = [SearchResult(id=i, text=t, kind="message" if n < 2 else "fact", source=None, level=None,
                            breadcrumb=None, score=0.5, final_score=1.0, lexical_rank=1, semantic_rank=None,
                            lexical_score=1.0, semantic_score=None, fusion_method="none",
                            message=ref("c1", n + 1) if n < 2 else None)
               for n, (i, t) in enumerate(zip(ids, texts, strict=True))]
    seen = seen_in(request(conversation_id="c1", recent_messages=[Message(role="user", content=texts[0])]), None)
    kept, dropped = split(candidates, results, seen, counter, explain=True)
    assert [c.id for c in kept] == [str(ids[1]), str(ids[2])]
    assert [(d.id, d.reason, d.text, d.origin, d.score) for d in dropped] == [
        (ids[0], "in_history", texts[0], "cold", 0.5)]
    assert dropped[0].tokens == counter.count(f" {texts[0]}\n") and "recent_messages" in dropped[0].detail
    assert split(candidates, results, None, counter) == (candidates, [])
    assert isinstance(dropped[0].id, UUID)
    assert dropped[0].composite == 0.0 and dropped[0].scores is None  # left out before ranking: unscored


def test_split_counts_a_line_as_packing_writes_it_with_its_date(tmp_path: Path) -> None:
    """A question asking a time gets each line with its date: a turn left out as in the history is
    counted with that date too, as its `tokens` were it packed (the same count as the scoring's)."""
    counter = Tokenizers(tmp_path).get("o200k_base")
    said_at = datetime(2023, 5, 8, 14, 0, tzinfo=UTC)
    memory_id = uuid4()
    candidate = Candidate(id=str(memory_id), text="I adopted a puppy.", origin="cold", relevance=1.0, score=0.5,
                          created_at=said_at)
    result = SearchResult(id=memory_id, text=candidate.text, kind="message", source=None, level=None,
                          breadcrumb=None, score=0.5, final_score=1.0, lexical_rank=1, semantic_rank=None,
                          lexical_score=1.0, semantic_score=None, fusion_method="none", message=ref("c1", 1))
    seen = seen_in(request(conversation_id="c1", recent_messages=[Message(role="user", content=candidate.text)]),
                   None)
    _, plain = split([candidate], [result], seen, counter)
    _, dated = split([candidate], [result], seen, counter, show_dates=True)
    assert plain[0].tokens == counter.count(" I adopted a puppy.\n")
    assert dated[0].tokens == counter.count(" (8 May 2023) I adopted a puppy.\n") > plain[0].tokens
    scored = score_candidates([candidate], intent=Intent.FACTUAL, counter=counter, show_dates=True)
    assert dated[0].tokens == scored[0].tokens

"""LoCoMo-style data for ``retrieval_locomo.py``: the turns, questions and evidence of a directory, and
the two ways a conversation is written to the service (see that script's docstring)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks._common import KEEP

BATCH = 64
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d %B %Y", "%d %B, %Y", "%B %d, %Y",
                 "%Y-%m-%d %H:%M", "%Y-%m-%d")


@dataclass(frozen=True, slots=True)
class Turn:
    id: str
    text: str
    group: str
    occurred_at: datetime | None
    metadata: dict[str, Any]
    context: str = ""
    """The turns before it (same conversation and session), sent as ``search_context``."""


@dataclass(frozen=True, slots=True)
class Query:
    id: str
    text: str
    group: str
    category: str


def parse_when(value: Any) -> datetime | None:
    """A session date such as ``1:56 pm on 8 May, 2023`` (or ISO 8601) as UTC; None if unparseable."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = " ".join(value.split())
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
        for fmt in _DATE_FORMATS:
            try:
                parsed = datetime.strptime(text, fmt)
                break
            except ValueError:
                continue
    if parsed is None:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def load_dir(root: Path, categories: set[str] | None) -> tuple[list[Turn], list[Query], dict[str, dict[str, int]]]:
    """Turns, the questions to score (in qrels, in ``categories`` when they have one) and the qrels."""
    turns: list[Turn] = []
    with (root / "corpus.jsonl").open() as f:
        for line in f:
            if not line.strip():
                continue
            doc = json.loads(line)
            meta = doc.get("metadata") or {}
            text = f"{doc.get('title') or ''}\n{doc['text']}".strip()
            turns.append(Turn(str(doc["_id"]), text, str(meta.get("sample_id", "all")),
                              parse_when(meta.get("session_date_time")), meta))
    qrels: dict[str, dict[str, int]] = {}
    with (root / "qrels.tsv").open() as f:
        next(f)
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3 and int(parts[2]) > 0:
                qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    queries: list[Query] = []
    with (root / "queries.jsonl").open() as f:
        for line in f:
            if not line.strip():
                continue
            q = json.loads(line)
            meta = q.get("metadata") or {}
            category = str(meta.get("category", "-"))
            if str(q["_id"]) not in qrels or (categories and "category" in meta and category not in categories):
                continue
            queries.append(Query(str(q["_id"]), q["text"], str(meta.get("sample_id", "all")), category))
    return turns, queries, qrels


def with_context(turns: Sequence[Turn], before: int) -> list[Turn]:
    """Each turn with the text of up to ``before`` turns preceding it in file order, of the same
    conversation and the same ``metadata.session`` (absent: one session), oldest first."""
    out: list[Turn] = []
    for i, t in enumerate(turns):
        parts: list[str] = []
        for prev in turns[max(0, i - before):i]:
            if prev.group == t.group and prev.metadata.get("session") == t.metadata.get("session"):
                parts.append(prev.text)
        out.append(Turn(t.id, t.text, t.group, t.occurred_at, t.metadata, "\n".join(parts)))
    return out


async def load_group(client: Any, headers: dict[str, str], turns: Sequence[Turn],
                     send_time: list[bool], send_context: list[bool], plain: bool = False) -> dict[str, str]:
    """POST one conversation's turns (org-wide memories); returns memory id -> turn id.

    ``send_time[0]``: send ``occurred_at``; set to False (and the batch resent) if the service rejects
    the field as unknown, so the benchmark also runs against a service without event time; likewise
    ``send_context[0]`` for ``search_context``."""
    by_memory: dict[str, str] = {}
    for start in range(0, len(turns), BATCH):
        chunk = turns[start:start + BATCH]
        while True:
            body = []
            for t in chunk:
                memory: dict[str, Any] = {"text": t.text, "kind": "episode"}
                if not plain:
                    memory["metadata"] = t.metadata
                if send_time[0] and t.occurred_at is not None:
                    memory["occurred_at"] = t.occurred_at.isoformat()
                if send_context[0] and t.context:
                    memory["search_context"] = t.context
                body.append(memory)
            r = await client.post("/v1/memories", json={"memories": body, "on_duplicate": KEEP}, headers=headers)
            if r.status_code == 400 and send_time[0] and "occurred_at" in r.text:
                send_time[0] = False
                continue
            if r.status_code == 400 and send_context[0] and "search_context" in r.text:
                send_context[0] = False
                continue
            r.raise_for_status()
            break
        by_memory.update(zip(r.json()["ids"], (t.id for t in chunk), strict=True))
    return by_memory


SPEAKER_PREFIX = re.compile(r"^(?P<name>[^:\n]{1,100}): ")


def as_message(turn: Turn, user: str | None = None) -> dict[str, Any]:
    """A turn as a client appends it: the words as said, who said them, when, in which session. With
    ``user``, who said them is a role instead of a name: ``user`` for that speaker's turns, ``assistant``
    for the others', as an agent's own chat is written."""
    speaker = turn.metadata.get("speaker")
    text = turn.text
    if (m := SPEAKER_PREFIX.match(text)) and (speaker is None or m.group("name") == speaker):
        speaker, text = m.group("name"), text[m.end():]
    message: dict[str, Any] = {"content": text, "message_id": turn.id}
    if user is not None:
        message["role"] = "user" if speaker == user else "assistant"
    elif isinstance(speaker, str) and speaker.strip():
        message["speaker"] = speaker
    if turn.occurred_at is not None:
        message["occurred_at"] = turn.occurred_at.isoformat()
    if turn.metadata.get("session") is not None:
        message["session_id"] = str(turn.metadata["session"])
    return message


async def append_group(client: Any, headers: dict[str, str], group: str, turns: Sequence[Turn],
                       user: str | None = None) -> dict[str, str]:
    """Append one conversation's turns through the conversation API (``user``: see :func:`as_message`);
    returns memory id -> turn id."""
    by_memory: dict[str, str] = {}
    for start in range(0, len(turns), BATCH):
        chunk = turns[start:start + BATCH]
        r = await client.post(f"/v1/conversations/{group}/messages", headers=headers,
                              json={"messages": [as_message(t, user) for t in chunk]})
        r.raise_for_status()
        by_memory.update(zip((m["id"] for m in r.json()["messages"]), (t.id for t in chunk), strict=True))
    return by_memory


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A question asked as a chat's follow-up: the person it names said before, a pronoun in the question."""

    query: Query
    recent_messages: list[dict[str, str]]


_LEADS_SUBJECT = frozenset(["did", "does", "do", "is", "was", "has", "have", "had", "would", "will", "can", "could",
                            "and", "when", "where", "how", "why", "what", "who"])


def _stands_as_subject(before: str) -> bool:
    """Whether a word after ``before`` stands where a question's subject does: first, or after an
    auxiliary or question word."""
    words = before.split()
    return not words or words[-1].lower() in _LEADS_SUBJECT


def _named(q: Query, speakers: dict[str, list[str]]) -> list[str]:
    """The speakers of ``q``'s conversation that ``q`` names (as words, any case)."""
    return [n for n in speakers.get(q.group, ()) if re.search(rf"\b{re.escape(n)}\b", q.text, re.IGNORECASE)]


def _pronouns(question: str, names: Sequence[str]) -> str:
    """``question`` with ``names`` replaced by pronouns: ``X's`` -> ``their``, ``X and Y`` -> ``they``, and
    ``X`` -> ``they`` where a subject stands (first, or after an auxiliary or question word), else ``them``."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    pair = re.compile(rf"\b(?:{alternatives})\s+and\s+(?:{alternatives})\b", re.IGNORECASE)
    text = pair.sub("they", question)
    text = re.sub(rf"\b(?:{alternatives})'s\b", "their", text, flags=re.IGNORECASE)

    def one(m: re.Match[str]) -> str:
        return "they" if _stands_as_subject(text[:m.start()]) else "them"

    return re.sub(rf"\b(?:{alternatives})\b", one, text, flags=re.IGNORECASE)


def as_followups(queries: Sequence[Query], turns: Sequence[Turn]) -> list[FollowUp]:
    """The questions that name one of their conversation's speakers, each asked after a user turn that
    names them: the conversation's previous question naming the same people (``Tell me about X.``
    for the first), then an assistant turn, then the question with the names as pronouns. The previous
    question brings its own words too, as a real earlier turn would."""
    speakers = speakers_of(turns)
    out: list[FollowUp] = []
    last_about: dict[tuple[str, frozenset[str]], str] = {}
    for q in queries:
        named = frozenset(_named(q, speakers))
        if not named:
            continue
        key = (q.group, named)
        before = last_about.get(key) or f"Tell me about {' and '.join(sorted(named))}."
        last_about[key] = q.text
        out.append(FollowUp(Query(q.id, _pronouns(q.text, sorted(named)), q.group, q.category),
                            [{"role": "user", "content": before}, {"role": "assistant", "content": "Let me look."}]))
    return out


def speakers_of(turns: Sequence[Turn]) -> dict[str, list[str]]:
    """Each conversation's speakers (``metadata.speaker``), in the order they first speak."""
    out: dict[str, list[str]] = {}
    for t in turns:
        names = out.setdefault(t.group, [])
        if isinstance(name := t.metadata.get("speaker"), str) and name.strip() and name not in names:
            names.append(name)
    return out


@dataclass(frozen=True, slots=True)
class Person:
    """How a question about someone reads in a grammatical person: their name as subject and object,
    ``name's``, the verbs that agree after the subject, and the third-person pronouns (which point at
    the one person named)."""

    subject: str
    object: str
    possessive: str
    reflexive: str
    agreement: dict[str, str]


FIRST_PERSON = Person("I", "me", "my", "myself", {"does": "do", "has": "have", "is": "am"})
SECOND_PERSON = Person("you", "you", "your", "yourself", {"does": "do", "has": "have", "is": "are", "was": "were"})


def in_person(question: str, name: str, person: Person = FIRST_PERSON) -> str:
    """``question`` about ``name`` asked in ``person`` (by them in the first person, to them in the
    second): ``name's`` -> ``my``/``your``, ``name`` -> ``I``/``you`` where a subject stands (first, or after
    an auxiliary or question word; ``does``/``has``/``is`` before it agree), else ``me``/``you``, and the
    third-person pronouns likewise: "What does Melanie do with her kids?" -> "What do I do with my kids?"
    / "What do you do with your kids?"."""
    alt = re.escape(name)
    text = re.sub(rf"\b{alt}'s\b", person.possessive, question, flags=re.IGNORECASE)

    def one(m: re.Match[str]) -> str:
        return person.subject if _stands_as_subject(m.string[:m.start()]) else person.object

    text = re.sub(rf"\b{alt}\b", one, text, flags=re.IGNORECASE)

    def agree(m: re.Match[str]) -> str:
        verb = person.agreement[m.group(1).lower()]
        return (verb.capitalize() if m.group(1)[0].isupper() else verb) + m.group(2)

    verbs = "|".join(person.agreement)
    text = re.sub(rf"\b({verbs})(\s+{re.escape(person.subject)})\b", agree, text, flags=re.IGNORECASE)
    pronouns = {"he": person.subject, "she": person.subject, "him": person.object, "his": person.possessive,
                "himself": person.reflexive, "herself": person.reflexive}

    def pronoun(m: re.Match[str]) -> str:
        word = m.group(0).lower()
        if word == "her":  # possessive before a word, else the object
            return person.possessive if re.match(r"\s+[A-Za-z]", m.string[m.end():]) else person.object
        return pronouns[word]

    return re.sub(r"\b(?:he|she|him|his|her|himself|herself)\b", pronoun, text, flags=re.IGNORECASE)


def one_speaker_questions(queries: Sequence[Query], turns: Sequence[Turn],
                      person: Person = FIRST_PERSON) -> list[tuple[Query, str]]:
    """The questions that name exactly one of their conversation's speakers, each with the speaker
    written as ``user`` (:func:`as_message`) when it is scored: in the first person, asked by the speaker
    named, who is the user; in the second, asked of the speaker named, who is the assistant (the other
    speaker is the user)."""
    speakers = speakers_of(turns)
    out: list[tuple[Query, str]] = []
    for q in queries:
        named = _named(q, speakers)
        if len(named) != 1:
            continue
        user = named[0] if person is FIRST_PERSON else next((n for n in speakers[q.group] if n != named[0]), None)
        if user is not None:
            out.append((Query(q.id, in_person(q.text, named[0], person), q.group, q.category), user))
    return out

"""History-aware packing: a conversation's turns that the model already sees are not packed again.

An assembly for a turn of conversation ``conversation_id`` carries the recent turns in
``recent_messages`` (the history section), and a client that appends every turn to the conversation
also finds those turns among its memories. Packing them again spends the budget on words the model
has just read. With ``conversation_id`` on the request, that conversation's messages are left out:

* those whose words are those of a recent message the context's history section holds (its
  ``content`` equal to the message's words, or to ``speaker: words`` as a history line writes them;
  whitespace runs compared as one space). Only the messages the budget keeps there count: the
  oldest ones trimmed out to fit the window (``budget.history_messages_dropped``) are not in the
  model's view, so their conversation messages are packed like any other memory — or the fact
  they hold would end up in neither section;
* with ``history_turns: K``, its last ``K`` messages, for a caller that sends the recent turns to
  the model itself (positions after the conversation's ``message_count - K``, read concurrently with
  the branches).

Each is reported in ``dropped`` with reason ``in_history``. Messages of other conversations, and
every other memory, are packed as usual.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from uuid import UUID

import structlog

from service.assembly.candidates import ColdResult
from service.assembly.scoring import Candidate, memory_body
from service.assembly.types import AssembleRequest, DroppedMemory, LeftOut
from service.conversations.context import Turn, said
from service.db import Database, TenantTx
from service.memories.types import MessageRef
from service.retrieval.types import SearchResult
from service.text.tokens import TokenCounter

log = structlog.get_logger(__name__)
_SPACES = re.compile(r"\s+")


def _words(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


async def last_position(db: Database, org_id: UUID, conversation_id: str) -> int:
    """The conversation's last position (0 when it has no messages or does not exist)."""
    async def read(tx: TenantTx) -> int:
        row = await tx.fetchrow("conversations.get", tx.org_id, conversation_id)
        return 0 if row is None else int(row["message_count"])
    return await db.read(org_id, read)


@dataclass(frozen=True, slots=True)
class InHistory:
    """What of the request's conversation the model already sees (see the module docstring)."""

    conversation_id: str
    history: frozenset[str]
    """The words of the recent messages the history section holds, whitespace-normalised."""
    after: int | None
    """Messages after this position are among the last ``history_turns``; None: not asked, or the
    conversation's length could not be read in time."""

    @staticmethod
    def of(req: AssembleRequest, shown: Iterable[tuple[str, str]], last: int | None) -> InHistory | None:
        """``shown``: the recent messages (role, content) the history section holds, the newest the
        budget kept (:func:`~service.assembly.budget.plan_budget`); ``last``: :func:`read_last`."""
        if req.conversation_id is None:
            return None
        after = None if last is None or req.history_turns is None else max(0, last - req.history_turns)
        return InHistory(req.conversation_id, frozenset(_words(content) for _, content in shown), after)

    def why(self, message: MessageRef | None, text: str) -> str | None:
        """Why this memory is in the model's history already (None: it is not)."""
        if message is None or message.conversation_id != self.conversation_id:
            return None
        if self.after is not None and message.position > self.after:
            return (f"message {message.position} of conversation {self.conversation_id!r} is among its last turns, "
                    "which the request says the model sees (history_turns)")
        spoken = said(Turn(message.session_id, message.speaker, message.role, text))
        if _words(text) in self.history or _words(spoken) in self.history:
            return f"message {message.position} of conversation {self.conversation_id!r} is in recent_messages"
        return None


def split(candidates: Sequence[Candidate], results: Iterable[SearchResult], seen: InHistory | None,
          counter: TokenCounter, *, explain: bool = False,
          show_dates: bool = False) -> tuple[list[Candidate], list[DroppedMemory]]:
    """The candidates to rank, and those left out as already in the model's history (``in_history``;
    with ``explain``, each with its text and origin). They are left out before ranking, so they have
    no score breakdown (``composite`` 0); ``tokens`` counts each line as packing would have written it
    (``show_dates``: with its date, see :func:`~service.assembly.scoring.score_candidates`)."""
    if seen is None:
        return list(candidates), []
    why = {str(r.id): reason for r in results if (reason := seen.why(r.message, r.text)) is not None}
    if not why:
        return list(candidates), []
    kept = [c for c in candidates if c.id not in why]
    dropped = [DroppedMemory(id=UUID(c.id), reason="in_history", detail=why[c.id],
                             tokens=counter.count(memory_body(c, show_dates)), composite=0.0, score=round(c.score, 4),
                             text=c.text if explain else None, origin=c.origin if explain else None)
               for c in candidates if c.id in why]
    return kept, dropped


async def read_last(db: Database, org_id: UUID, req: AssembleRequest) -> int | None:
    """:func:`last_position` when the request asks for ``history_turns``; None otherwise or on failure
    (then only ``recent_messages`` are matched, and the log says why)."""
    if req.conversation_id is None or req.history_turns is None:
        return None
    try:
        return await last_position(db, org_id, req.conversation_id)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("history_turns_unavailable", error=repr(exc)[:200])
        return None


async def bounded(read: asyncio.Future[int | None], seconds: float) -> int | None:
    """``read``'s answer if it comes within ``seconds`` (the assembly's wall left), else None."""
    try:
        return await asyncio.wait_for(read, max(0.0, seconds))
    except TimeoutError:
        log.warning("history_turns_unavailable", error="the conversation's length was not read within the wall")
        return None


async def leave_out_history(req: AssembleRequest, shown: Sequence[tuple[str, str]], candidates: list[Candidate],
                            cold: ColdResult | None, last_read: asyncio.Future[int | None] | None,
                            counter: TokenCounter, seconds: float,
                            show_dates: bool = False) -> tuple[list[Candidate], LeftOut]:
    """The candidates to rank and what was left out as in the model's history already (nothing without
    ``conversation_id``): ``shown`` is the history the budget kept (see :meth:`InHistory.of`);
    ``last_read`` (:func:`read_last`) is waited for at most ``seconds``; ``show_dates`` as for
    :func:`split`."""
    if req.conversation_id is None:
        return candidates, LeftOut([])
    last = None if last_read is None else await bounded(last_read, seconds)
    kept, dropped = split(candidates, cold.search.results if cold is not None else (),
                          InHistory.of(req, shown, last), counter, explain=req.explain, show_dates=show_dates)
    return kept, LeftOut(dropped, turns_unread=req.history_turns is not None and last is None)

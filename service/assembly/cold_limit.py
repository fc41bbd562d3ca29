"""How many cold candidates an assembly asks for: enough to fill its memory budget.

A fixed count starved large budgets of short memories: on conversation turns (~33 tokens a line)
20 candidates cannot fill 1,000 tokens once near-duplicates and weak matches are dropped
(measured on LoCoMo dev: 20 -> evidence in context 0.64, 50 -> 0.71, 75 -> 0.72 at 1,000 tokens).
So the count is ``cold_candidates_per_slot`` per memory line the budget holds, at the org's own
recent tokens per line (``cold_tokens_per_memory`` until it has been seen), within
[``cold_limit``, ``cold_limit_max``]. Long memories (abstracts, document chunks) thus keep the
floor, and the floor is all a light cold search (under load) gets.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final
from uuid import UUID

from service.assembly.intent import SelectiveBudget
from service.assembly.scoring import ScoredCandidate
from service.assembly.types import AssembleRequest
from service.settings import AssemblySettings

TAG_TOKENS: Final = 1
"""A tag (a number below 1000) in cl100k_base and o200k_base (pinned by the format tests)."""
ALPHA: Final = 0.2
"""Weight of the latest request in an org's moving average of tokens per memory line."""
MAX_ORGS: Final = 10_000
"""Orgs whose tokens per memory line are remembered (the least recently seen are forgotten first)."""


def memories_budget_bound(req: AssembleRequest, sel: SelectiveBudget | None, default_reserve_tokens: int) -> int:
    """Most tokens the memories can get, known before any branch answers (the directive and history
    are not subtracted: an upper bound is what sizing the search needs)."""
    reserve = req.reserve_tokens if req.reserve_tokens is not None else default_reserve_tokens
    bounds = []
    if req.max_context_tokens is not None:
        bounds.append(max(0, req.max_context_tokens - reserve))
    if sel is not None:
        bounds.append(sel.final_tokens)
    return min(bounds) if bounds else 0


class ColdLimit:
    """Cold candidates per memory budget, learning each org's tokens per memory line."""

    def __init__(self, settings: AssemblySettings) -> None:
        self.settings = settings
        self._line_tokens: OrderedDict[UUID, float] = OrderedDict()

    def tokens_per_memory(self, org_id: UUID) -> float:
        return self._line_tokens.get(org_id, float(self.settings.cold_tokens_per_memory))

    def for_budget(self, org_id: UUID, budget_tokens: int) -> int:
        s = self.settings
        wanted = math.ceil(s.cold_candidates_per_slot * budget_tokens / max(1.0, self.tokens_per_memory(org_id)))
        return max(s.cold_limit, min(max(s.cold_limit, s.cold_limit_max), wanted))

    def learn(self, org_id: UUID, scored: Sequence[ScoredCandidate]) -> None:
        """Move the org's tokens per memory line toward this request's candidates."""
        if not scored:
            return
        mean = sum(c.tokens for c in scored) / len(scored) + TAG_TOKENS
        seen = self._line_tokens.pop(org_id, None)
        self._line_tokens[org_id] = mean if seen is None else seen + ALPHA * (mean - seen)
        if len(self._line_tokens) > MAX_ORGS:
            self._line_tokens.popitem(last=False)


def seen_bound(req: AssembleRequest) -> int:
    """At most how many of the cold search's results history-aware packing leaves out as in the model's
    history (``service.assembly.history``): the conversation's last ``history_turns`` messages and one
    per recent message (a turn said twice in the same words aside). The cold search asks for this many
    more results, so the turns the model already sees do not take the places of the memories it does
    not."""
    if req.conversation_id is None:
        return 0
    return (req.history_turns or 0) + len(req.recent_messages)

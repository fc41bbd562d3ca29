"""The token budget: what is left for memories once the fixed parts of the prompt are paid for.

::

    memories_available = total - directive - history - reserve - overhead      (never below 0)

* ``directive`` / ``history`` are measured as the larger of two ways the caller may send them:
  inside the formatted block (:mod:`service.assembly.format`) or as chat messages (per-message
  overhead, see :meth:`TokenCounter.count_messages`). Either way the memories still fit.
* ``reserve`` is kept free for the model's answer.
* ``overhead`` is the chat envelope of the block itself when sent as one system message
  (:data:`~service.tokens.MESSAGE_OVERHEAD` + the role + :data:`~service.tokens.REPLY_PRIMING`).
* The memories section's own open/close tags are charged by the packer against
  ``memories_available`` (only when something is packed), so a packed block always satisfies
  ``count(format_context(...)) <= total - reserve - overhead`` when the fixed parts fit at all;
  ``overflow`` says by how much they do not.

Selective mode takes the memory budget from :func:`~service.assembly.intent.plan_selective_budget`
and, when ``max_context_tokens`` is also given, caps it by what fits there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from service.assembly.format import format_directive, format_history
from service.assembly.intent import Complexity, Intent, SelectiveBudget
from service.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, TokenCounter

BLOCK_ROLE = "system"
"""Role the formatted block is assumed to travel in when measuring its chat envelope."""


@dataclass(frozen=True, slots=True)
class Budget:
    """Token accounting for one assembly (every count in tokens); ``memories_tokens`` is filled in
    after packing."""

    mode: Literal["fixed", "selective"]
    total: int | None
    """``max_context_tokens`` if given (None: selective mode without an overall limit)."""
    directive: int
    history: int
    reserve: int
    overhead: int
    memories_available: int
    """What is left for the memories section."""
    memories_tokens: int = 0
    """What the memories section took."""
    overflow: int = 0
    """Tokens by which directive + history + reserve + overhead alone exceed ``total``."""
    history_messages: int = 0
    """Messages counted in ``history`` (the newest ones, when :func:`plan_budget` trimmed)."""
    history_dropped: int = 0
    """Oldest messages left out so the fixed parts fit."""
    tier: str | None = None
    intent: Intent | None = None
    complexity: Complexity | None = None
    multiplier: float = 1.0
    selective: SelectiveBudget | None = None

    def with_memories_tokens(self, memories_tokens: int) -> Budget:
        return dataclasses.replace(self, memories_tokens=memories_tokens)

    @property
    def context_limit(self) -> int | None:
        """Most tokens the formatted block may take, or None when no overall limit was given."""
        if self.total is None:
            return None
        return max(0, self.total - self.reserve - self.overhead)


def directive_tokens(counter: TokenCounter, directive: str | None) -> int:
    """Directive cost: its formatted section or its system message, whichever is larger."""
    section = format_directive(directive)
    if not section:
        return 0
    as_message = counter.count_messages([(BLOCK_ROLE, directive or "")], prime_reply=False)
    return max(counter.count(section), as_message)


def history_tokens(counter: TokenCounter, history: Sequence[tuple[str, str]]) -> int:
    """History cost: its formatted section or its chat messages, whichever is larger."""
    if not history:
        return 0
    return max(counter.count(format_history(history)), counter.count_messages(history, prime_reply=False))


def envelope_tokens(counter: TokenCounter) -> int:
    """Chat framing of the block sent as one message, plus the reply priming."""
    return MESSAGE_OVERHEAD + counter.count(BLOCK_ROLE) + REPLY_PRIMING


def compute_budget(
    *,
    max_context_tokens: int | None,
    directive_tokens: int,
    history_tokens: int,
    reserve_tokens: int,
    overhead_tokens: int = 0,
    selective: SelectiveBudget | None = None,
    history_messages: int = 0,
    history_dropped: int = 0,
) -> Budget:
    """The budget from already measured parts. Needs ``max_context_tokens``, ``selective`` or both."""
    if max_context_tokens is None and selective is None:
        raise ValueError("need max_context_tokens, a selective budget, or both")
    for name, value in (
        ("max_context_tokens", max_context_tokens or 0),
        ("directive_tokens", directive_tokens),
        ("history_tokens", history_tokens),
        ("reserve_tokens", reserve_tokens),
        ("overhead_tokens", overhead_tokens),
    ):
        if value < 0:
            raise ValueError(f"{name} must not be negative")
    fixed = directive_tokens + history_tokens + reserve_tokens + overhead_tokens
    room: int | None = None
    overflow = 0
    if max_context_tokens is not None:
        room = max(0, max_context_tokens - fixed)
        overflow = max(0, fixed - max_context_tokens)
    if selective is None:
        assert room is not None
        available = room
    else:
        available = selective.final_tokens if room is None else min(selective.final_tokens, room)
    return Budget(
        mode="fixed" if selective is None else "selective",
        total=max_context_tokens,
        directive=directive_tokens,
        history=history_tokens,
        reserve=reserve_tokens,
        overhead=overhead_tokens,
        memories_available=available,
        overflow=overflow,
        history_messages=history_messages,
        history_dropped=history_dropped,
        tier=selective.tier.name if selective else None,
        intent=selective.intent if selective else None,
        complexity=selective.complexity if selective else None,
        multiplier=selective.multiplier if selective else 1.0,
        selective=selective,
    )


def fit_history(
    counter: TokenCounter, history: Sequence[tuple[str, str]], max_tokens: int
) -> tuple[tuple[tuple[str, str], ...], int]:
    """The newest messages whose cost (:func:`history_tokens`) fits ``max_tokens``, and how many
    of the oldest were left out. Messages are kept whole, never cut."""
    # Cost grows with every older message added, so the longest fitting suffix is found by
    # bisection: a handful of exact counts instead of one per message.
    lo, hi = 0, len(history)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if history_tokens(counter, history[len(history) - mid :]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return tuple(history[len(history) - lo :]), len(history) - lo


def plan_budget(
    counter: TokenCounter,
    *,
    directive: str | None,
    history: Sequence[tuple[str, str]],
    reserve_tokens: int,
    max_context_tokens: int | None = None,
    selective: SelectiveBudget | None = None,
    trim_history: bool = True,
) -> tuple[Budget, tuple[tuple[str, str], ...]]:
    """Measure the fixed parts and compute the budget; returns it with the history to format.

    With ``trim_history`` and a ``max_context_tokens``, the oldest messages are left out when the
    directive, the history, the reserve and the envelope would not fit otherwise (the count is in
    ``Budget.history_dropped``); the directive is never cut, so ``overflow`` can still be positive.
    """
    d_tokens = directive_tokens(counter, directive)
    overhead = envelope_tokens(counter)
    kept: tuple[tuple[str, str], ...] = tuple(history)
    dropped = 0
    if trim_history and max_context_tokens is not None:
        room = max_context_tokens - d_tokens - reserve_tokens - overhead
        if history_tokens(counter, kept) > room:
            kept, dropped = fit_history(counter, kept, max(0, room))
    budget = compute_budget(
        max_context_tokens=max_context_tokens,
        directive_tokens=d_tokens,
        history_tokens=history_tokens(counter, kept),
        reserve_tokens=reserve_tokens,
        overhead_tokens=overhead,
        selective=selective,
        history_messages=len(kept),
        history_dropped=dropped,
    )
    return budget, kept

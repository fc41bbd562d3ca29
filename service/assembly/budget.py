"""The token budget: what is left for memories once the fixed parts of the prompt are paid for.

::

    memories_available = total - directive - history - reserve - overhead      (never below 0)

* ``directive`` / ``history`` are measured as the larger of two ways the caller may send them:
  inside the formatted block (:mod:`service.assembly.format`) or as chat messages (per-message
  overhead, see :meth:`TokenCounter.count_messages`). Either way the memories still fit.
* ``reserve`` is kept free for the model's answer.
* ``overhead`` is the chat envelope of the block itself when sent as one system message
  (:data:`~service.text.tokens.MESSAGE_OVERHEAD` + the role + :data:`~service.text.tokens.REPLY_PRIMING`).
* The memories section's own open/close tags are charged by the packer against
  ``memories_available`` (only when something is packed), so a packed block always satisfies
  ``count(format_context(...)) <= total - reserve - overhead`` when the fixed parts fit at all;
  ``overflow`` says by how much they do not.

Selective mode takes the memory budget from :func:`~service.assembly.intent.plan_selective_budget`
and, when ``max_context_tokens`` is also given, caps it by what fits there (the last step of its
explanation, :meth:`Budget.cap_reason`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from service.assembly.format import (
    HISTORY_CLOSE,
    HISTORY_OPEN,
    format_directive,
    format_history,
    format_history_line,
)
from service.assembly.intent import Complexity, Intent, SelectiveBudget
from service.errors import Unprocessable
from service.text.tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, TokenCounter

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

    def cap_reason(self) -> str | None:
        """The step of ``budget.reasons`` in which ``max_context_tokens`` held a selective budget
        below its plan (None: it did not, or the budget is not selective)."""
        planned = None if self.selective is None else self.selective.final_tokens
        if planned is None or self.total is None or self.memories_available >= planned:
            return None
        return (f"max_context_tokens {self.total}: {planned} -> {self.memories_available}, what is left after the "
                f"directive ({self.directive}), the history ({self.history}), the reserve ({self.reserve}) and "
                f"the envelope ({self.overhead})")

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


@dataclass(frozen=True, slots=True)
class HistoryCost:
    """What the newest messages cost, each message counted once (:func:`measure_history`).

    By the exact join arithmetic of :mod:`service.assembly.format`, the history section of the
    newest ``n`` messages costs its tags plus the sum of their lines, and as chat messages the sum
    of their per-message costs: every suffix's :func:`history_tokens` is two prefix sums, so
    trimming needs no recount. Counting stops at the first message past ``limit``, so a huge
    history costs only what could ever be kept.
    """

    messages: int
    """Messages in the history (counted or not)."""
    limit: int | None
    """Counting stopped once the newest messages cost more than this (None: all counted)."""
    section_tags: int
    """Tokens of the history section's open and close tags."""
    line_sums: tuple[int, ...]
    """``line_sums[n]``: tokens of the newest ``n`` messages' lines in the section (``[0]`` is 0)."""
    message_sums: tuple[int, ...]
    """``message_sums[n]``: tokens of the newest ``n`` messages sent as chat messages."""

    @property
    def counted(self) -> int:
        return len(self.line_sums) - 1

    def section(self, n: int) -> int:
        """Tokens of the history section holding the newest ``n`` (counted) messages."""
        return self.section_tags + self.line_sums[n] if n else 0

    def cost(self, n: int) -> int:
        """:func:`history_tokens` of the newest ``n`` (counted) messages."""
        return max(self.section(n), self.message_sums[n])

    def fit(self, max_tokens: int) -> int:
        """The most newest messages whose cost fits ``max_tokens`` (which must not exceed ``limit``)."""
        if self.limit is not None and max_tokens > self.limit:
            raise ValueError(f"counted up to {self.limit} tokens, asked to fit {max_tokens}")
        n = 0
        while n < self.counted and self.cost(n + 1) <= max_tokens:  # costs only grow with n
            n += 1
        return n


def measure_history(counter: TokenCounter, history: Sequence[tuple[str, str]], limit: int | None = None) -> HistoryCost:
    """Count the history from its newest message back, stopping after the first message that takes
    the cost past ``limit`` (None: count every message)."""
    tags = counter.count(HISTORY_OPEN) + counter.count(HISTORY_CLOSE)
    line_sums, message_sums = [0], [0]
    for role, content in reversed(history):
        line_sums.append(line_sums[-1] + counter.count(format_history_line(role, content)))
        message_sums.append(message_sums[-1] + MESSAGE_OVERHEAD + counter.count(role) + counter.count(content))
        if limit is not None and max(tags + line_sums[-1], message_sums[-1]) > limit:
            break
    return HistoryCost(len(history), limit, tags, tuple(line_sums), tuple(message_sums))


def fit_history(
    counter: TokenCounter, history: Sequence[tuple[str, str]], max_tokens: int
) -> tuple[tuple[tuple[str, str], ...], int]:
    """The newest messages whose cost (:func:`history_tokens`) fits ``max_tokens``, and how many
    of the oldest were left out. Messages are kept whole, never cut."""
    kept = measure_history(counter, history, max_tokens).fit(max_tokens)
    return tuple(history[len(history) - kept :]), len(history) - kept


def history_limit(max_context_tokens: int | None, reserve_tokens: int, counter: TokenCounter) -> int | None:
    """Most history tokens that could fit whatever the directive (:func:`measure_history`'s ``limit``)."""
    if max_context_tokens is None:
        return None
    return max(0, max_context_tokens - reserve_tokens - envelope_tokens(counter))


def plan_budget(
    counter: TokenCounter,
    *,
    directive: str | None,
    history: Sequence[tuple[str, str]],
    reserve_tokens: int,
    max_context_tokens: int | None = None,
    selective: SelectiveBudget | None = None,
    trim_history: bool = True,
    measured: HistoryCost | None = None,
) -> tuple[Budget, tuple[tuple[str, str], ...]]:
    """Measure the fixed parts and compute the budget; returns it with the history to format.
    ``measured`` is the history's :func:`measure_history` when it was counted ahead (e.g. in a
    worker thread, with ``limit`` :func:`history_limit` or None); otherwise it is counted here.

    With ``trim_history`` and a ``max_context_tokens``, the oldest messages are left out when the
    directive, the history, the reserve and the envelope would not fit otherwise (the count is in
    ``Budget.history_dropped``); the directive is never cut, so ``overflow`` can still be positive.
    """
    d_tokens = directive_tokens(counter, directive)
    overhead = envelope_tokens(counter)
    trim = trim_history and max_context_tokens is not None
    if measured is None:
        measured = measure_history(counter, history, history_limit(max_context_tokens, reserve_tokens, counter)
                                   if trim else None)
    if measured.messages != len(history):
        raise ValueError("measured is the measure of another history")
    n = measured.counted
    if trim:
        assert max_context_tokens is not None
        room = max(0, max_context_tokens - d_tokens - reserve_tokens - overhead)
        if n < len(history) or measured.cost(n) > room:
            n = measured.fit(room)
    elif n < len(history):
        raise ValueError("an untrimmed history must be measured whole")
    budget = compute_budget(
        max_context_tokens=max_context_tokens,
        directive_tokens=d_tokens,
        history_tokens=measured.cost(n),
        reserve_tokens=reserve_tokens,
        overhead_tokens=overhead,
        selective=selective,
        history_messages=n,
        history_dropped=len(history) - n,
    )
    return budget, tuple(history[len(history) - n :])


def too_small(budget: Budget, window: int | None, counter: TokenCounter, *, asked: tuple[int | None, int | None],
              default_reserve: int) -> Unprocessable:
    """The 422 for a window (``max_context_tokens`` as budgeted) that the directive, the reserve and
    the chat envelope alone overflow. ``asked``: the request's ``max_context_tokens`` and
    ``reserve_tokens``; the message names the reserve's default when the request set none, which a
    first request meets without knowing it is there."""
    max_context_tokens, reserve_tokens = asked
    kept = (f"reserve_tokens defaults to {default_reserve} (kept free for the answer)" if reserve_tokens is None
            else f"reserve_tokens is {reserve_tokens}")
    needed = budget.directive + budget.reserve + budget.overhead
    return Unprocessable(
        f"max_context_tokens {max_context_tokens} is too small: {kept}; with the directive ({budget.directive} "
        f"tokens) and the chat envelope ({budget.overhead}) the context needs {needed} {counter.encoding_name} "
        f"tokens, {needed - (window or 0)} more than the {window} budgeted, even with every recent message left "
        "out. Send a larger max_context_tokens or a smaller reserve_tokens.",
        code="context_budget_too_small",
        details={"directive_tokens": budget.directive, "reserve_tokens": budget.reserve,
                 "overhead_tokens": budget.overhead, "max_context_tokens": window, "needed_tokens": needed,
                 "default_reserve_tokens": default_reserve})

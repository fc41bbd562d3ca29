"""Cutting one line longer than the L2 chunk bound into pieces (:func:`cut_line`).

A line of minified code, a CSV row or a paragraph written on one line can be far over the bound. It
is cut into consecutive pieces, each at most ``bound`` tokens as measured by ``count`` on its text,
whose concatenation is the line byte for byte; the line terminator (``"\\n"`` or ``"\\r\\n"``)
stays whole in the last piece.

A cut is made after whitespace or punctuation (``,``, ``;``, ``}``, ...) when there is one close
below the estimated bound that keeps the piece at least ``_MIN_FILL`` full, else at a character
boundary: never inside a surrogate pair or ``"\\r\\n"``, and, when possible, not before a combining
mark, a variation selector or a skin-tone modifier, nor around a zero-width joiner.

Counting stays linear in the line: characters per token are estimated (from the whole line's count,
then from each piece), a piece is cut at the estimate and verified with one count of its own text,
and shrunk in proportion when it is over — a piece costs a few counts of about ``bound`` tokens.
:func:`line_prefix` cuts the first piece alone: a bounded prefix of a line at the cost of one piece.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Final

CountTokens = Callable[[str], int]

_MIN_FILL: Final = 0.25
"""A piece is cut at a break (whitespace, punctuation) only if it keeps this share of the bound."""
_TARGET_FILL: Final = 0.95
"""Pieces are first cut at this share of the estimated bound: most then fit at the first count."""
_SPACES: Final = " \t\f\v\u3000"
_BREAKS: Final = (*_SPACES, ",", ";", "}", ")", "]", ">", "|", "&", "\u3001", "\u3002", "\uff0c", "\uff1b")
"""Characters a piece may end with, to keep words and tokens whole (closing brackets, not opening ones:
``f(a, b)`` is better cut after ``,`` than after ``(``)."""
_MIN_DENSITY_TOKENS: Final = 8
"""A piece of at least this many tokens sets the characters per token of the next (the density varies
along a line: the whole line's average can be several times off locally)."""
_GRAPHEME_LOOKBACK: Final = 32
"""How far back a character cut looks for a place that does not split a grapheme cluster."""
_NON_BREAKING: Final = frozenset({"Mn", "Mc", "Me"})


def cut_line(line: str, bound: int, count: CountTokens, tokens: int | None = None) -> list[str]:
    """``line`` as pieces of at most ``bound`` tokens (``[line]`` if it fits); ``"".join`` gives it back.

    ``tokens``: ``count(line)`` when the caller has it. A piece is over ``bound`` only when it is a
    single character that is (e.g. an emoji counted as several tokens against a bound of 1).
    """
    total = count(line) if tokens is None else tokens
    if total <= bound:
        return [line]
    per_token = len(line) / max(total, 1)
    pieces: list[str] = []
    pos = 0
    while pos < len(line):
        cut, n = _next_cut(line, pos, bound, count, per_token)
        pieces.append(line[pos:cut])
        if n >= min(_MIN_DENSITY_TOKENS, bound * _MIN_FILL):  # a few tokens say little about the density
            per_token = (cut - pos) / n
        pos = cut
    return pieces


def line_prefix(line: str, bound: int, count: CountTokens, tokens: int | None = None) -> str:
    """``line`` if it fits in ``bound`` tokens, else its first piece as cut by :func:`cut_line`, or ``""``
    when even that is over ``bound`` (a single character of more tokens than ``bound``).

    Costs what one piece costs — a few counts of about ``bound`` tokens, however long the line
    (``tokens``: ``count(line)`` when the caller has it, else the line is counted once).
    """
    total = count(line) if tokens is None else tokens
    if total <= bound:
        return line
    cut, n = _next_cut(line, 0, bound, count, len(line) / max(total, 1))
    return line[:cut] if 0 < n <= bound else ""


def _next_cut(line: str, pos: int, bound: int, count: CountTokens, per_token: float) -> tuple[int, int]:
    """Where the piece of ``line`` starting at ``pos`` ends, and its tokens (0 when it is the rest of
    the line, which is then not always counted). ``per_token``: the expected characters per token."""
    body = len(line) - (2 if line.endswith("\r\n") else 1 if line.endswith("\n") else 0)
    target = max(1, int(bound * per_token * _TARGET_FILL))
    rest = len(line) - pos
    hi = min(pos + target, body)
    # Only a remainder of about one piece is counted whole: counting every remainder would be
    # quadratic in the line.
    if hi <= pos or (rest <= 2 * target and count(line[pos:]) <= bound):
        return len(line), 0
    fill = max(1, int(bound * per_token * _MIN_FILL))
    while True:
        cut = _cut(line, pos, hi, min(pos + fill, hi))
        n = count(line[pos:cut])
        if n <= bound or hi <= pos + 1:
            return cut, n
        hi = pos + max(1, min(cut - pos - 1, int((cut - pos) * bound / n * _TARGET_FILL)))


def _cut(line: str, pos: int, hi: int, lo: int) -> int:
    """Where the piece starting at ``pos`` ends: after the last break in ``[lo, hi]``, else at ``hi``
    or the closest character boundary below it (``pos < lo <= hi <= len(line)``)."""
    ends = sorted({line.rfind(b, lo - 1, hi) + 1 for b in _BREAKS} - {0}, reverse=True)
    for p in ends:
        # Not before whitespace: "a, b" is cut after the space, so the next piece starts with a word.
        if (p == len(line) or line[p] not in _SPACES) and _soft_boundary(line, p):
            return p
    for p in range(hi, max(pos, hi - _GRAPHEME_LOOKBACK), -1):
        if _soft_boundary(line, p):
            return p
    for p in range(hi, pos, -1):
        if _hard_boundary(line, p):
            return p
    return pos + 2  # hi == pos + 1 is inside a surrogate pair or "\r\n": keep it whole


def _hard_boundary(line: str, p: int) -> bool:
    """Whether ``line`` may be cut before ``line[p]`` without breaking a code unit pair."""
    if p >= len(line):
        return True
    a, b = line[p - 1], line[p]
    return not (("\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff") or (a == "\r" and b == "\n"))


def _soft_boundary(line: str, p: int) -> bool:
    """Whether a cut before ``line[p]`` also keeps combining sequences and emoji sequences whole."""
    if not _hard_boundary(line, p):
        return False
    if p >= len(line):
        return True
    a, b = line[p - 1], line[p]
    if a == "\u200d" or b == "\u200d" or "\U0001f3fb" <= b <= "\U0001f3ff":
        return False
    if "\U0001f1e6" <= a <= "\U0001f1ff" and "\U0001f1e6" <= b <= "\U0001f1ff":
        return False  # regional indicators: a flag is two of them
    return unicodedata.category(b) not in _NON_BREAKING

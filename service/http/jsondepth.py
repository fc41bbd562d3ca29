"""A nesting-depth limit for JSON, checked on the raw text before anything decodes it.

Decoders and encoders (msgspec, ``json``, asyncpg's jsonb codec) recurse once per level, so a
document nested ~1,000 deep raises ``RecursionError`` (a 500) wherever it lands first. Every JSON the
service accepts -- request bodies, the ``metadata`` list filter, document cursors -- passes
``check_json_depth`` first and answers 400 ``validation_error`` instead, before any write.
"""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Final

from service.errors import BadRequest

MAX_JSON_DEPTH: Final = 32
"""Levels of ``[``/``{`` nesting allowed in any JSON the service accepts (a request body counts its
own top-level object, so ``metadata`` inside a body may nest ~30 levels)."""

# A string runs to its closing quote or, unterminated, to the end of the input, and nothing is given
# back once consumed (possessive): every start matches and every byte is read once, so hostile input
# (an unterminated string, runs of escaped quotes) costs linear time -- the first version of this
# pattern, ``"(?:[^"\\]+|\\.)*"``, backtracked exponentially on a 30-byte unterminated string.
_STRINGS: Final = re.compile(rb'"(?:[^"\\]++|\\.|\\\Z)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKETS: Final = re.compile(rb"[^\[\]{}]+")
_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(raw: bytes | str) -> int:
    """The deepest ``[``/``{`` nesting in ``raw`` (brackets inside strings do not count); no decoding."""
    data = raw.encode() if isinstance(raw, str) else raw
    brackets = _NOT_BRACKETS.sub(b"", _STRINGS.sub(b"", data))
    return max(accumulate(_STEP[c] for c in brackets), default=0)


def check_json_depth(raw: bytes | str, *, field: str = "body", limit: int = MAX_JSON_DEPTH) -> None:
    if json_depth(raw) > limit:
        raise BadRequest(f"{field} is JSON nested more than {limit} levels deep", code="validation_error",
                         details={"field": field, "max_depth": limit})

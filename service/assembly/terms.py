"""Words of a text as scoring sees them: words, stopwords and content terms.

Content terms (not stopwords, two characters or more, or one CJK character) measure how much a text
says per token (informativeness) and, without a query embedding, how much of the query a hot item
holds. Redundancy between candidates compares the same words (:mod:`service.assembly.redundancy`).
Memory texts recur from one request to the next, so the per-text results are cached by org and
text (:mod:`service.tenancy.orgscope`).
"""

from __future__ import annotations

import re
from typing import Final

from service.tenancy.orgscope import org_memo

_WORD = re.compile(r"\w+")
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{_CJK}]")
_CJK_PIECES = re.compile(f"[{_CJK}]|[^{_CJK}]+")
# For ASCII text, \w is exactly [0-9A-Za-z_]: every other byte becomes a space.
_ASCII_NON_WORD_TO_SPACE: Final = bytes(
    b if (chr(b).isalnum() and b < 128) or b == ord("_") else ord(" ") for b in range(256)
)


def _word_list(listing: str) -> frozenset[str]:
    return frozenset(listing.split())


STOPWORDS: Final = _word_list(
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further had has "
    "have having he her here hers herself him himself his how i if in into is it its itself just me "
    "more most my myself no nor not now of off on once only or other our ours ourselves out over own "
    "same she should so some such than that the their theirs them themselves then there these they "
    "this those through to too under until up very was we were what when where which while who whom "
    "why will with would you your yours yourself yourselves also may might must shall via per etc eg "
    "ie"
)


FEATURE_CACHE_MAX_CHARS: Final = 4096
"""Per-text results are cached for texts up to this many characters (longer ones are rare and large)."""


def words(text: str) -> list[str]:
    """Lowercased words; CJK ideographs and kana count one per character (no spaces to split on)."""
    if text.isascii():
        # The same words as the regex below, found by bytes.translate and split (~3x faster).
        return text.lower().encode("ascii").translate(_ASCII_NON_WORD_TO_SPACE).decode("ascii").split()
    found = _WORD.findall(text.lower())
    if _CJK_CHAR.search(text) is None:
        return found
    out: list[str] = []
    for w in found:
        if _CJK_CHAR.search(w) is None:
            out.append(w)
        else:
            out.extend(_CJK_PIECES.findall(w))
    return out


def content_words(distinct: set[str]) -> set[str]:
    """The content words of ``distinct`` (which it changes: stopwords are taken out of it)."""
    distinct -= STOPWORDS
    return {w for w in distinct if len(w) > 1 or _CJK_CHAR.match(w) is not None}


@org_memo(8192)
def content_term_count(text: str) -> int:
    """Distinct content words (see :func:`content_terms`); cached per org, memory texts recur per request."""
    return len(content_terms(text))


def _content_terms(text: str) -> frozenset[str]:
    return frozenset(content_words(set(words(text))))


_cached_content_terms = org_memo(4096)(_content_terms)


def content_terms(text: str) -> frozenset[str]:
    """Distinct words that carry content: not stopwords, two characters or more (or one CJK char).

    Cached for texts up to :data:`FEATURE_CACHE_MAX_CHARS` characters: hot-set texts are matched
    against the query on every request that has no query embedding."""
    return _content_terms(text) if len(text) > FEATURE_CACHE_MAX_CHARS else _cached_content_terms(text)


"""Words of a text as scoring and packing see them: content terms, similarity features and their hashes.

Content terms (not stopwords, two characters or more, or one CJK character) measure how much a text
says per token (informativeness) and, without a query embedding, how much of the query a hot item
holds; similarity features (content words plus adjacent word pairs) measure redundancy between
candidates (Jaccard, computed by the packer on the features' hashes). Memory texts recur from one
request to the next, so the per-text results are cached by org and text (:mod:`service.tenancy.orgscope`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import ClassVar, Final

import numpy as np
from numpy.typing import NDArray

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


def _content(distinct: set[str]) -> set[str]:
    distinct -= STOPWORDS
    return {w for w in distinct if len(w) > 1 or _CJK_CHAR.match(w) is not None}


@org_memo(8192)
def content_term_count(text: str) -> int:
    """Distinct content words (see :func:`content_terms`); cached per org, memory texts recur per request."""
    return len(content_terms(text))


def _content_terms(text: str) -> frozenset[str]:
    return frozenset(_content(set(words(text))))


_cached_content_terms = org_memo(4096)(_content_terms)


def content_terms(text: str) -> frozenset[str]:
    """Distinct words that carry content: not stopwords, two characters or more (or one CJK char).

    Cached for texts up to :data:`FEATURE_CACHE_MAX_CHARS` characters: hot-set texts are matched
    against the query on every request that has no query embedding."""
    return _content_terms(text) if len(text) > FEATURE_CACHE_MAX_CHARS else _cached_content_terms(text)


def similarity_features(text: str) -> frozenset[str]:
    """Content words plus adjacent word pairs, for Jaccard similarity."""
    ws = words(text)
    features = _content(set(ws))
    features.update(map(" ".join, itertools.pairwise(ws)))
    return frozenset(features)


FEATURE_CACHE_MAX_CHARS: Final = 4096


def _feature_hash_array(text: str) -> NDArray[np.int64]:
    ws = words(text)
    # The features of similarity_features, hashed without building the pair strings: a pair is
    # hashed as the tuple of its two words (words have no spaces, so "a b" <-> ("a", "b")).
    hashes = {hash(w) for w in _content(set(ws))}
    hashes.update(map(hash, itertools.pairwise(ws)))
    array = np.fromiter(hashes, dtype=np.int64, count=len(hashes))
    array.sort()
    return array


@org_memo(2048)
def _cached_feature_hashes(text: str) -> NDArray[np.int64]:
    hashes = _feature_hash_array(text)
    hashes.setflags(write=False)  # shared between calls through the cache
    return hashes


def feature_hashes(text: str) -> NDArray[np.int64]:
    """:func:`similarity_features` as distinct integer hashes (valid within this process only), sorted.

    Cached for texts up to :data:`FEATURE_CACHE_MAX_CHARS` characters, as memory texts recur
    (as an array: a few hundred bytes per text where a set of strings would take kilobytes).
    """
    if len(text) > FEATURE_CACHE_MAX_CHARS:
        return _feature_hash_array(text)
    return _cached_feature_hashes(text)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Reference definition (the packer computes the same thing); empty sets match nothing, the
    packer compares such texts for equality instead."""
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


class WordIndex:
    """Word features shared by one member with many others, vectorised.

    The members' feature hashes are laid end to end. A table over the hashes' low bits marks the
    chosen member's features; the few positions whose low bits are marked are then compared
    exactly, and counted per member. No vocabulary (hence no sort of every feature) is needed.
    """

    BUCKETS: ClassVar[int] = 1 << 14

    def __init__(self, per_member: Sequence[NDArray[np.int64]]) -> None:
        self.per_member = per_member
        self.n = len(per_member)
        self.sizes = np.array([h.size for h in per_member], dtype=np.int64)
        self.flat = np.concatenate(per_member) if per_member else np.zeros(0, dtype=np.int64)
        self.rows = np.repeat(np.arange(self.n), self.sizes)
        self.buckets = self.flat & (self.BUCKETS - 1)

    def shared_and_union(self, chosen: int, targets: list[int]) -> tuple[list[int], list[int]]:
        """Features ``chosen`` shares with each target and the size of their union (member rows)."""
        mine = self.per_member[chosen]  # sorted (see feature_hashes)
        rows = np.array(targets, dtype=np.intp)
        if mine.size:
            mark = np.zeros(self.BUCKETS, dtype=bool)
            mark[mine & (self.BUCKETS - 1)] = True
            maybe = np.flatnonzero(mark[self.buckets])
            values = self.flat[maybe]
            at = np.searchsorted(mine, values)
            at[at == mine.size] = 0
            exact = maybe[mine[at] == values]
            shared = np.bincount(self.rows[exact], minlength=self.n)[rows]
        else:
            shared = np.zeros(rows.size, dtype=np.int64)
        union = self.sizes[rows] + (mine.size - shared)
        return shared.tolist(), union.tolist()


class WordSimilarity:
    """Jaccard similarity over word features, for pairs where an embedding is missing.

    Features (:func:`feature_hashes`, cached across requests by text)
    are gathered the first time an item is compared, so items only ever compared by cosine never
    pay for them. A few targets are compared as Python sets; many at once (an item without an
    embedding was chosen, or none has one) through a :class:`WordIndex` of the items still in
    play, built on first need. Feature hashes only need to agree within this process; a 64-bit
    collision costs at most one feature's worth of similarity. Texts without features (a lone
    stopword, only punctuation) match only their equals.
    """

    SET_MAX_TARGETS: ClassVar[int] = 16
    """Above this many targets, one vectorised comparison beats a set intersection per target."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = texts
        self._hashes: list[NDArray[np.int64] | None] = [None] * len(texts)
        self._sets: dict[int, frozenset[int]] = {}
        self._index: WordIndex | None = None
        self._row: dict[int, int] = {}

    def _features(self, i: int) -> NDArray[np.int64]:
        hashes = self._hashes[i]
        if hashes is None:
            hashes = self._hashes[i] = feature_hashes(self.texts[i])
        return hashes

    def _set(self, i: int) -> frozenset[int]:
        hashes = self._sets.get(i)
        if hashes is None:
            hashes = self._sets[i] = frozenset(self._features(i).tolist())
        return hashes

    def against(self, chosen: int, targets: list[int], in_play: list[int]) -> list[float]:
        """Similarity of ``chosen`` to each of ``targets``; ``in_play``: every item that can still
        be compared (chosen now or later, or a target now or later)."""
        shared: list[int]
        union: list[int]
        if len(targets) > self.SET_MAX_TARGETS:
            if self._index is None:
                self._row = {k: row for row, k in enumerate(in_play)}
                self._index = WordIndex([self._features(k) for k in in_play])
            row = self._row
            shared, union = self._index.shared_and_union(row[chosen], [row[k] for k in targets])
        else:
            mine = self._set(chosen)
            shared, union = [], []
            for k in targets:
                theirs = self._set(k)
                common = len(mine & theirs)
                shared.append(common)
                union.append(len(mine) + len(theirs) - common)
        sims = [s / u if u > 0 else 0.0 for s, u in zip(shared, union, strict=True)]
        if self._features(chosen).size == 0:
            bare = self.texts[chosen].strip().casefold()
            for pos, k in enumerate(targets):
                if self._features(k).size == 0 and self.texts[k].strip().casefold() == bare:
                    sims[pos] = 1.0
        return sims

"""Candidate redundancy: how much a candidate repeats what is already chosen, and what is said about it.

The uniqueness component of a score is ``1 - max similarity`` to the items chosen so far (MMR). Scoring
gives every candidate uniqueness 1.0 and its unit embedding (:func:`unit_embeddings`); the packer,
after each choice, asks :meth:`Uniqueness.absorb` whose composite fell and who is a duplicate. This
module owns every part of that:

* **similarity** of two candidates: the cosine of their unit embeddings when both have one (of one
  dimension across the request), else Jaccard over word features — content words plus adjacent word
  pairs (:func:`similarity_features`; the pairs keep "A depends on B" apart from "B depends on A"),
  hashed (:func:`feature_hashes`, cached by org and text: memory texts recur from one request to the
  next) and compared many at once (:class:`WordIndex`). Texts without features (a lone stopword,
  only punctuation) match only their equals. Similarities are clipped to [0, 1];
* **uniqueness** as the packing goes (:class:`Uniqueness`): each candidate's max similarity, the
  chosen item it is most similar to, and its composite as it stands;
* **duplicates**: similarity to a chosen item above ``duplicate_cosine`` (embeddings) or
  ``duplicate_jaccard`` (word features) — the packer drops those (:func:`duplicate_detail`);
* what a **justification** says about it (:func:`overlap_of`): "overlaps 0.41 with [2]", named when
  uniqueness was lowered and it weighed among the top factors, always when it is below 0.7.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

import numpy as np
from numpy.typing import NDArray

from service.assembly.terms import FEATURE_CACHE_MAX_CHARS, content_words, words
from service.tenancy.orgscope import org_memo

FloatVector = NDArray[np.floating]

LOWERED_BELOW: Final = 0.999
"""Uniqueness below this counts as lowered: full uniqueness is the default state, not a reason."""
NAMED_BELOW: Final = 0.7
"""Uniqueness below this is always named in the justification."""


# -- similarity features -------------------------------------------------------------------------------


def similarity_features(text: str) -> frozenset[str]:
    """Content words plus adjacent word pairs, for Jaccard similarity."""
    ws = words(text)
    features = content_words(set(ws))
    features.update(map(" ".join, itertools.pairwise(ws)))
    return frozenset(features)


def _feature_hash_array(text: str) -> NDArray[np.int64]:
    ws = words(text)
    # The features of similarity_features, hashed without building the pair strings: a pair is
    # hashed as the tuple of its two words (words have no spaces, so "a b" <-> ("a", "b")).
    hashes = {hash(w) for w in content_words(set(ws))}
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

    Cached for texts up to :data:`~service.assembly.terms.FEATURE_CACHE_MAX_CHARS` characters, as
    memory texts recur (as an array: a few hundred bytes per text where a set of strings would take
    kilobytes).
    """
    if len(text) > FEATURE_CACHE_MAX_CHARS:
        return _feature_hash_array(text)
    return _cached_feature_hashes(text)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """Reference definition (:class:`WordSimilarity` computes the same thing); empty sets match
    nothing, the packer compares such texts for equality instead."""
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


# -- embeddings ----------------------------------------------------------------------------------------


def unit_embeddings(vectors: Sequence[FloatVector | None]) -> list[FloatVector | None]:
    """L2-normalised float32 copies, in one batch per dimension; zero or non-finite vectors -> None."""
    out: list[FloatVector | None] = [None] * len(vectors)
    by_dim: dict[int, tuple[list[int], list[FloatVector]]] = {}
    for i, vector in enumerate(vectors):
        if vector is not None:
            flat = np.asarray(vector, dtype=np.float32).ravel()
            rows, flats = by_dim.setdefault(flat.shape[0], ([], []))
            rows.append(i)
            flats.append(flat)
    for dim, (rows, flats) in by_dim.items():
        matrix = np.concatenate(flats).reshape(len(rows), dim)
        norms = np.sqrt(np.add.reduce(matrix * matrix, axis=1))  # np.linalg.norm(matrix, axis=1), less overhead
        usable = np.isfinite(norms) & (norms > 0)
        if usable.all():
            matrix /= norms[:, None]
        else:
            matrix[usable] /= norms[usable, None]
        for i, row, ok in zip(rows, matrix, usable.tolist(), strict=True):
            if ok:
                out[i] = row
    return out


# -- the similarity index and uniqueness of one packing run ----------------------------------------------


class SimilarityIndex:
    """Similarity of one candidate to others within one request: cosine where both have a unit
    embedding, word features otherwise.

    One row per candidate (zeros where there is none), each at its own index: cosines come from the
    same matrix-vector product whatever else is in the request. Mixed dimensions cannot be compared
    by cosine; words then decide for every pair.
    """

    def __init__(self, texts: Sequence[str], units: Sequence[FloatVector | None]) -> None:
        n = self.n = len(texts)
        self.words = WordSimilarity(texts)
        self.has_embedding = [u is not None for u in units]
        self.embeddings: NDArray[np.float32] | None = None
        self.without_embedding = list(range(n))
        dims = {u.shape[0] for u in units if u is not None}
        if len(dims) == 1:
            dim = dims.pop()
            rows = [i for i, has in enumerate(self.has_embedding) if has]
            stacked = np.concatenate([units[i] for i in rows]).reshape(len(rows), dim)
            if len(rows) == n:
                self.embeddings = stacked.astype(np.float32, copy=False)
            else:
                self.embeddings = np.zeros((n, dim), dtype=np.float32)
                self.embeddings[rows] = stacked
            self.without_embedding = [i for i, has in enumerate(self.has_embedding) if not has]
        else:
            self.has_embedding = [False] * n

    def against(self, chosen: int, targets: list[int], alive: list[bool]) -> tuple[list[float], list[bool]]:
        """Similarity of ``chosen`` to every candidate, by index (set for ``targets``, the candidates
        still in play, each marked ``alive``), and whether each was compared by cosine."""
        embeddings = self.embeddings
        if embeddings is not None and self.has_embedding[chosen]:
            # Against all rows, then indexed: cheaper than gathering the target rows first.
            sims = (embeddings @ embeddings[chosen]).tolist()
            by_cosine = self.has_embedding
            by_words = [k for k in self.without_embedding if alive[k]]
        else:
            sims = [0.0] * self.n
            by_cosine = [False] * self.n
            by_words = targets
        if by_words:
            in_play = [chosen, *targets]
            for k, sim in zip(by_words, self.words.against(chosen, by_words, in_play), strict=True):
                sims[k] = sim
        return sims, by_cosine


class Uniqueness:
    """Uniqueness of every candidate of one packing run against the items chosen so far (MMR).

    Plain lists rather than arrays: with ~100 candidates, per-call numpy overhead costs more than
    the arithmetic, and after each choice only the candidates it came close to need new scores.
    """

    def __init__(self, texts: Sequence[str], units: Sequence[FloatVector | None], composites: Sequence[float], *,
                 weight: float, duplicate_cosine: float, duplicate_jaccard: float) -> None:
        n = len(texts)
        self.index = SimilarityIndex(texts, units)
        self.weight = weight
        self.duplicate_cosine = duplicate_cosine
        self.duplicate_jaccard = duplicate_jaccard
        self.static = [c - weight for c in composites]
        """Composite without its uniqueness term (``composites`` are at uniqueness 1)."""
        self.max_sim = [0.0] * n
        self.similar_to = [-1] * n
        self.current = [c + weight * (1.0 - 0.0) for c in self.static]
        """``static + weight * (1 - max_sim)``, always computed so: composites as they stand, which
        only fall as items are chosen."""

    def uniqueness(self, i: int) -> float:
        return 1.0 - self.max_sim[i]

    def nearest(self, i: int) -> int | None:
        """The chosen item ``i`` is most similar to (None while nothing chosen is similar at all)."""
        j = self.similar_to[i]
        return j if j >= 0 else None

    def absorb(self, chosen: int, targets: list[int], alive: list[bool]) -> tuple[list[int], list[tuple[int, float]]]:
        """Raise the max similarity of every one of ``targets`` (the candidates still in play, each
        marked ``alive``) with ``chosen``, just chosen. Returns the targets whose composite fell (in
        order) and the duplicates of ``chosen`` among them, with their similarity."""
        sims, by_cosine = self.index.against(chosen, targets, alive)
        cosine_limit, words_limit = self.duplicate_cosine, self.duplicate_jaccard
        max_sim, similar_to, current, static, weight = (self.max_sim, self.similar_to, self.current, self.static,
                                                        self.weight)
        fell: list[int] = []
        duplicates: list[tuple[int, float]] = []
        for k in targets:
            sim = sims[k]
            if sim < 0.0:  # np.clip(sim, 0.0, 1.0)
                sim = 0.0
            elif sim > 1.0:
                sim = 1.0
            if sim > max_sim[k]:
                max_sim[k] = sim
                similar_to[k] = chosen
                current[k] = static[k] + weight * (1.0 - sim)
                fell.append(k)
            if sim > (cosine_limit if by_cosine[k] else words_limit):
                duplicates.append((k, sim))
        return fell, duplicates


# -- what is said about it -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Overlap:
    """A packed item's redundancy as its justification names it."""

    tag: str
    """Tag of the chosen item it is most similar to."""
    uniqueness: float

    @property
    def notable(self) -> bool:
        """Named whatever its weight in the composite."""
        return self.uniqueness < NAMED_BELOW

    def __str__(self) -> str:
        return f"overlaps {1 - self.uniqueness:.2f} with [{self.tag}]"


def overlap_of(uniqueness: float, similar_to: str | None) -> Overlap | None:
    """The overlap a justification can name: None unless a chosen item (tag ``similar_to``) lowered
    the uniqueness."""
    if similar_to is None or not uniqueness < LOWERED_BELOW:
        return None
    return Overlap(similar_to, uniqueness)


def duplicate_detail(similarity: float, tag: str, memory_id: str) -> str:
    """Why a duplicate was dropped: its similarity to the chosen item (tag and id) it repeats."""
    return f"similarity {similarity:.2f} to [{tag}] ({memory_id})"

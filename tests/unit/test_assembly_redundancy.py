"""Candidate redundancy (service.assembly.redundancy): similarity features, unit embeddings, the
similarity index, uniqueness as items are chosen, duplicates, and what justifications say about it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from service.assembly.redundancy import (
    Overlap,
    SimilarityIndex,
    Uniqueness,
    duplicate_detail,
    feature_hashes,
    jaccard,
    overlap_of,
    similarity_features,
    unit_embeddings,
)


def test_similarity_features_keep_word_order() -> None:
    assert "a depends" not in similarity_features("B depends on A")
    assert jaccard(similarity_features("A depends on B"), similarity_features("B depends on A")) < 0.85
    assert jaccard(frozenset(), frozenset()) == 0.0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "the", "of", "cat", "hat", "A", "日本", "x_1", " ", ", ", "\n"]), max_size=30),
    st.lists(st.sampled_from(["a", "b", "the", "of", "cat", "hat", "A", "日本", "x_1", " ", ", ", "\n"]), max_size=30),
)
def test_feature_hashes_count_like_similarity_features(left: list[str], right: list[str]) -> None:
    a, b = " ".join(left), " ".join(right)
    ha, hb = feature_hashes(a), feature_hashes(b)
    assert ha.tolist() == sorted(set(ha.tolist()))  # distinct and sorted
    assert ha.size == len(similarity_features(a))
    assert len(set(ha.tolist()) & set(hb.tolist())) == len(similarity_features(a) & similarity_features(b))


def test_unit_embeddings() -> None:
    units = unit_embeddings([np.array([3.0, 4.0]), None, np.zeros(2), np.array([1.0, 0.0, 0.0])])
    assert units[0] is not None and np.allclose(units[0], [0.6, 0.8])
    assert units[1] is None and units[2] is None
    assert units[3] is not None and np.allclose(units[3], [1.0, 0.0, 0.0])


def reference_unit_embeddings(vectors: Sequence[np.ndarray | None]) -> list[np.ndarray | None]:
    out: list[np.ndarray | None] = []
    for vector in vectors:
        if vector is None:
            out.append(None)
            continue
        flat = np.asarray(vector, dtype=np.float32).ravel()
        norm = np.linalg.norm(flat[None, :], axis=1)[0]
        out.append(flat / norm if np.isfinite(norm) and norm > 0 else None)
    return out


def test_unit_embeddings_are_exactly_the_normalised_vectors() -> None:
    rng = np.random.default_rng(11)
    vectors: list[np.ndarray | None] = [rng.normal(size=384).astype(np.float32) for _ in range(40)]
    vectors += [
        None,
        np.zeros(384, dtype=np.float32),
        np.full(384, np.nan, dtype=np.float32),
        np.full(384, np.inf, dtype=np.float32),
        rng.normal(size=384),  # float64 in, float32 out
        rng.normal(size=(1, 384)),
        rng.normal(size=7).astype(np.float32),
        np.full(384, 1e30, dtype=np.float32),  # squares overflow float32
    ]
    for order in (vectors, vectors[::-1], [v for v in vectors if v is not None and v.size == 384][:5]):
        with np.errstate(over="ignore"):
            got, want = unit_embeddings(order), reference_unit_embeddings(order)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert (g is None) == (w is None)
            if g is not None and w is not None:
                assert g.dtype == np.float32 and np.array_equal(g, w)


def test_uniqueness_follows_the_most_similar_chosen_item() -> None:
    units = unit_embeddings([np.array([1.0, 0.0]), np.array([0.8, 0.6]), np.array([0.0, 1.0]),
                             np.array([0.99, 0.141])])
    u = Uniqueness(["a", "b", "c", "d"], units, [0.9, 0.8, 0.7, 0.6], weight=0.2, duplicate_cosine=0.92,
                   duplicate_jaccard=0.85)
    alive = [False, True, True, True]
    fell, duplicates = u.absorb(0, [1, 2, 3], alive)
    assert fell == [1, 3]  # c is orthogonal to a: its composite stays
    assert [k for k, _ in duplicates] == [3] and duplicates[0][1] > 0.92
    assert np.isclose(u.uniqueness(1), 0.2) and u.nearest(1) == 0
    assert u.uniqueness(2) == 1.0 and u.nearest(2) is None
    assert np.isclose(u.current[1], 0.8 - 0.2 + 0.2 * 0.2) and u.current[2] == 0.7
    # A later, less similar choice does not raise what an earlier one set.
    alive[1] = alive[3] = False
    fell, duplicates = u.absorb(1, [2], alive)
    assert fell == [2] and duplicates == [] and u.nearest(2) == 1
    assert np.isclose(u.uniqueness(2), 0.4)


def test_words_decide_where_an_embedding_is_missing_or_dimensions_differ() -> None:
    texts = ["the invoice is issued monthly", "the invoice is issued monthly by billing", "backups kept for weeks"]
    want = [jaccard(similarity_features(texts[0]), similarity_features(t)) for t in texts[1:]]
    for units in ([None, None, None], [np.ones(4) / 2, None, np.ones(4) / 2],
                  unit_embeddings([np.ones(4), np.ones(3), np.ones(4)])):
        sims, by_cosine = SimilarityIndex(texts, units).against(0, [1, 2], [False, True, True])
        if units[0] is not None and units[2] is not None and len({u.shape for u in units if u is not None}) == 1:
            assert by_cosine == [True, False, True] and np.isclose(sims[2], 1.0)
            assert sims[1] == want[0]
        else:
            assert by_cosine == [False, False, False]
            assert sims[1:] == want


def test_texts_without_features_match_only_their_equals() -> None:
    texts = ["the and of", " THE AND OF ", "of the", "!!!"]
    sims, _ = SimilarityIndex(texts, [None] * 4).against(0, [1, 2, 3], [False, True, True, True])
    assert sims[1:] == [1.0, 0.0, 0.0]


def test_what_is_said_about_redundancy() -> None:
    assert overlap_of(0.5, None) is None
    assert overlap_of(0.9995, "2") is None  # full uniqueness is not a reason
    assert overlap_of(float("nan"), "2") is None
    lowered = overlap_of(0.8, "2")
    assert lowered == Overlap("2", 0.8) and not lowered.notable and str(lowered) == "overlaps 0.20 with [2]"
    named = overlap_of(0.35, "12")
    assert named is not None and named.notable and str(named) == "overlaps 0.65 with [12]"
    assert duplicate_detail(0.9512, "3", "m-1") == "similarity 0.95 to [3] (m-1)"

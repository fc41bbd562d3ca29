"""``hit_score``: a hit's evidence mapped to [0, 1] (service.retrieval.score)."""

from __future__ import annotations

import math

from service.retrieval.score import LEXICAL_HALF_SATURATION, hit_score, lexical_evidence, semantic_evidence


def test_lexical_evidence_saturates() -> None:
    assert lexical_evidence(None) == lexical_evidence(0.0) == lexical_evidence(-1.0) == 0.0
    assert lexical_evidence(LEXICAL_HALF_SATURATION) == 0.5
    values = [lexical_evidence(b) for b in (0.5, 2.0, 5.0, 10.0, 20.0, 80.0, 1e6)]
    assert values == sorted(values) and all(0.0 < v < 1.0 for v in values)
    assert lexical_evidence(math.inf) == lexical_evidence(math.nan) == 0.0


def test_semantic_evidence_is_the_cosine_clamped() -> None:
    assert semantic_evidence(0.42) == 0.42
    assert semantic_evidence(-0.3) == semantic_evidence(None) == semantic_evidence(math.nan) == 0.0
    assert semantic_evidence(1.0000001) == 1.0


def test_the_score_is_the_best_evidence_rounded() -> None:
    assert hit_score(None, None) == 0.0
    assert hit_score(10.0, 0.2) == 0.5
    assert hit_score(1.0, 0.61234567) == 0.6123
    assert hit_score(None, None, literal=1.0) == 1.0 and hit_score(None, None, literal=3.0) == 1.0
    assert hit_score(30.0, None) == 0.75

"""The cold search's step deadlines: halves of a short budget; of a caller's long one, the embedding
waits for most of it and the vector query after it never outlasts the search."""

from __future__ import annotations

import time

from service.assembly.cold import VECTOR_QUERY_MS, cold_step_timeouts
from service.retrieval.run import SearchRun
from service.settings import RetrievalSettings


def test_a_short_budget_is_split_in_halves() -> None:
    t = cold_step_timeouts(34)  # the default 40 ms deadline's cold budget
    assert (t.lexical_ms, t.embedding_ms, t.semantic_ms) == (32, 16, 16)


def test_a_long_budget_leaves_the_vector_query_its_share_and_the_embedding_the_rest() -> None:
    t = cold_step_timeouts(494)  # X-Timeout-Ms: 500
    assert t.lexical_ms == 492 and t.embedding_ms == 492 - VECTOR_QUERY_MS and t.semantic_ms == 246
    assert cold_step_timeouts(150).embedding_ms == 74  # halves until the rest exceeds a half


def test_a_step_after_another_gets_at_most_what_is_left_of_the_search() -> None:
    settings = RetrievalSettings()
    t = cold_step_timeouts(494)
    run = SearchRun(timeouts=t)
    assert run.left_ms("semantic", settings) == t.semantic_ms  # no deadline of its own: the step's
    run.deadline = time.perf_counter() + 0.050
    assert 40 <= run.left_ms("semantic", settings) <= 50
    run.deadline = time.perf_counter() - 1
    assert run.left_ms("semantic", settings) == 1

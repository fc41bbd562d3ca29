"""Request prices (service.tenancy.ratecost): what each part of a request adds, computed before its work runs."""

from __future__ import annotations

from service.settings import RateLimitSettings
from service.tenancy.ratecost import base_cost, work_cost

S = RateLimitSettings(rps=100, burst=200, heavy_cost=4, embed_chars_per_token=40, embed_max_chars=1000,
                      text_chars_per_token=400, body_bytes_per_token=16384)
SEARCH = ("POST", "/v1/memories/search")
ASSEMBLE = ("POST", "/v1/context/assemble")


def test_base_price_is_the_route_and_the_body_size() -> None:
    assert base_cost(S, "GET", "/v1/memories", 0) == 1
    assert base_cost(S, *SEARCH, 500) == 4
    assert base_cost(S, *ASSEMBLE, 6 * 16384 + 1) == 4 + 6  # a long history
    assert base_cost(S, *ASSEMBLE, 10**9) == 200  # never more than the bucket


def test_queries_pay_for_length_and_embedding_up_to_the_cut() -> None:
    assert work_cost(S, *SEARCH, {"query": "short one"}) == 0
    assert work_cost(S, *SEARCH, {"query": "q" * 800, "strategy": "hybrid"}) == 800 // 40 + 800 // 400
    assert work_cost(S, *SEARCH, {"query": "q" * 4000, "strategy": "semantic"}) == 1000 // 40 + 4000 // 400
    assert work_cost(S, *SEARCH, {"query": "q" * 4000, "strategy": "lexical"}) == 4000 // 400
    assert work_cost(S, *ASSEMBLE, {"query": "q" * 4000, "retrieval": {"strategy": "lexical"}}) == 10
    assert work_cost(S, *ASSEMBLE, {"query": "q" * 4000}) == 25 + 10  # auto embeds


def test_writes_pay_for_the_texts_the_service_embeds() -> None:
    batch = {"memories": [{"text": "t" * 2000}, {"text": "t" * 400, "embedding": [0.1] * 384}, {"text": "t" * 600}]}
    assert work_cost(S, "POST", "/v1/memories", batch) == (1000 + 600) // 400
    assert work_cost(S, "POST", "/v1/memories", {"text": "t" * 800}) == 2
    assert work_cost(S, "PATCH", "/v1/memories/{memory_id}", {"text": "t" * 800}) == 2
    assert work_cost(S, "PATCH", "/v1/memories/{memory_id}", {"importance": 0.5}) == 0
    append = ("POST", "/v1/conversations/{conversation_id}/messages")
    assert base_cost(S, *append, 100) == 4
    assert work_cost(S, *append, {"messages": [{"content": "t" * 2000}, {"content": "t" * 600}]}) == 1600 // 400


def test_unexpected_bodies_add_nothing() -> None:
    bodies: list[object] = [None, [], "x", {"query": 5}, {"memories": "x"}, {"memories": [1, None]}]
    for body in bodies:
        assert work_cost(S, *SEARCH, body) == 0
        assert work_cost(S, "POST", "/v1/memories", body) == 0
        assert work_cost(S, "POST", "/v1/conversations/{conversation_id}/messages", body) == 0

"""Fusion, the auto planner, the query cache and filter arguments: pure logic, no database."""

from __future__ import annotations

import re
from uuid import UUID, uuid4

import numpy as np
import pytest
from prometheus_client import REGISTRY

from service.memories.types import MessageRef
from service.retrieval import fusion
from service.retrieval.filters import filter_args, like_prefix
from service.retrieval.hits import Hit
from service.retrieval.planner import choose, looks_like_identifier_query
from service.retrieval.query_cache import QueryEmbeddingCache
from service.retrieval.run import SearchRun, fusion_depth, semantic_depth
from service.retrieval.speakers import SpeakerBoost
from service.retrieval.types import SearchFilters
from service.settings import load_settings


def hit(ident: UUID, score: float) -> Hit:
    return Hit(id=ident, text=str(ident), kind="fact", source=None, level=None, breadcrumb=None, score=score)


A, B, C, D = (uuid4() for _ in range(4))


def test_rrf_sums_reciprocal_ranks_and_keeps_both_ranks() -> None:
    lexical = [hit(A, 9.0), hit(B, 5.0), hit(C, 1.0)]
    semantic = [hit(B, 0.9), hit(D, 0.8), hit(A, 0.1)]
    out = fusion.rrf(lexical, semantic, k=60, limit=10)
    by_id = {r.id: r for r in out}
    assert by_id[B].final_score == pytest.approx(1 / 62 + 1 / 61)
    assert by_id[A].final_score == pytest.approx(1 / 61 + 1 / 63)
    assert out[0].id == B and out[1].id == A
    assert (by_id[B].lexical_rank, by_id[B].semantic_rank) == (2, 1)
    assert (by_id[B].lexical_score, by_id[B].semantic_score) == (5.0, 0.9)
    assert by_id[C].semantic_rank is None and by_id[D].lexical_rank is None
    assert all(r.fusion_method == "rrf" for r in out)
    assert [r.final_score for r in out] == sorted((r.final_score for r in out), reverse=True)


def test_rrf_limit_and_deterministic_ties() -> None:
    out = fusion.rrf([hit(A, 1.0)], [hit(B, 1.0)], k=60, limit=1)
    assert len(out) == 1
    assert fusion.rrf([hit(A, 1.0)], [hit(B, 1.0)], k=60, limit=2) == fusion.rrf(
        [hit(A, 1.0)], [hit(B, 1.0)], k=60, limit=2)


def test_convex_normalises_each_branch() -> None:
    lexical = [hit(A, 20.0), hit(B, 10.0)]
    semantic = [hit(B, 0.9), hit(C, 0.5)]
    out = fusion.convex(lexical, semantic, alpha=0.5, limit=10)
    scores = {r.id: r.final_score for r in out}
    assert scores[A] == pytest.approx(0.5)  # lexical max, absent from semantic
    assert scores[B] == pytest.approx(0.5)  # lexical min, semantic max
    assert scores[C] == pytest.approx(0.0)
    assert fusion.convex(lexical, semantic, alpha=1.0, limit=1)[0].id == B
    assert fusion.convex(lexical, [], alpha=0.5, limit=5)[0].id == A


def ids(n: int) -> list[UUID]:
    return [uuid4() for _ in range(n)]


def test_zscore_counts_standard_deviations_above_each_branch_minimum() -> None:
    lex_ids, sem_ids = ids(5), ids(5)
    shared = lex_ids[0]
    lexical = [hit(i, s) for i, s in zip(lex_ids, [9.0, 7.0, 5.0, 3.0, 1.0], strict=True)]  # mean 5, sd sqrt(8)
    semantic = [hit(i, s) for i, s in zip([shared, *sem_ids[1:]], [0.8, 0.6, 0.6, 0.6, 0.4], strict=True)]
    sem_sd = (sum((v - 0.6) ** 2 for v in (0.8, 0.6, 0.6, 0.6, 0.4)) / 5) ** 0.5  # mean 0.6
    out = {r.id: r for r in fusion.zscore(lexical, semantic, semantic_weight=0.4, limit=20)}
    assert out[shared].final_score == pytest.approx(0.6 * 8 / 8 ** 0.5 + 0.4 * 0.4 / sem_sd)
    assert out[lex_ids[1]].final_score == pytest.approx(0.6 * 6 / 8 ** 0.5)  # absent from semantic: 0 there
    assert out[sem_ids[1]].final_score == pytest.approx(0.4 * 0.2 / sem_sd)
    assert out[lex_ids[4]].final_score == 0.0 and out[sem_ids[4]].final_score == 0.0  # each branch's weakest
    assert all(r.fusion_method == "zscore" for r in out.values())
    # Same order as plain z-scores ((s - mean) / sd) with a missing row given its branch's minimum:
    # the shift per branch is a constant.
    assert out[shared].final_score > out[lex_ids[1]].final_score > out[sem_ids[1]].final_score


def test_zscore_is_scale_free_per_branch() -> None:
    lex_ids, sem_ids = ids(6), ids(6)
    lexical = [hit(i, s) for i, s in zip(lex_ids, [12.0, 11.0, 4.0, 3.0, 2.0, 1.0], strict=True)]
    semantic = [hit(i, s) for i, s in zip(sem_ids, [0.9, 0.5, 0.45, 0.4, 0.35, 0.3], strict=True)]
    scaled = [hit(h.id, h.score * 1000 + 7) for h in lexical]  # another BM25 scale: same standard scores
    first = fusion.zscore(lexical, semantic, semantic_weight=0.4, limit=12)
    second = fusion.zscore(scaled, semantic, semantic_weight=0.4, limit=12)
    assert [r.id for r in first] == [r.id for r in second]
    assert [r.final_score for r in first] == pytest.approx([r.final_score for r in second])


def test_auto_fusion_uses_zscores_when_both_branches_can_be_standardised() -> None:
    lexical = [hit(i, 10.0 - n) for n, i in enumerate(ids(6))]
    semantic = [hit(i, 0.9 - n / 10) for n, i in enumerate(ids(5))]
    results, reason = fusion.auto(lexical, semantic, rrf_k=60, limit=10)
    assert results == fusion.zscore(lexical, semantic, semantic_weight=fusion.ZSCORE_SEMANTIC_WEIGHT, limit=10)
    # 6 evenly spaced scores: the best is 1.46 sd above their mean; 5: 1.41 sd
    assert reason == ("fusion zscore (semantic weight 0.4): best hit 1.5 sd above the lexical candidates' mean, "
                      "1.4 sd above the semantic ones'")


@pytest.mark.parametrize(("lexical_scores", "semantic_scores", "why"), [
    ([3.0, 2.0, 1.0], [0.9, 0.8, 0.7, 0.6, 0.5], "the lexical branch returned 3 candidates (z-scores need 5)"),
    ([], [0.9, 0.8, 0.7, 0.6, 0.5], "the lexical branch returned 0 candidates (z-scores need 5)"),
    ([5.0, 4.0, 3.0, 2.0, 1.0], [0.5] * 6, "the semantic branch scored all 6 candidates alike"),
])
def test_auto_fusion_falls_back_to_rrf_and_says_why(lexical_scores: list[float], semantic_scores: list[float],
                                                    why: str) -> None:
    lexical = [hit(i, s) for i, s in zip(ids(len(lexical_scores)), lexical_scores, strict=True)]
    semantic = [hit(i, s) for i, s in zip(ids(len(semantic_scores)), semantic_scores, strict=True)]
    results, reason = fusion.auto(lexical, semantic, rrf_k=30, limit=10)
    assert reason == f"fusion rrf (k 30): {why}"
    assert results == fusion.rrf(lexical, semantic, k=30, limit=10)
    with pytest.raises(ValueError, match=re.escape(why)):
        fusion.zscore(lexical, semantic, semantic_weight=0.4, limit=10)


def spoken(ident: UUID, score: float, speaker: object) -> Hit:
    return Hit(id=ident, text=str(ident), kind="episode", source=None, level=None, breadcrumb=None, score=score,
               metadata={"speaker": speaker})


def test_auto_fusion_ranks_up_the_candidates_said_by_someone_the_query_names() -> None:
    mel, car = ids(6), ids(6)
    # Caroline's turns score a little higher in both branches (they mention Melanie); Melanie's are hers.
    lexical = [spoken(i, 10.0 - n, "Caroline") for n, i in enumerate(car)] + [
        spoken(i, 9.5 - n, "Melanie") for n, i in enumerate(mel)]
    semantic = [spoken(i, 0.8 - n / 20, "Caroline") for n, i in enumerate(car)] + [
        spoken(i, 0.78 - n / 20, "Melanie") for n, i in enumerate(mel)]
    plain, plain_reason = fusion.auto(lexical, semantic, rrf_k=60, limit=12)
    assert plain[0].id == car[0] and "names" not in plain_reason
    boost = SpeakerBoost("speaker", 1.0)
    results, reason = fusion.auto(lexical, semantic, rrf_k=60, limit=12,
                                  query="What activities does melanie partake in?", speaker=boost)
    assert results[0].id == mel[0]
    by_id = {r.id: r for r in results}
    unboosted = {r.id: r for r in plain}
    assert by_id[mel[3]].final_score == pytest.approx(unboosted[mel[3]].final_score + 1.0)  # in the fusion's sd
    assert by_id[car[3]].final_score == pytest.approx(unboosted[car[3]].final_score)
    assert reason == plain_reason + "; 6 candidates said by someone the query names (speaker or metadata.speaker) +1 sd"
    # No name in the query, a boost of 0, or RRF (ranks have no unit to add it in): as without it.
    for query, speaker in (("What activities does she partake in?", boost),
                           ("Melanie's hobbies?", SpeakerBoost("speaker", 0.0)),
                           ("Melanie's hobbies?", SpeakerBoost("", 1.0))):
        assert fusion.auto(lexical, semantic, rrf_k=60, limit=12, query=query, speaker=speaker) == (
            plain, plain_reason)
    # A query in the first person: the messages of other roles than user (not the asker's own) lose
    # the boost, after their neighbours' support is counted.
    mine = [Hit(id=h.id, text=h.text, kind="message", source=None, level=None, breadcrumb=None, score=h.score,
                message=MessageRef(conversation_id="c", position=n, session_id=None, speaker=None,
                                   role="user" if h.id in mel else "assistant", message_id=None))
            for n, h in enumerate(lexical)]
    by_vector = {h.id: h.score for h in semantic}
    mine_semantic = [Hit(id=h.id, text=h.text, kind="message", source=None, level=None, breadcrumb=None,
                         score=by_vector[h.id], message=h.message) for h in mine]
    results, reason = fusion.auto(mine, mine_semantic, rrf_k=60, limit=12, query="What activities do I do?",
                                  speaker=boost)
    assert results[0].id == mel[0]
    assert reason.endswith("; asked in the first person: 6 messages of other roles than user -1 sd"), reason
    unlowered, _ = fusion.auto(mine, mine_semantic, rrf_k=60, limit=12, query="What activities do they do?",
                               speaker=boost)
    before = {r.id: r.final_score for r in unlowered}
    assert {r.id: r.final_score for r in results} == {
        i: pytest.approx(score - (1.0 if i in car else 0.0)) for i, score in before.items()}
    # In the second person, the other side's: the user's messages lose it.
    results, reason = fusion.auto(mine, mine_semantic, rrf_k=60, limit=12, query="What activities do you do?",
                                  speaker=boost)
    assert reason.endswith("; asked in the second person: 6 messages of other roles than assistant -1 sd"), reason
    assert {r.id: r.final_score for r in results} == {
        i: pytest.approx(score - (1.0 if i in mel else 0.0)) for i, score in before.items()}
    few = lexical[:3]
    assert fusion.auto(few, semantic, rrf_k=60, limit=12, query="Melanie?", speaker=boost) == fusion.auto(
        few, semantic, rrf_k=60, limit=12)


def turn(ident: UUID, score: float, position: int, *, conversation: str = "c", session: str | None = "1") -> Hit:
    ref = MessageRef(conversation_id=conversation, position=position, session_id=session, speaker=None, role="user",
                     message_id=None)
    return Hit(id=ident, text=str(ident), kind="message", source=None, level=None, breadcrumb=None, score=score,
               message=ref)


def test_auto_fusion_adds_a_share_of_the_best_neighbours_score_to_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    t = ids(8)
    # Turns 10-12 of one session, 20 alone, 13 in another session, 14 in another conversation, one plain memory.
    lexical = [turn(t[0], 9.0, 11), turn(t[1], 7.0, 10), turn(t[2], 5.0, 12), turn(t[3], 6.0, 20),
               turn(t[4], 8.0, 13, session="2"), turn(t[5], 8.5, 12, conversation="other"), hit(t[6], 4.0)]
    semantic = [hit(t[7], 0.9), *(turn(h.id, 0.5, h.message.position, conversation=h.message.conversation_id,
                                       session=h.message.session_id) if h.message else hit(h.id, 0.5)
                                  for h in lexical)]
    lex, sem = fusion._Spread.of(lexical), fusion._Spread.of(semantic)
    own = {h.id: 0.6 * lex.above_low(h.score) + 0.4 * sem.above_low(0.5) for h in lexical}
    results, reason = fusion.auto(lexical, semantic, rrf_k=60, limit=10)
    got = {r.id: r.final_score for r in results}
    w = fusion.NEIGHBOUR_WEIGHT
    # 10 and 12 lean on 11; 11 on the better of 10 and 12, as they scored before any support.
    assert got[t[1]] == pytest.approx(own[t[1]] + w * own[t[0]])
    assert got[t[2]] == pytest.approx(own[t[2]] + w * own[t[0]])
    assert got[t[0]] == pytest.approx(own[t[0]] + w * own[t[1]])
    # No neighbour among the candidates, another session or conversation, or not a message: as fused.
    for k in (3, 4, 5, 6):
        assert got[t[k]] == pytest.approx(own[t[k]])
    assert got[t[7]] == pytest.approx(0.4 * sem.above_low(0.9))
    assert reason.endswith(f"; 3 messages +{w:g} of their best neighbour's score")
    # Without messages among the candidates nothing changes and the reason does not mention it.
    plain_lexical = [hit(h.id, h.score) for h in lexical]
    plain_semantic = [hit(h.id, h.score) for h in semantic]
    plain = fusion.auto(plain_lexical, plain_semantic, rrf_k=60, limit=10)
    assert "neighbour" not in plain[1]
    monkeypatch.setattr(fusion, "NEIGHBOUR_WEIGHT", 0.0)
    assert fusion.auto(plain_lexical, plain_semantic, rrf_k=60, limit=10) == plain


def test_cascade_orders_by_vector_and_keeps_lexical_rank() -> None:
    lexical = [hit(A, 3.0), hit(B, 2.0), hit(C, 1.0)]
    by_vector = [hit(C, 0.9), hit(A, 0.4)]
    out = fusion.cascade(lexical, by_vector, limit=5)
    assert [r.id for r in out] == [C, A]
    assert out[0].lexical_rank == 3 and out[0].semantic_rank == 1 and out[0].fusion_method == "cascade"


def test_single_branch_uses_its_own_score() -> None:
    out = fusion.single([hit(A, 0.9), hit(B, 0.3)], branch="semantic", method="none", limit=1)
    assert len(out) == 1 and out[0].semantic_rank == 1 and out[0].lexical_rank is None
    assert out[0].final_score == 0.9 and out[0].fusion_method == "none"


@pytest.mark.parametrize(("query", "filters", "embedder_ok", "expected"), [
    ("how do I configure the database pool", SearchFilters(), True, "hybrid"),
    ("When did Caroline go to the LGBTQ support group?", SearchFilters(), True, "hybrid"),
    ("how do I configure the database pool", SearchFilters(), False, "lexical"),
    ('the "exact phrase" please', SearchFilters(), True, "lexical"),
    ("service/settings.py", SearchFilters(), True, "lexical"),
    ("parse_config", SearchFilters(), True, "lexical"),
    ("getUserName usage", SearchFilters(), True, "lexical"),
    ("what did we decide", SearchFilters(source_prefix="docs/"), True, "lexical_first"),
    ("what did we decide", SearchFilters(agent_id="a1", kinds=["fact"]), True, "hybrid"),
])
def test_auto_planner(query: str, filters: SearchFilters, embedder_ok: bool, expected: str) -> None:
    plan = choose(query, filters, embedder_available=embedder_ok)
    assert plan.strategy == expected and plan.reason.startswith("auto:")


def test_auto_planner_sheds_a_busy_embedder() -> None:
    plan = choose("how do I configure the database pool", SearchFilters(), embedder_available=True,
                  embedder_busy=True)
    assert plan.strategy == "lexical" and "busy" in plan.reason
    assert choose("parse_config", SearchFilters(), embedder_available=True, embedder_busy=False).strategy == "lexical"


def test_identifier_detection_ignores_long_prose() -> None:
    assert not looks_like_identifier_query("the user mentioned parse_config while we were discussing lunch plans")
    assert not looks_like_identifier_query("coffee preferences")


def test_identifier_detection_reads_a_words_first_256_characters() -> None:
    """An identifier is found in the start of a word; a pasted 4,000-digit token is read no further (the
    patterns' time grows with the square of what they read)."""
    assert looks_like_identifier_query("see " + "a" * 250 + "_b")
    assert not looks_like_identifier_query("see " + "a" * 260 + "_b")
    assert not looks_like_identifier_query("1" * 4000)


def lookups(outcome: str) -> float:
    return REGISTRY.get_sample_value("pgcontext_query_embedding_cache_total", {"outcome": outcome}) or 0.0


def test_query_cache_is_a_bounded_lru() -> None:
    org = uuid4()
    hit, miss = lookups("hit"), lookups("miss")
    cache = QueryEmbeddingCache(2)
    a, b, c = (np.full(3, i, dtype=np.float32) for i in range(3))
    cache.put(org, "a", a)
    cache.put(org, "b", b)
    assert cache.get(org, "a") is a  # touch: "b" is now the oldest
    cache.put(org, "c", c)
    assert cache.get(org, "b") is None and cache.get(org, "a") is a and cache.get(org, "c") is c and len(cache) == 2
    assert (cache.hits, cache.misses) == (3, 1)
    assert (lookups("hit") - hit, lookups("miss") - miss) == (3, 1)  # /metrics counts them too
    disabled = QueryEmbeddingCache(0)
    disabled.put(org, "a", a)
    assert disabled.get(org, "a") is None


def test_query_cache_is_per_org() -> None:
    org_a, org_b = uuid4(), uuid4()
    cache = QueryEmbeddingCache(8)
    vector = np.ones(3, dtype=np.float32)
    cache.put(org_a, "coffee", vector)
    assert cache.get(org_b, "coffee") is None and cache.peek(org_b, "coffee") is None
    assert cache.get(org_a, "coffee") is vector


def test_source_prefix_is_literal() -> None:
    assert like_prefix("docs/50%_off\\") == "docs/50\\%\\_off\\\\%"
    args = filter_args(SearchFilters(agent_id="x", levels=[1], source_prefix="a_b"))
    assert args == ("x", None, None, None, None, "a\\_b%", [1], None, None)


def test_retrieval_settings_from_env() -> None:
    s = load_settings({"PGCONTEXT_RETRIEVAL_BRANCH_DELAY_MS": "25", "PGCONTEXT_RETRIEVAL_EF_SEARCH": "64",
                       "PGCONTEXT_RETRIEVAL_EMBEDDING_TIMEOUT_MS": "300"}).retrieval
    assert (s.branch_delay_ms, s.ef_search, s.embedding_timeout_ms) == (25, 64, 300)
    assert load_settings({}).retrieval.branch_delay_ms == 0


def test_an_assemblys_semantic_branch_ranks_half_the_depth() -> None:
    """A search ranks each branch twice ``limit`` deep (at least the candidates asked for); an assembly's
    lexical branch ``limit`` deep and its semantic branch half that, at least 20 rows."""
    search, assembly = SearchRun(), SearchRun(rows_scope=("agent", True, False))
    assert (fusion_depth(50, 60, search), semantic_depth(50, 60, search)) == (120, 120)
    assert (fusion_depth(50, 60, assembly), semantic_depth(50, 60, assembly)) == (60, 30)
    assert (fusion_depth(10, 20, assembly), semantic_depth(10, 20, assembly)) == (20, 20)
    assert semantic_depth(50, 45, assembly) == 25  # the candidates' floor of 50, halved and rounded up

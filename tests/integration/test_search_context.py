"""Search context (``search_context``) over HTTP on real Postgres + Redis: set on create, batch and
PATCH, returned by GET and list, validated (400/413); lexical search matches its words (weighted
below the text's), context assembly never packs it; the lexical index stays exact through create,
PATCH and delete; another org neither sees nor changes any of it."""

from __future__ import annotations

import math
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client
from tests.integration.test_memories_api import assert_error, create, list_all

QUESTION = "Melanie: What do you do to unwind after a long week?"
REPLY = "Caroline: I'm off to go swimming with the kids."


async def lexical(client: AsyncTestClient[Any], tenant: Tenant, query: str) -> list[str]:
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": query, "strategy": "lexical", "limit": 10})
    assert r.status_code == 200, r.text
    return [hit["id"] for hit in r.json()["results"]]


async def index_drift(owner_dsn: str, tenant: Tenant) -> dict[str, int]:
    """Differences between the org's lexical index (postings, df counters, length stats) and what the
    memories' text and context give when recomputed from scratch: all zero when the triggers kept up."""
    conn = await asyncpg.connect(owner_dsn)
    try:
        row = await conn.fetchrow(
            """
            WITH m AS (SELECT id, tsv, to_tsvector('english', coalesce(search_context, '')) AS ctx
                         FROM memories WHERE org_id = $1),
                 want AS (SELECT id, term, sum(tf) AS tf, sum(ctx_tf) AS ctx_tf
                            FROM (SELECT m.id, l.lexeme AS term, coalesce(cardinality(l.positions), 1) AS tf,
                                         0 AS ctx_tf FROM m CROSS JOIN LATERAL unnest(m.tsv) AS l
                                  UNION ALL
                                  SELECT m.id, l.lexeme, 0, coalesce(cardinality(l.positions), 1)
                                    FROM m CROSS JOIN LATERAL unnest(m.ctx) AS l) AS x GROUP BY 1, 2),
                 have AS (SELECT memory_id AS id, term, tf, ctx_tf FROM memory_postings WHERE org_id = $1),
                 df_want AS (SELECT term, count(*) AS df FROM want GROUP BY 1),
                 df_have AS (SELECT term, sum(df) AS df FROM memory_term_df WHERE org_id = $1
                              GROUP BY 1 HAVING sum(df) <> 0)
            SELECT (SELECT count(*) FROM (SELECT * FROM want EXCEPT SELECT * FROM have
                                          UNION ALL (SELECT * FROM have EXCEPT SELECT * FROM want)) AS d) AS postings,
                   (SELECT count(*) FROM (SELECT * FROM df_want EXCEPT SELECT * FROM df_have
                                          UNION ALL (SELECT * FROM df_have EXCEPT SELECT * FROM df_want)) AS d) AS df,
                   (SELECT coalesce(sum(ctx_tf), 0) FROM want)
                     - (SELECT coalesce(sum(ctx_total_len), 0) FROM memory_lex_stats WHERE org_id = $1) AS ctx_len,
                   (SELECT coalesce(sum(tf), 0) FROM want)
                     - (SELECT coalesce(sum(total_len), 0) FROM memory_lex_stats WHERE org_id = $1) AS text_len,
                   (SELECT count(*) FROM m)
                     - (SELECT coalesce(sum(n_docs), 0) FROM memory_lex_stats WHERE org_id = $1) AS docs
            """, tenant.org_id)
        return dict(row)
    finally:
        await conn.close()


async def test_set_on_create_batch_and_patch_and_returned(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    (plain,) = await create(client, tenant, {"text": "The user prefers green tea."})
    assert (await client.get(f"/v1/memories/{plain}", headers=tenant.headers)).json()["search_context"] is None
    (single,) = await create(client, tenant, {"text": REPLY, "search_context": QUESTION})
    batch = await create(client, tenant, {"memories": [{"text": QUESTION},
                                                       {"text": REPLY, "search_context": QUESTION}]})
    listed = {m["id"]: m for m in await list_all(client, tenant)}
    assert listed[single]["search_context"] == QUESTION and listed[batch[1]]["search_context"] == QUESTION
    assert listed[batch[0]]["search_context"] is None

    r = await client.patch(f"/v1/memories/{single}", json={"search_context": "Did you see the lake?"},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["search_context"] == "Did you see the lake?" and r.json()["text"] == REPLY
    r = await client.patch(f"/v1/memories/{single}", json={"importance": 0.9}, headers=tenant.headers)
    assert r.json()["search_context"] == "Did you see the lake?"  # a PATCH that does not name it leaves it
    r = await client.patch(f"/v1/memories/{single}", json={"search_context": None}, headers=tenant.headers)
    assert r.json()["search_context"] is None
    assert (await client.get(f"/v1/memories/{single}", headers=tenant.headers)).json()["search_context"] is None


@pytest.mark.parametrize(("value", "status"), [("a\x00b", 400), (12, 400), (["x"], 400), (None, 413)])
async def test_bad_values_are_4xx(client: AsyncTestClient[Any], tenant: Tenant, settings: Settings,
                                  value: object, status: int) -> None:
    """None stands for one character more than the text limit (413, as for ``text``)."""
    value = "x" * (settings.limits.max_text_chars + 1) if value is None else value
    r = await client.post("/v1/memories", json={"text": REPLY, "search_context": value}, headers=tenant.headers)
    assert_error(r, status)
    r = await client.post("/v1/memories", json={"memories": [{"text": REPLY, "search_context": value}]},
                          headers=tenant.headers)
    assert_error(r, status)
    (mid,) = await create(client, tenant, {"text": REPLY})
    if not isinstance(value, int):  # Litestar decodes PATCH bodies laxly (a number becomes a string there)
        r = await client.patch(f"/v1/memories/{mid}", json={"search_context": value}, headers=tenant.headers)
        assert_error(r, status)


async def test_lexical_search_matches_the_context_below_the_text(client: AsyncTestClient[Any], tenant: Tenant,
                                                                 owner_dsn: str) -> None:
    (reply,) = await create(client, tenant, {"text": REPLY, "search_context": QUESTION})
    (other,) = await create(client, tenant, {"text": "Melanie: Painting helps me unwind on Sundays."})
    await create(client, tenant, {"text": "Caroline: The adoption agency called back today."})
    # "unwind" is in the reply's context only: found, ranked below the memory that says it.
    assert await lexical(client, tenant, "How do you unwind?") == [other, reply]
    assert await lexical(client, tenant, "swimming kids") == [reply]

    # A PATCH of the context re-indexes it; clearing it leaves only the text's words.
    await client.patch(f"/v1/memories/{reply}", json={"search_context": "Any plans for the weekend?"},
                       headers=tenant.headers)
    assert reply not in await lexical(client, tenant, "unwind")
    assert reply in await lexical(client, tenant, "weekend plans")
    await client.patch(f"/v1/memories/{reply}", json={"search_context": None}, headers=tenant.headers)
    assert await lexical(client, tenant, "weekend plans") == []
    assert await index_drift(owner_dsn, tenant) == {"postings": 0, "df": 0, "ctx_len": 0, "text_len": 0, "docs": 0}
    # A text PATCH keeps the context indexed, and a delete removes both.
    await client.patch(f"/v1/memories/{reply}", json={"search_context": QUESTION}, headers=tenant.headers)
    await client.patch(f"/v1/memories/{reply}", json={"text": "Caroline: Swimming, mostly."}, headers=tenant.headers)
    assert reply in await lexical(client, tenant, "long week")
    assert await index_drift(owner_dsn, tenant) == {"postings": 0, "df": 0, "ctx_len": 0, "text_len": 0, "docs": 0}
    assert (await client.delete(f"/v1/memories/{reply}", headers=tenant.headers)).status_code == 204
    assert await lexical(client, tenant, "long week") == []
    assert await index_drift(owner_dsn, tenant) == {"postings": 0, "df": 0, "ctx_len": 0, "text_len": 0, "docs": 0}


async def test_lexical_scores_are_bm25f_of_the_index(client: AsyncTestClient[Any], tenant: Tenant, owner_dsn: str,
                                                     settings: Settings) -> None:
    """Each lexical score is BM25F recomputed here from the org's index (postings, df counters, length
    statistics): idf ln(1 + (N - df + 0.5) / (df + 0.5)), tf and length ``text + w * context``, k1 and b
    from the settings. Pins the formula whatever shape the SQL gives it."""
    await create(client, tenant, {"memories": [
        {"text": REPLY, "search_context": QUESTION},
        {"text": "Melanie: Painting helps me unwind on Sundays, and swimming on Mondays."},
        {"text": "Caroline: The kids painted the fence; swimming lessons start next week.",
         "search_context": "Melanie: How are the kids?"},
        {"text": "Caroline: The adoption agency called back today."}]})
    query = "kids swimming after a long week of painting"
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": query, "strategy": "lexical", "limit": 10})
    assert r.status_code == 200, r.text
    got = {hit["id"]: hit["lexical_score"] for hit in r.json()["results"]}
    k1, b, w = settings.retrieval.bm25_k1, settings.retrieval.bm25_b, settings.retrieval.search_context_weight
    conn = await asyncpg.connect(owner_dsn)
    try:
        n, text_len, ctx_len = await conn.fetchrow(
            "SELECT sum(n_docs)::float8, sum(total_len)::float8, sum(ctx_total_len)::float8"
            "  FROM memory_lex_stats WHERE org_id = $1", tenant.org_id)
        terms = await conn.fetch(
            "SELECT q.lexeme AS term,"
            "       (SELECT sum(df) FROM memory_term_df d WHERE d.org_id = $1 AND d.term = q.lexeme)::float8 AS df"
            "  FROM unnest(to_tsvector('english', $2)) AS q", tenant.org_id, query)
        postings = await conn.fetch(
            "SELECT memory_id::text AS id, term, tf, ctx_tf, doc_len, ctx_len FROM memory_postings"
            " WHERE org_id = $1 AND term = ANY($2::text[])", tenant.org_id, [t["term"] for t in terms])
    finally:
        await conn.close()
    avgdl = (text_len + w * ctx_len) / n
    idf = {t["term"]: math.log(1 + (n - t["df"] + 0.5) / (t["df"] + 0.5)) for t in terms if t["df"]}
    want: dict[str, float] = {}
    for p in postings:
        tf, dl = p["tf"] + w * p["ctx_tf"], p["doc_len"] + w * p["ctx_len"]
        want[p["id"]] = want.get(p["id"], 0.0) + idf[p["term"]] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
    assert len(want) == 3 and set(got) == set(want)
    for mid, score in got.items():
        assert score == pytest.approx(want[mid], rel=1e-9)
    assert list(got) == sorted(want, key=lambda mid: -want[mid])


async def test_weight_zero_ignores_the_context(settings: Settings, endpoints: Endpoints, embedder: Embedder,
                                               tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, retrieval={"search_context_weight": 0.0}) as client:
        await create(client, tenant, {"text": REPLY, "search_context": QUESTION})
        assert await lexical(client, tenant, "unwind") == []
        assert len(await lexical(client, tenant, "swimming")) == 1


async def test_assembly_finds_by_context_and_never_packs_it(settings: Settings, endpoints: Endpoints,
                                                            embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        (reply,) = await create(client, tenant, {"text": REPLY, "search_context": QUESTION, "agent_id": "chat"})
        await create(client, tenant, {"text": "Caroline: The adoption agency called back today.", "agent_id": "chat"})
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": "chat", "query": "How does Caroline unwind after a long week?", "model": "gpt-4o",
            "max_context_tokens": 1000, "retrieval": {"use_hot": False}})
        assert r.status_code == 200, r.text
        out = r.json()
    assert reply in {m["id"] for m in out["memories_used"]}
    assert "swimming with the kids" in out["context"]
    assert "unwind" not in out["context"] and "What do you do" not in out["context"]


async def test_another_org_neither_sees_nor_changes_it(client: AsyncTestClient[Any], tenant: Tenant,
                                                       other_tenant: Tenant, owner_dsn: str) -> None:
    (mine,) = await create(client, tenant, {"text": REPLY, "search_context": QUESTION})
    (theirs,) = await create(client, other_tenant, {"text": "Gina: Dance class again tonight.",
                                                    "search_context": "Jon: What do you do to unwind?"})
    assert await lexical(client, tenant, "unwind") == [mine]
    assert await lexical(client, other_tenant, "unwind") == [theirs]
    r = await client.patch(f"/v1/memories/{mine}", json={"search_context": "stolen"}, headers=other_tenant.headers)
    assert_error(r, 404)
    assert (await client.get(f"/v1/memories/{mine}", headers=tenant.headers)).json()["search_context"] == QUESTION
    for t in (tenant, other_tenant):
        assert await index_drift(owner_dsn, t) == {"postings": 0, "df": 0, "ctx_len": 0, "text_len": 0, "docs": 0}

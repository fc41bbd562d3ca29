"""A document with one line far over the chunk bound, through the HTTP API: the line is stored as
L2 pieces of that line (read back in order), an exact lookup places a word near its end on the right
line, and context assembly with a small budget packs a piece of it (the whole line never fit); the
chunks of one file get strictly increasing ids, which is what orders the pieces of a line, with
PostgreSQL 16/17's portable UUIDv7 too."""

from __future__ import annotations

import itertools
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient
from pgvector.asyncpg import register_vector

from service.db import Database
from service.db.queries import query
from service.settings import Settings
from service.text.tokens import Tokenizers
from tests.conftest import Tenant

TOPICS = [
    ("The espresso machine", "descales its boiler", "with citric acid", "every second Monday"),
    ("A comet", "crosses the orbit of Jupiter", "near perihelion", "once in seventy years"),
    ("The tax office", "audits small bakeries", "for unpaid value added tax", "before the fiscal year closes"),
    ("Our gardeners", "prune the apple trees", "along the southern wall", "in late February"),
    ("The rowing club", "trains its junior crews", "on the frozen river", "at dawn in winter"),
    ("A violin maker", "carves spruce tops", "for baroque instruments", "in a workshop in Cremona"),
    ("The city council", "votes on bicycle lanes", "for the harbour district", "after long public hearings"),
    ("Volcanologists", "sample sulphur gases", "at the crater rim", "while wearing respirators"),
]
SENTENCES = [f"{who} {does} {what} {when}, note {n} of {topic}." for topic, (who, does, what, when) in
             enumerate(TOPICS) for n in range(12)]
WORD = "zanzibar_quokka_flag"
LINE = " ".join(SENTENCES) + f" The rollback switch for the release is named {WORD} in the config.\n"
CONTENT = "# Release notes\n\n" + LINE + "\nThat is all.\n"
PATH = "notes/release.md"
AGENT = "helper"




@pytest.fixture(scope="module")
async def long_doc(client: AsyncTestClient[Any], make_tenant: Any) -> Tenant:
    tenant: Tenant = await make_tenant("long-lines")
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": PATH, "content": CONTENT}]})
    assert r.status_code == 200, r.text
    (result,) = r.json()["files"]
    assert result["status"] == "created" and result["chunks"]["l2"] >= 10
    return tenant


def count(settings: Settings, text: str) -> int:
    return Tokenizers(settings.data_dir / "tiktoken").get(settings.documents.tokenizer).count(text)


async def test_long_line_is_stored_as_pieces_of_its_line_in_order(
        db: Database, long_doc: Tenant, settings: Settings) -> None:
    bound = settings.documents.max_chunk_tokens
    assert count(settings, LINE) > 5 * bound
    async with db.tenant(long_doc.org_id, readonly=True) as tx:
        l2 = await tx.fetch("documents.file_chunks", long_doc.org_id, "default", PATH, [2])
    # Read back in (level, line_start, line_end, id) order, the file comes back byte for byte: the pieces
    # of line 3, which share their span, are in order.
    assert "".join(r["text"] for r in l2) == CONTENT
    pieces = [r for r in l2 if r["line_start"] == 3]
    assert len(pieces) >= 5 and all(r["line_end"] == 3 for r in pieces)
    assert "".join(r["text"] for r in pieces) == LINE
    assert all(count(settings, r["text"]) <= bound for r in l2)
    assert all(r["text"].endswith(" ") for r in pieces[:-1]) and pieces[-1]["text"].endswith(f"{WORD} in the config.\n")
    assert {r["breadcrumb"] for r in pieces} == {f"{PATH} > Release notes"}


async def test_exact_lookup_places_a_word_near_the_end_of_the_line(
        client: AsyncTestClient[Any], long_doc: Tenant) -> None:
    r = await client.post("/v1/memories/search", headers=long_doc.headers,
                          json={"query": WORD, "modes": ["exact"], "limit": 5})
    assert r.status_code == 200, r.text
    top = r.json()["results"][0]
    assert top["path"] == PATH and top["level"] == 2 and top["mode"] == "exact"
    assert (top["line_start"], top["line_end"]) == (3, 3)
    assert (top["excerpt_line_start"], top["excerpt_line_end"]) == (3, 3)
    assert WORD in top["excerpt"] and LINE.endswith(top["text"]) and len(top["text"]) < len(LINE) // 4


async def test_assembly_with_a_small_budget_packs_pieces_of_the_line(
        client: AsyncTestClient[Any], long_doc: Tenant) -> None:
    async def assemble(query: str, budget: int) -> dict[str, Any]:
        r = await client.post("/v1/context/assemble", headers=long_doc.headers, json={
            "agent_id": AGENT, "query": query, "model": "gpt-4o", "max_context_tokens": budget, "reserve_tokens": 0,
            "retrieval": {"use_hot": False, "filters": {"collections": ["default"]}}})
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    body = await assemble(f"what is the rollback switch {WORD} of the release", 1000)
    assert WORD in body["context"], body
    used = [m for m in body["memories_used"] if m.get("path") == PATH and WORD in m["text"]]
    assert [(m["line_start"], m["line_end"]) for m in used] == [(3, 3)]
    assert [m["collection"] for m in used] == ["default"]  # which file: the same path may be in two collections
    # Pieces of one line hold different parts of it: none is dropped as nested in another.
    body = await assemble("espresso machine descaling, comets near Jupiter, tax audits of bakeries", 3000)
    pieces = [m for m in body["memories_used"] if m.get("path") == PATH and m["line_start"] == 3]
    assert len(pieces) >= 2, body["dropped"]
    assert not any(d["reason"] == "nested" and d.get("line_start") == 3 and d.get("line_end") == 3
                   and "lines 3-3 of" in d["detail"] and "overlap lines 3-3" in d["detail"] for d in body["dropped"])


# What pgcontext_uuidv7() is made to return: the portable UUIDv7 (PostgreSQL 16/17), and the worst case
# for it, every row made within one tick of the clock (the same time fields, then random bits).
UUIDV7_SOURCES = {
    "portable": "SELECT pgcontext_uuidv7_portable()",
    "one tick": "SELECT encode(substring(uuid_send('0193a1b2-c3d4-7e5f-8000-000000000000'::uuid) FROM 1 FOR 8) "
                "|| substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid",
}


@pytest.mark.parametrize("source", list(UUIDV7_SOURCES))
async def test_chunk_ids_increase_in_insertion_order_without_native_uuidv7(
        source: str, owner_dsn: str, make_tenant: Any) -> None:
    """PostgreSQL 16/17 take ids from ``pgcontext_uuidv7_portable()`` (microsecond time, then random
    bits), so rows made in the same microsecond would order at random: the chunks still get strictly
    increasing ids in input order, and pieces of one line (one span) read back in order. Simulated by
    pointing ``pgcontext_uuidv7()`` elsewhere, in a transaction rolled back."""
    tenant: Tenant = await make_tenant("uuid-order")
    n = 3000
    texts = [f"piece {i:04d} " for i in range(n)]
    conn = await asyncpg.connect(owner_dsn)
    try:
        await register_vector(conn)
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute("CREATE OR REPLACE FUNCTION pgcontext_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE "
                               f"PARALLEL SAFE AS $fn$ {UUIDV7_SOURCES[source]} $fn$")
            rows = await conn.fetch(query("documents.insert_chunks"), tenant.org_id, [None] * n, texts, [None] * n,
                                    ['{"collection": "default"}'] * n, [PATH] * n, [3] * n, [3] * n, [None] * n,
                                    [PATH] * n, [2] * n)
            ids = [r["id"] for r in rows]
            assert len(ids) == n and all(a < b for a, b in itertools.pairwise(ids))
            assert {(i.version, i.variant) for i in ids} == {(7, "specified in RFC 4122")}
            back = await conn.fetch(query("documents.file_chunks"), tenant.org_id, "default", PATH, [2])
            assert [r["text"] for r in back] == texts
        finally:
            await transaction.rollback()  # the function and the rows
    finally:
        await conn.close()


async def test_a_minified_bundle_is_one_section_per_line_not_one_per_symbol(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant) -> None:
    """Each of the thousands of functions on a minified line was its own L1 chunk, and all held the same
    prefix of that line: a 990 KB bundle became 28,000 chunks and its ingestion ran for minutes."""
    bundle = "".join(f"var fn{i}=function(x){{return x+{i}}};" for i in range(4000)) + "\n"
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": "dist/app.min.js", "content": bundle}]})
    assert r.status_code == 200, r.text
    (result,) = r.json()["files"]
    assert result["chunks"]["l1"] == 1
    async with db.tenant(tenant.org_id, readonly=True) as tx:
        stored = await tx.fetch("documents.file_chunks", tenant.org_id, "default", "dist/app.min.js", None)
    assert len(stored) == result["chunks"]["l0"] + 1 + result["chunks"]["l2"] < 400  # 4,002 before
    assert "".join(row["text"] for row in stored if row["level"] == 2) == bundle
    # The code stays findable: an exact lookup lands on the piece of the line that holds it.
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "fn3999=function", "modes": ["exact"], "limit": 3})
    assert r.status_code == 200, r.text
    top = r.json()["results"][0]
    assert top["path"] == "dist/app.min.js" and top["level"] == 2 and "fn3999=function" in top["text"]

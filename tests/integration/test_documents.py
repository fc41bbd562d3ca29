"""POST/GET/DELETE /v1/documents and the index summary against real Postgres + Redis.

Line-exact storage (L2 reconstruction through the database), skip-unchanged, replacement of only the
changed file's chunks, atomicity under a concurrent reader, delete, limits, the summary's honesty,
and tenant isolation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import numpy as np
import numpy.typing as npt
import pytest
from litestar.testing import AsyncTestClient
from redis.asyncio import Redis

from service.db import Database
from service.documents import lookup
from service.documents.ingest import ingest, token_counter
from service.documents.lookup import LookupFilters
from service.documents.types import FileIn, IngestRequest
from service.embeddings import Embedder
from service.runtime import Endpoints, Services
from service.settings import Settings
from tests.conftest import Tenant, is_cache_hit

PY = '''"""Geometry helpers."""

import math


class Circle:
    """A circle."""

    def __init__(self, r: float) -> None:
        self.r = r

    def area(self) -> float:
        return math.pi * self.r ** 2


def clamp(x: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, x))
'''
MD = "# Guide\r\n\r\nIntro text.\r\n\r\n## Install\r\n\r\nRun `make`.\r\n\r\n## Use\r\n\r\nCall it. No final newline"
LONG_TXT = "".join(f"Line {i}: the quick brown fox number {i} jumps over the lazy dog.\n" for i in range(150))
LONG = "".join(f"def f{i}(x):\n    return x + {i}  # value {i} of the long file\n\n" for i in range(40))




class HashEmbedder:
    """Deterministic unit vectors from a text's hash: for tests about storage, not meaning (fast on a busy box)."""

    name = "test:hash"
    dim = 384

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [np.random.default_rng(int(hashlib.sha256(t.encode()).hexdigest()[:16], 16)).standard_normal(self.dim)
                for t in texts]
        out = np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim)
        normed: npt.NDArray[np.float32] = out / np.linalg.norm(out, axis=1, keepdims=True)
        return normed

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
async def local(db: Database, settings: Settings, endpoints: Endpoints) -> AsyncIterator[Services]:
    """The ingestion path on the tests' own loop (with a hash embedder), to run it beside a reader."""
    redis = Redis.from_url(endpoints.redis_url)
    yield Services(settings=settings, db=db, redis=redis, embedder=HashEmbedder())
    await redis.aclose()


async def post(client: AsyncTestClient[Any], tenant: Tenant, files: dict[str, str], status: int = 200,
               **extra: Any) -> dict[str, Any]:
    body = {"files": [{"path": p, "content": c} for p, c in files.items()], **extra}
    r = await client.post("/v1/documents", json=body, headers=tenant.headers)
    assert r.status_code == status, r.text
    result: dict[str, Any] = r.json()
    return result


async def index(client: AsyncTestClient[Any], tenant: Tenant) -> dict[str, Any]:
    r = await client.get("/v1/documents/index", headers=tenant.headers)
    assert r.status_code == 200, r.text
    result: dict[str, Any] = r.json()
    return result


async def chunks(db: Database, org: UUID, path: str, levels: list[int] | None = None,
                 collection: str = "default") -> list[asyncpg.Record]:
    async with db.tenant(org, readonly=True) as tx:
        return await tx.fetch("documents.file_chunks", org, collection, path, levels)


async def test_l2_chunks_reconstruct_files_through_the_database(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant) -> None:
    files = {"geo/shapes.py": PY, "docs/guide.md": MD, "empty.txt": "", "long.txt": LONG_TXT, "one.txt": "x"}
    result = await post(client, tenant, files)
    assert [f["status"] for f in result["files"]] == ["created"] * 5
    assert result["created"] == 5 and result["revision"] >= 1
    for path, content in files.items():
        l2 = await chunks(db, tenant.org_id, path, [2])
        assert "".join(r["text"] for r in l2) == content, path
        # spans tile the file in order, line-exact
        expected_start = 1
        for r in l2:
            assert r["line_start"] == expected_start
            assert r["text"].count("\n") in (r["line_end"] - r["line_start"], r["line_end"] - r["line_start"] + 1)
            expected_start = r["line_end"] + 1
        assert all(r["embedded"] for r in await chunks(db, tenant.org_id, path))
    long_l2 = await chunks(db, tenant.org_id, "long.txt", [2])
    assert len(long_l2) > 3
    # L0 of an empty file: stored as (1, 1) because memories requires line_end >= line_start
    (l0,) = await chunks(db, tenant.org_id, "empty.txt", [0])
    assert (l0["line_start"], l0["line_end"]) == (1, 1)
    assert "0 lines" in l0["text"]
    # L1 symbols with breadcrumbs and symbol metadata
    l1 = await chunks(db, tenant.org_id, "geo/shapes.py", [1])
    by_symbol = {r["metadata"].get("symbol"): r for r in l1}
    area = by_symbol["Circle.area"]
    assert area["breadcrumb"] == "geo/shapes.py > class Circle > def area"
    assert area["metadata"]["symbol_name"] == "area" and area["metadata"]["language"] == "python"
    assert PY.splitlines()[area["line_start"] - 1].strip().startswith("def area")
    md_l1 = await chunks(db, tenant.org_id, "docs/guide.md", [1])
    assert {r["section_title"] for r in md_l1} >= {"Guide", "Install", "Use"}


async def _state(db: Database, org: UUID) -> tuple[dict[str, Any], list[Any]]:
    async with db.tenant(org, readonly=True) as tx:
        docs = {r["path"]: (r["xmin"], r["indexed_at"]) for r in await tx.conn.fetch(
            "SELECT path, xmin::text AS xmin, indexed_at FROM documents WHERE org_id = $1", org)}
        ids = sorted((r["source_path"], str(r["id"]), r["xmin"]) for r in await tx.conn.fetch(
            "SELECT source_path, id, xmin::text AS xmin FROM memories WHERE org_id = $1 AND kind = 'document_chunk'",
            org))
    return docs, ids


async def test_reimport_of_unchanged_files_writes_nothing(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant) -> None:
    files = {"a.py": PY, "b.md": MD, "c.txt": "hello\n"}
    first = await post(client, tenant, files)
    before = await _state(db, tenant.org_id)
    again = await post(client, tenant, files)
    assert [f["status"] for f in again["files"]] == ["unchanged"] * 3
    assert again["revision"] == first["revision"] and again["chunks_written"] == 0
    assert [f["chunks"] for f in again["files"]] == [f["chunks"] for f in first["files"]]
    assert await _state(db, tenant.org_id) == before  # same rows, same xmin: nothing rewritten
    # the same content under another owner is a change (the chunks carry the owner)
    moved = await post(client, tenant, {"c.txt": "hello\n"}, agent_id="bot")
    assert moved["files"][0]["status"] == "updated" and moved["revision"] == first["revision"] + 1


async def test_a_file_an_earlier_chunking_cut_is_cut_again_though_unchanged(
        client: AsyncTestClient[Any], owner_dsn: str, tenant: Tenant) -> None:
    first = await post(client, tenant, {"a.py": PY, "b.md": MD})
    listed = (await client.get("/v1/documents", headers=tenant.headers)).json()["items"]
    current = (await index(client, tenant))["chunker"]
    assert current >= 1 and [d["chunker"] for d in listed] == [current, current]
    conn = await asyncpg.connect(owner_dsn)
    try:  # as stored before chunking changed
        await conn.execute("UPDATE documents SET chunker = 0 WHERE org_id = $1 AND path = 'a.py'", tenant.org_id)
    finally:
        await conn.close()
    again = await post(client, tenant, {"a.py": PY, "b.md": MD})
    assert [f["status"] for f in again["files"]] == ["updated", "unchanged"]
    assert again["revision"] == first["revision"] + 1 and again["chunks_written"] == first["files"][0]["chunks"]["l0"] \
        + first["files"][0]["chunks"]["l1"] + first["files"][0]["chunks"]["l2"]
    listed = (await client.get("/v1/documents", headers=tenant.headers)).json()["items"]
    assert [d["chunker"] for d in listed] == [current, current]
    assert [f["status"] for f in (await post(client, tenant, {"a.py": PY}))["files"]] == ["unchanged"]


async def test_changing_one_file_replaces_only_its_chunks(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant) -> None:
    await post(client, tenant, {"keep1.py": PY, "keep2.md": MD, "change.txt": LONG_TXT})
    kept = {p: [r["id"] for r in await chunks(db, tenant.org_id, p)] for p in ("keep1.py", "keep2.md")}
    old = {r["id"] for r in await chunks(db, tenant.org_id, "change.txt")}
    rev = (await index(client, tenant))["revision"]
    changed = LONG_TXT.replace("number 7 ", "NUMBER SEVEN ")
    result = await post(client, tenant, {"keep1.py": PY, "keep2.md": MD, "change.txt": changed})
    assert [f["status"] for f in result["files"]] == ["unchanged", "unchanged", "updated"]
    assert result["revision"] == rev + 1
    for p, ids in kept.items():
        assert [r["id"] for r in await chunks(db, tenant.org_id, p)] == ids
    new = await chunks(db, tenant.org_id, "change.txt")
    assert not old & {r["id"] for r in new}
    assert "".join(r["text"] for r in new if r["level"] == 2) == changed


async def test_replacement_is_atomic_for_a_concurrent_reader(
        client: AsyncTestClient[Any], db: Database, local: Services, tenant: Tenant) -> None:
    versions = [LONG, LONG.replace("return x", "return -x"), LONG.replace("def f", "def g") + "tail\n"]
    await post(client, tenant, {"hot.py": versions[0], "cold.md": MD})
    org = tenant.org_id
    seen: list[tuple[int, str, int]] = []
    done = asyncio.Event()

    async def reader() -> None:
        while not done.is_set():
            rows = await chunks(db, org, "hot.py")
            l2 = "".join(r["text"] for r in rows if r["level"] == 2)
            seen.append((len({r["metadata"]["content_hash"] for r in rows}), l2, len(rows)))
            await asyncio.sleep(0.002)

    async def writer() -> None:
        try:
            for i in range(4):
                await ingest(local, org, IngestRequest(files=[FileIn(path="hot.py", content=versions[(i + 1) % 3]),
                                                             FileIn(path="cold.md", content=MD)]))
        finally:
            done.set()

    await asyncio.gather(reader(), writer())
    texts = {text for _, text, _ in seen}
    assert len(seen) > 20 and len(texts) >= 2  # the reader really ran across several replacements
    for hashes, text, count in seen:
        assert hashes == 1  # never a mix of two versions' chunks
        assert text in versions and count > 0  # never a partial or empty file


async def test_delete_removes_chunks_and_bumps_revision(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant) -> None:
    await post(client, tenant, {"x/gone.py": PY, "x/stay.py": "a = 1\n"})
    rev = (await index(client, tenant))["revision"]
    r = await client.delete("/v1/documents", params={"path": "x/gone.py"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["deleted"] == ["x/gone.py"] and body["missing"] == [] and body["chunks_deleted"] > 3
    assert body["revision"] == rev + 1
    assert await chunks(db, tenant.org_id, "x/gone.py") == []
    assert await chunks(db, tenant.org_id, "x/stay.py")
    again = await client.delete("/v1/documents", params={"path": "x/gone.py"}, headers=tenant.headers)
    assert again.status_code == 404 and again.json()["error"]["code"] == "document_not_found"
    assert (await index(client, tenant))["revision"] == rev + 1
    # several paths: the existing ones go, the others are reported
    r = await client.delete("/v1/documents", params=[("path", "x/stay.py"), ("path", "nope.py")],
                            headers=tenant.headers)
    assert r.status_code == 200 and r.json()["missing"] == ["nope.py"]
    bad = await client.delete("/v1/documents", params={"path": "../etc/passwd"}, headers=tenant.headers)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "bad_path"


@pytest.mark.parametrize("path", ["/abs.py", "a/../b.py", "./a.py", "a//b.py", "a\\b.py", "a\nb", "", "dir/",
                                  "x" * 1025, "a\x85b.md", "csi\x9b.md", "line\u2028sep.md", "para\u2029.md"])
async def test_bad_paths_are_400(client: AsyncTestClient[Any], tenant: Tenant, path: str) -> None:
    body = await post(client, tenant, {path: "text"}, status=400)
    assert body["error"]["code"] == "bad_path"


async def test_a_stored_path_with_a_line_separator_can_still_be_deleted(client: AsyncTestClient[Any], tenant: Tenant,
                                                                      other_tenant: Tenant, owner_dsn: str) -> None:
    """Paths with C1 controls or line separators are refused now; a document stored with one before is
    still exported and imported, and deleted by its path."""
    await post(client, tenant, {"notes/old.md": "# Old\n\nkept from before\n"}, status=200)
    conn = await asyncpg.connect(owner_dsn)
    try:  # as an ingest stored it when such paths were taken
        for table, column in (("documents", "path"), ("memories", "source_path")):
            await conn.execute(f"UPDATE {table} SET {column} = 'notes/old\u2028.md' WHERE org_id = $1 "
                               f"AND {column} = 'notes/old.md'", tenant.org_id)
    finally:
        await conn.close()
    exported = await client.get("/v1/export", headers=tenant.headers)
    lines = [json.loads(line) for line in exported.text.splitlines() if line]
    documents = [line for line in lines if line["type"] == "document"]
    assert [d["path"] for d in documents] == ["notes/old\u2028.md"]
    r = await client.post("/v1/import", json={"lines": documents}, headers=other_tenant.headers)
    assert r.status_code == 200 and r.json()["imported"]["document"] == 1, r.text
    for who in (tenant, other_tenant):
        r = await client.delete("/v1/documents", params={"path": "notes/old\u2028.md"}, headers=who.headers)
        assert r.status_code == 200 and r.json()["deleted"] == ["notes/old\u2028.md"], r.text


async def test_limits_and_content_checks(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    too_many = await post(client, tenant, {f"f{i}.txt": "x" for i in range(257)}, status=413)
    assert too_many["error"]["code"] == "too_many_files"
    big = await post(client, tenant, {"big.txt": "x" * 1_000_001}, status=413)
    assert big["error"]["code"] == "file_too_large"
    nul = await post(client, tenant, {"bin.dat": "a\x00b"}, status=400)
    assert nul["error"]["code"] == "binary_content"
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": "a", "content": "1"}, {"path": "a", "content": "2"}]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "duplicate_path"
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": "a", "content": "1", "metadata": {"collection": "x"}}]})
    assert r.status_code == 400
    r = await client.post("/v1/documents", headers=tenant.headers, json={"files": []})
    assert r.status_code == 400
    r = await client.post("/v1/documents", headers={**tenant.headers, "Content-Type": "application/json"},
                          content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_json"
    r = await client.post("/v1/documents", headers=tenant.headers, json={"files": [{"path": "a"}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "validation_error"
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": "a", "content": "1"}], "collection": "bad name"})
    assert r.status_code == 400
    # nothing above was written
    assert (await index(client, tenant))["files"] == 0


async def test_metadata_collections_and_listing(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/documents", headers=tenant.headers, json={
        "collection": "repo-b", "agent_id": "coder",
        "files": [{"path": "m.py", "content": PY, "metadata": {"team": "geo"}}]})
    assert r.status_code == 200, r.text
    await post(client, tenant, {f"d{i}.txt": f"doc {i}\n" for i in range(5)})
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"collection": "default", "limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get("/v1/documents", params=params, headers=tenant.headers)).json()
        seen += [i["path"] for i in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [f"d{i}.txt" for i in range(5)]
    everything = (await client.get("/v1/documents", params={"limit": 100}, headers=tenant.headers)).json()
    item = next(i for i in everything["items"] if i["collection"] == "repo-b")
    assert item["agent_id"] == "coder" and item["metadata"] == {"team": "geo"} and item["language"] == "python"
    assert item["chunks"]["l0"] == 1 and item["chunks"]["l2"] >= 1 and len(item["content_hash"]) == 64
    # same path in two collections are two documents; delete is per collection
    await post(client, tenant, {"m.py": "y = 2\n"})
    r = await client.delete("/v1/documents", params={"path": "m.py", "collection": "repo-b"}, headers=tenant.headers)
    assert r.status_code == 200
    listed = (await client.get("/v1/documents", params={"path_prefix": "m."}, headers=tenant.headers)).json()
    assert [(i["collection"], i["path"]) for i in listed["items"]] == [("default", "m.py")]
    # chunk metadata carries the caller's metadata and the collection (usable as a search filter)
    assert (await client.get("/v1/documents", params={"cursor": "garbage"}, headers=tenant.headers)).status_code == 400


async def test_index_summary_is_computed_not_assumed(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant, owner_dsn: str,
        embedder: Embedder) -> None:
    empty = await index(client, tenant)
    assert empty["status"] == "empty" and empty["revision"] == 0 and empty["semantic"]["available"] is False
    result = await post(client, tenant, {"a.py": PY, "b.md": MD, "c.txt": ""})
    summary = await index(client, tenant)
    assert summary["status"] == "ready" and summary["revision"] == result["revision"]
    assert summary["files"] == 3 and summary["last_indexed_at"] is not None
    total = sum(f["chunks"]["l0"] + f["chunks"]["l1"] + f["chunks"]["l2"] for f in result["files"])
    assert summary["chunks"] == total == sum(summary["chunks_by_level"].values())
    assert summary["chunks_by_level"]["0"] == 3
    assert set(summary["by_language"]) == {"python", "markdown", "text"}
    assert summary["by_language"]["python"]["files"] == 1 and summary["by_language"]["python"]["chunks"] > 3
    assert summary["semantic"] == {"available": True, "embedder": embedder.name, "chunks_embedded": total,
                                   "chunks_missing_embedding": 0, "files_other_embedder": 0}
    assert summary["dirty_paths"] == [] and summary["collections"]["default"]["files"] == 3
    # a chunk loses its vector (e.g. written by a tool that does not embed): the summary says so
    conn = await asyncpg.connect(owner_dsn)
    try:
        await conn.execute("UPDATE memories SET embedding = NULL WHERE org_id = $1 AND source_path = 'a.py' "
                           "AND level = 2", tenant.org_id)
        await conn.execute("UPDATE documents SET embedder = 'other-model' WHERE org_id = $1 AND path = 'b.md'",
                           tenant.org_id)
    finally:
        await conn.close()
    degraded = await index(client, tenant)
    assert degraded["status"] == "degraded" and degraded["semantic"]["available"] is False
    assert degraded["semantic"]["chunks_missing_embedding"] >= 1 and degraded["semantic"]["files_other_embedder"] == 1
    assert {(d["path"], tuple(d["reasons"])) for d in degraded["dirty_paths"]} == {
        ("a.py", ("missing_embeddings",)), ("b.md", ("other_embedder",))}
    # re-ingesting the files repairs them (the embedder differs, so b.md is not "unchanged")
    fixed = await post(client, tenant, {"a.py": PY + "\n", "b.md": MD})
    assert [f["status"] for f in fixed["files"]] == ["updated", "updated"]
    assert (await index(client, tenant))["status"] == "ready"


async def test_another_org_never_sees_the_documents(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant, other_tenant: Tenant,
        embedder: Embedder) -> None:
    await post(client, tenant, {"secret/plan.py": PY})
    other = await index(client, other_tenant)
    assert other["files"] == 0 and other["chunks"] == 0 and other["revision"] == 0
    listing = (await client.get("/v1/documents", headers=other_tenant.headers)).json()
    assert listing["items"] == []
    r = await client.delete("/v1/documents", params={"path": "secret/plan.py"}, headers=other_tenant.headers)
    assert r.status_code == 404
    async with db.tenant(other_tenant.org_id, readonly=True) as tx:
        assert await lookup.exact(tx, "Circle") == []
        assert await lookup.path(tx, "secret/**") == []
        assert await lookup.symbol(tx, "clamp") == []
        vector = (await embedder.embed(["a circle"]))[0]
        assert await lookup.nearest(tx, vector) == []
    # the other org writing the same path gets its own document; the first org's is untouched
    await post(client, other_tenant, {"secret/plan.py": "other = True\n"})
    async with db.tenant(tenant.org_id, readonly=True) as tx:
        hits = await lookup.path(tx, "secret/plan.py")
        assert len(hits) == 1 and "Circle" in (await lookup.exact(tx, "class Circle"))[0].text
        assert await lookup.exact(tx, "other = True") == []
    assert (await client.delete("/v1/documents", params={"path": "secret/plan.py"},
                                headers=tenant.headers)).status_code == 200
    async with db.tenant(other_tenant.org_id, readonly=True) as tx:
        assert len(await lookup.path(tx, "secret/plan.py", filters=LookupFilters(collections=("default",)))) == 1


async def test_chunk_token_counts_are_cached_per_org(client: AsyncTestClient[Any], tenant: Tenant,
                                                     other_tenant: Tenant) -> None:
    """The chunker counts every line; another org's import of a line is not a cache hit for mine
    (docs/security.md, "In-process caches")."""
    line = f"secret_{uuid4().hex} = 1\n"
    await post(client, other_tenant, {"secret/counted.py": line})
    services = client.app.state.services
    assert isinstance(services, Services)
    counter = token_counter(services)
    assert not is_cache_hit(counter.count, counter.cache_info, line, tenant.org_id)
    assert not is_cache_hit(counter.count, counter.cache_info, line, None)
    assert is_cache_hit(counter.count, counter.cache_info, line, other_tenant.org_id)


async def test_deeply_nested_sources_do_not_fail_the_batch(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """Sources nested a thousand levels (TS namespaces, Rust mods, Java classes) answered 500 and
    failed the whole batch; now each is indexed beside an ordinary file in the same request."""
    depth = 1000
    nested = {
        "deep.ts": "".join(f"namespace N{i} {{\n" for i in range(depth)) + "let x = 1;\n" + "}\n" * depth,
        "deep.rs": "".join(f"mod m{i} {{\n" for i in range(depth)) + "fn f() {}\n" + "}\n" * depth,
        "Deep.java": "".join(f"class C{i} {{\n" for i in range(depth)) + "void f() {}\n" + "}\n" * depth,
    }
    await post(client, tenant, {**nested, "ok.py": PY})
    summary = await index(client, tenant)
    assert summary["files"] == 4, summary


async def test_an_exact_search_in_a_chunk_of_one_huge_line_answers(client: AsyncTestClient[Any],
                                                                   tenant: Tenant) -> None:
    """Minified code is one line holding 100,000 matches of "ab": placing each on its line by counting the
    line breaks before it took seconds of the event loop (every org waited) and the search answered 503.
    The line is stored as pieces of line 1, each within the chunk bound."""
    await post(client, tenant, {"min.js": "var s='" + "ab" * 100_000 + "';\n", "small.py": "x = 'ab'\n"})
    r = await client.post("/v1/memories/search", json={"query": "ab", "modes": ["exact"]}, headers=tenant.headers)
    assert r.status_code == 200, r.text[:500]
    hits = r.json()["results"]
    assert {hit["path"] for hit in hits} <= {"min.js", "small.py"}
    pieces = [hit for hit in hits if hit["path"] == "min.js"]
    assert pieces and all((hit["line_start"], hit["line_end"]) == (1, 1) for hit in pieces)
    assert all(len(hit["text"]) < 2000 and hit["excerpt_line_start"] == 1 for hit in pieces)

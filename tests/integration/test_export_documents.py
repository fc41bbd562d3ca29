"""Documents through an org export and ``POST /v1/import`` on real Postgres + Redis: a ``document`` line
carries its file's content, and importing it ingests the file again, so the restored org holds the same
documents and chunks (text, spans, breadcrumbs, metadata, vectors) as one the files were mirrored into and
finds them by search; an export reads the documents (each holding a file) a few rows at a time; an import
run again writes nothing twice; it touches only the caller's org; a line
of an older export (no content) is counted ``skipped`` while the rest imports; a bad line is a 422 naming
the line and field, and nothing of the request is written."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import numpy as np
import pytest
from litestar.testing import AsyncTestClient

from service.export import stream
from tests.conftest import Tenant
from tests.integration.test_bad_input import assert_error
from tests.integration.test_data_subject import owner_rows
from tests.integration.test_export_import import AGENT, export_org, import_lines
from tests.integration.test_facts import write
from tests.integration.test_memories_api import list_all

SPHERE = '''import math

R = 6371.0


class Sphere:
    def haversine(self, phi1: float, lam1: float, phi2: float, lam2: float) -> float:
        """Great-circle distance between two points, in kilometres."""
        dphi = math.radians(phi2 - phi1)
        dlam = math.radians(lam2 - lam1)
        h = math.sin(dphi / 2) ** 2 + math.cos(math.radians(phi1)) * math.sin(dlam / 2) ** 2
        return 2 * R * math.asin(math.sqrt(h))
'''
FILES: dict[str, str] = {
    "geo/sphere.py": SPHERE,
    "notes/crlf.md": "# Trips\r\n\r\nThe train to Porto leaves at 8:15.\r\n\r\n## Return\r\nNo final newline",
    "empty.txt": "",
    "data/long.txt": "values = " + " ".join(f"w{i}" for i in range(3000)) + "\nlast line\n",  # one line in pieces
}
"""Files that test the content's round trip: CRLF, no final newline, an empty file, a line over the chunk
bound (cut into pieces only the chunks' ids order)."""

CHUNKS = ("SELECT m.agent_id, m.text, m.metadata, m.source_path, m.line_start, m.line_end, m.section_title, "
          "m.breadcrumb, m.level, m.embedding::text AS embedding FROM memories m WHERE m.org_id = $1 "
          "AND m.kind = 'document_chunk' ORDER BY m.metadata->>'collection', m.source_path, m.level, m.line_start, "
          "m.line_end, m.id")
DOCUMENTS = ("SELECT collection, path, agent_id, content_hash, language, line_count, byte_count, l0_chunks, "
             "l1_chunks, l2_chunks, embedder, metadata, chunker FROM documents WHERE org_id = $1 "
             "ORDER BY collection, path")


class Vector:
    """A chunk's stored vector, equal to another within cosine 0.99: the embedder's two lanes (a few texts
    on the query lane, a batch on the other) run graphs whose vectors differ in the last digits, and which
    lane an ingest's texts take depends on what else the embedder is doing."""

    def __init__(self, text: str) -> None:
        self.values = np.array(json.loads(text), dtype=np.float64)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vector):
            return NotImplemented
        cosine = self.values @ other.values / (np.linalg.norm(self.values) * np.linalg.norm(other.values))
        return bool(cosine >= 0.99)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Vector({self.values[:3].round(4).tolist()}...)"


async def stored(owner_dsn: str, tenant: Tenant) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The org's documents and chunks as the database holds them (as the owner: not what the API says)."""
    return ([dict(r) for r in await owner_rows(owner_dsn, DOCUMENTS, tenant.org_id)],
            [{**dict(r), "embedding": Vector(r["embedding"])} for r in await owner_rows(owner_dsn, CHUNKS,
                                                                                       tenant.org_id)])


async def mirror(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """The files into collection ``kb`` (owned by the agent, with metadata), and one org-wide file."""
    r = await client.post("/v1/documents", headers=tenant.headers, json={
        "collection": "kb", "agent_id": AGENT,
        "files": [{"path": p, "content": c, "metadata": {"team": "geo"}} for p, c in FILES.items()]})
    assert r.status_code == 200, r.text
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": "README.md", "content": "# Handbook\n\nAsk Maya first.\n"}]})
    assert r.status_code == 200, r.text


async def document_lines(client: AsyncTestClient[Any], tenant: Tenant) -> list[dict[str, Any]]:
    await mirror(client, tenant)
    await write(client, tenant, {"text": "Maya runs the geo team.", "agent_id": AGENT})
    return await export_org(client, tenant)


async def test_documents_come_back_as_freshly_ingested_and_stay_in_the_callers_org(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant, owner_dsn: str,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    lines = await document_lines(client, tenant)
    documents = [line for line in lines if line["type"] == "document"]
    assert {(d["collection"], d["path"]): d["content"] for d in documents} == {
        **{("kb", p): c for p, c in FILES.items()}, ("default", "README.md"): "# Handbook\n\nAsk Maya first.\n"}
    chunk_lines = sum(line["type"] == "chunk" for line in lines)
    original = await stored(owner_dsn, tenant)
    assert any(c["source_path"] == "data/long.txt" and c["line_start"] == c["line_end"] == 1 and c["level"] == 2
               for c in original[1])

    fresh = await make_tenant("restored")
    result = await import_lines(client, fresh, lines)
    assert result["imported"]["document"] == 5 and result["imported"]["memory"] == 1
    assert result["skipped"] == {"document": 0, "chunk": chunk_lines}
    assert await stored(owner_dsn, fresh) == original  # every chunk, its span, metadata and vector

    r = await client.post("/v1/memories/search", headers=fresh.headers,
                          json={"query": "haversine", "modes": ["exact", "symbol"],
                                "filters": {"sources": ["documents"]}})
    assert r.status_code == 200, r.text
    assert {x["path"] for x in r.json()["results"]} == {"geo/sphere.py"}
    r = await client.post("/v1/memories/search", headers=fresh.headers,
                          json={"query": "when does the train to Porto leave", "strategy": "semantic",
                                "filters": {"sources": ["documents"], "collections": ["kb"]}})
    assert r.status_code == 200 and r.json()["results"][0]["source"] == "notes/crlf.md", r.text
    revision = (await client.get("/v1/documents/index", headers=fresh.headers)).json()["revision"]
    assert revision > 0

    # Run again: nothing written twice, nothing duplicated, the index revision unchanged.
    again = await import_lines(client, fresh, lines)
    assert again["imported"]["document"] == 0 and again["existing"]["document"] == 5
    assert await stored(owner_dsn, fresh) == original
    assert (await client.get("/v1/documents/index", headers=fresh.headers)).json()["revision"] == revision

    # A file the org changed since is written back as exported.
    r = await client.post("/v1/documents", headers=fresh.headers,
                          json={"files": [{"path": "README.md", "content": "# Handbook\n\nAsk Sam.\n"}]})
    assert r.status_code == 200, r.text
    back = await import_lines(client, fresh, [d for d in documents if d["path"] == "README.md"])
    assert back["imported"]["document"] == 1 and await stored(owner_dsn, fresh) == original

    # The exporting org is untouched, and a third org holds nothing of either.
    assert await stored(owner_dsn, tenant) == original
    assert await stored(owner_dsn, other_tenant) == ([], [])
    r = await client.get("/v1/documents", headers=other_tenant.headers)
    assert r.status_code == 200 and r.json()["items"] == []


async def test_an_older_export_without_content_restores_the_rest(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant, owner_dsn: str) -> None:
    lines = await document_lines(client, tenant)
    old = [{k: v for k, v in line.items() if k != "content"} for line in lines]
    result = await import_lines(client, other_tenant, old)
    assert result["imported"]["memory"] == 1 and result["imported"]["document"] == 0
    assert result["skipped"]["document"] == 5 and result["skipped"]["chunk"] > 5
    assert await stored(owner_dsn, other_tenant) == ([], [])
    # A file whose chunks no longer give back its content is exported without it: skipped, not made up.
    await owner_rows(owner_dsn, "UPDATE memories SET text = 'changed' WHERE org_id = $1 AND level = 2 "
                                "AND source_path = 'README.md'", tenant.org_id)
    documents = {d["path"]: d for d in await export_org(client, tenant) if d["type"] == "document"}
    assert documents["README.md"]["content"] is None and documents["geo/sphere.py"]["content"] == SPHERE


async def test_a_bad_document_line_names_its_field_and_writes_nothing(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant, owner_dsn: str) -> None:
    lines = await document_lines(client, tenant)
    memory = next(line for line in lines if line["type"] == "memory")
    doc = next(line for line in lines if line["type"] == "document" and line["path"] == "geo/sphere.py")
    unhashed = {k: v for k, v in doc.items() if k != "content_hash"}
    cases: list[tuple[list[dict[str, Any]], int, str, str]] = [
        ([{**doc, "path": "geo/../sphere.py"}], 422, "bad_path", "lines[1].path"),
        ([{k: v for k, v in doc.items() if k != "path"}], 422, "validation_error", "lines[1].path"),
        ([{**unhashed, "content": "a\x00b"}], 422, "binary_content", "lines[1].content"),
        ([{**doc, "content": SPHERE + "# edited\n"}], 422, "validation_error", "lines[1].content"),
        ([{**unhashed, "content": "x" * 1_000_001}], 422, "file_too_large", "lines[1].content"),
        ([{**doc, "metadata": {"language": "go"}}], 422, "validation_error", "lines[1].metadata"),
        ([{**doc, "metadata": "geo"}], 422, "invalid_line", "lines[1].metadata"),
        ([{**doc, "metadata": {"team": "g\x00eo"}}], 422, "validation_error", "lines[1].metadata"),
        ([{**doc, "metadata": {"team": "geo" * 7000}}], 422, "metadata_too_large", "lines[1].metadata"),
        ([{**doc, "collection": "no spaces"}], 422, "invalid_line", "lines[1].collection"),
        ([{**doc, "agent_id": "a b"}], 422, "invalid_line", "lines[1].agent_id"),
        ([doc, {**doc, "agent_id": None}], 422, "duplicate_path", "lines[2].path"),
    ]
    for extra, status, code, field in cases:
        r = await client.post("/v1/import", json={"lines": [memory, *extra]}, headers=other_tenant.headers)
        assert_error(r, status, code)
        assert r.json()["error"]["details"]["field"] == field, (field, r.json())
        assert field.split(".")[0] in r.json()["error"]["message"] and "files[0]" not in r.text, r.text
    many = [{**unhashed, "path": f"f{i}.py", "content": "x = 1\n"} for i in range(257)]
    r = await client.post("/v1/import", json={"lines": many}, headers=other_tenant.headers)
    assert_error(r, 413, "batch_too_large")
    assert await list_all(client, other_tenant, include_superseded="true") == []
    assert await stored(owner_dsn, other_tenant) == ([], [])


async def test_an_export_reads_a_few_documents_at_a_time(client: AsyncTestClient[Any], tenant: Tenant,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each document row holds its file: the export fetches them a few at a time (memory stays flat however
    many files), and the other rows many at a time."""
    fetched: list[list[str]] = []
    fetch = asyncpg.cursor.Cursor.fetch

    async def recorded(self: asyncpg.cursor.Cursor, n: int, **options: Any) -> list[Any]:
        rows: list[Any] = await fetch(self, n, **options)
        fetched.append([row["kind"] for row in rows])
        return rows

    monkeypatch.setattr(asyncpg.cursor.Cursor, "fetch", recorded)
    monkeypatch.setattr(stream, "_PREFETCH_DOCUMENTS", 2)
    lines = await document_lines(client, tenant)
    assert sum(kinds.count("document") for kinds in fetched) == 5
    assert all(len(kinds) <= 2 for kinds in fetched if "document" in kinds), fetched
    assert max(len(kinds) for kinds in fetched) > 2 and len(lines) > 10

"""``pgcontext import`` (the importer) against the in-process app: only changed files are sent,
vanished files are deleted, .gitignore is honoured (and, as version-control metadata, not imported
unless asked for), another collection is left alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient
from rich.console import Console

from service.app import create_app
from service.documents.importer import ImportFailed, ImportOptions, print_summary, run_import
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant


@pytest.fixture
def http(client: AsyncTestClient[Any]) -> httpx.AsyncClient:
    """The in-process app's test client is an httpx.AsyncClient: the importer talks to it as to a server."""
    return client


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)


async def listing(http: httpx.AsyncClient, tenant: Tenant, collection: str = "default") -> dict[str, str]:
    r = await http.get("/v1/documents", params={"collection": collection, "limit": 1000}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    return {i["path"]: i["content_hash"] for i in r.json()["items"]}


async def test_import_sends_only_changes_deletes_vanished_files_and_honours_gitignore(
        http: httpx.AsyncClient, tenant: Tenant, tmp_path: Path) -> None:
    write(tmp_path, {
        ".gitignore": "build/\n*.log\n!keep.log\n",
        "src/app.py": "def main() -> None:\n    print('hi')\n",
        "src/util.py": "X = 1\n",
        "docs/readme.md": "# Readme\n\nHello.\n",
        "build/out.py": "generated = True\n",
        "debug.log": "noise\n",
        "keep.log": "kept on purpose\n",
        "image.png": b"\x89PNG\r\n\x1a\n\x00\x00binary",
        "latin1.txt": "caf\xe9".encode("latin-1"),
    })
    options = ImportOptions(root=tmp_path, url="http://testserver.local", key=tenant.key, batch_files=2)
    first = await run_import(options, http=http, show_progress=False)
    assert first.ok and first.sent == first.created == 4 and first.unchanged == 0 and first.deleted == 0
    assert {(s.path, s.reason) for s in first.skipped} == {
        ("image.png", "binary"), ("latin1.txt", "not_utf8"), (".gitignore", "vcs")}
    assert first.chunks > 5 and first.revision is not None
    server = await listing(http, tenant)
    assert set(server) == {"src/app.py", "src/util.py", "docs/readme.md", "keep.log"}

    again = await run_import(options, http=http, show_progress=False)
    assert again.sent == 0 and again.unchanged == 4 and again.deleted == 0 and again.chunks == 0
    assert again.revision is None  # nothing was written, so no new revision was reported
    r = await http.get("/v1/documents/index", headers=tenant.headers)
    assert r.json()["revision"] == first.revision

    (tmp_path / "src/util.py").write_text("X = 2\n")
    (tmp_path / "docs/readme.md").unlink()
    write(tmp_path, {"src/new.py": "def new() -> int:\n    return 1\n"})
    third = await run_import(options, http=http, show_progress=False)
    assert (third.created, third.updated, third.unchanged, third.deleted) == (1, 1, 2, 1)
    assert third.deleted_paths == ["docs/readme.md"]
    after = await listing(http, tenant)
    assert set(after) == {"src/app.py", "src/util.py", "src/new.py", "keep.log"}
    with_vcs = await run_import(dataclasses.replace(options, include_vcs=True), http=http, show_progress=False)
    assert with_vcs.created == 1 and ".gitignore" in await listing(http, tenant)
    assert after["src/app.py"] == server["src/app.py"]

    console = Console(record=True, width=120)
    print_summary(third, console)
    text = console.export_text()
    assert "deleted" in text and "files/s" in text


async def test_import_is_scoped_to_its_collection(http: httpx.AsyncClient, tenant: Tenant, tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    write(one, {"a.md": "# A\n"})
    write(two, {"b.md": "# B\n"})
    url = "http://testserver.local"
    await run_import(ImportOptions(root=one, url=url, key=tenant.key, collection="one"), http=http,
                     show_progress=False)
    result = await run_import(ImportOptions(root=two, url=url, key=tenant.key, collection="two", agent_id="bot"),
                              http=http, show_progress=False)
    assert result.deleted == 0
    assert set(await listing(http, tenant, "one")) == {"a.md"}
    assert set(await listing(http, tenant, "two")) == {"b.md"}
    # --no-delete keeps files that vanished locally
    (two / "b.md").unlink()
    write(two, {"c.md": "# C\n"})
    kept = await run_import(ImportOptions(root=two, url=url, key=tenant.key, collection="two", agent_id="bot",
                                          delete=False), http=http, show_progress=False)
    assert kept.deleted == 0 and set(await listing(http, tenant, "two")) == {"b.md", "c.md"}


async def test_import_reports_rejected_files_and_bad_keys(
        http: httpx.AsyncClient, tenant: Tenant, tmp_path: Path) -> None:
    write(tmp_path, {"a.txt": "fine\n", "big.txt": "x" * 1_000_001, "c.txt": "also fine\n"})
    # a server-side rejection (here: a client size limit above the server's) isolates the file; the rest go
    options = ImportOptions(root=tmp_path, url="http://testserver.local", key=tenant.key, max_file_bytes=10_000_000)
    summary = await run_import(options, http=http, show_progress=False)
    assert summary.sent == 2 and not summary.ok
    assert [(p, why.split(":")[0]) for p, why in summary.failed] == [("big.txt", "413 file_too_large")]
    with pytest.raises(ImportFailed, match="API key"):
        await run_import(ImportOptions(root=tmp_path, url="http://testserver.local", key="pgc_wrong"), http=http,
                         show_progress=False)


async def test_import_reads_the_listing_in_the_pages_the_server_serves(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, tmp_path: Path) -> None:
    """A server configured for smaller listing pages (PGCONTEXT_DOCUMENTS_MAX_LIST_PAGE) answered the
    importer's pages of 1,000 with a 400, and every import failed before sending anything."""
    small = dataclasses.replace(settings, documents=dataclasses.replace(settings.documents, max_list_page=2))
    write(tmp_path, {f"doc{i}.md": f"# Doc {i}\n" for i in range(5)})
    async with AsyncTestClient(app=create_app(small, endpoints, embedder=embedder)) as http:
        options = ImportOptions(root=tmp_path, url="http://testserver.local", key=tenant.key)
        first = await run_import(options, http=http, show_progress=False)
        assert first.ok and first.created == 5
        (tmp_path / "doc0.md").unlink()
        again = await run_import(options, http=http, show_progress=False)
    assert again.ok and again.unchanged == 4 and again.sent == 0 and again.deleted_paths == ["doc0.md"]

"""The client side of ``pgcontext import PATH``: mirror a directory tree into a document collection.

1. Ask the server for its current embedder (``GET /v1/documents/index``) and for every document of
   the collection with its content hash (``GET /v1/documents``, paginated; a server that serves smaller
   pages than asked for says so in its 400, and is asked again with its size).
2. Walk ``PATH`` with :func:`~service.documents.walk.walk_tree` (``.gitignore`` honoured, ``.git``,
   version-control metadata and ignore lists unless ``include_vcs``, symlinks, binary, non-UTF-8 and
   files over ``max_file_bytes`` skipped with a reason) and hash each
   file. A file whose hash, owner (``--agent-id``) and embedder match the server's is *unchanged* and
   not sent; the content of the others is kept for sending (so memory holds changed files only).
3. Send the changed files in batches (``batch_files`` files / ``batch_bytes`` bytes per request). A
   batch the server rejects with a 4xx is split until the bad file is isolated; that file is
   reported as failed with the server's message and the rest still go. 5xx and connection errors
   are retried (3 attempts, backoff), then the import stops.
4. Delete the collection's documents whose path no longer exists locally (unless ``delete=False``).
   The collection is a mirror of PATH: use one collection per tree.

A rich progress bar shows files and chunks per second; :func:`print_summary` prints the totals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from service.documents.chunking import content_hash
from service.documents.types import DEFAULT_COLLECTION
from service.documents.walk import SkippedFile, WalkedFile, walk_tree

RETRIES = 3
DELETE_BATCH = 50
LIST_PAGE = 1000


class ImportFailed(Exception):
    """The import cannot continue (bad key, server down after retries, unexpected response)."""


@dataclass(frozen=True, slots=True)
class ImportOptions:
    root: Path
    url: str
    key: str
    collection: str = DEFAULT_COLLECTION
    agent_id: str | None = None
    batch_files: int = 64
    batch_bytes: int = 2_000_000
    max_file_bytes: int = 1_000_000
    delete: bool = True
    timeout_s: float = 300.0
    include_vcs: bool = False
    """Also import version-control metadata and ignore lists (``.gitignore``, ``.hg/``, ...)."""


@dataclass
class ImportSummary:
    scanned: int = 0
    sent: int = 0
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    chunks: int = 0
    revision: int | None = None
    elapsed_s: float = 0.0
    skipped: list[SkippedFile] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    deleted_paths: list[str] = field(default_factory=list)
    server_timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass(frozen=True, slots=True)
class ServerFile:
    content_hash: str
    agent_id: str | None
    embedder: str | None
    chunker: int | None = None
    """The chunking version that cut it (None: a service that does not say)."""


@dataclass
class Plan:
    """What an import will do: the result of comparing the local tree with the server's listing."""

    send: list[WalkedFile]
    unchanged: list[str]
    delete: list[str]
    skipped: list[SkippedFile]
    scanned: int


def plan(root: Path, server: dict[str, ServerFile], *, agent_id: str | None, embedder: str | None,
         max_file_bytes: int, delete: bool, include_vcs: bool = False, chunker: int | None = None) -> Plan:
    """Walk ``root`` and decide, per file, send or unchanged; and which server paths to delete. ``embedder``
    and ``chunker``: the service's current ones (None: not known), a file stored by others is sent."""
    skipped: list[SkippedFile] = []
    send: list[WalkedFile] = []
    unchanged: list[str] = []
    local: set[str] = set()
    for walked in walk_tree(root, max_file_bytes=max_file_bytes, on_skip=skipped.append, include_vcs=include_vcs):
        local.add(walked.path)
        known = server.get(walked.path)
        if (known is not None and known.content_hash == content_hash(walked.content)
                and known.agent_id == agent_id and (embedder is None or known.embedder == embedder)
                and (chunker is None or known.chunker is None or known.chunker == chunker)):
            unchanged.append(walked.path)
        else:
            send.append(walked)
    gone = sorted(set(server) - local) if delete else []
    return Plan(send=send, unchanged=unchanged, delete=gone, skipped=skipped, scanned=len(local))


def batches(files: list[WalkedFile], max_files: int, max_bytes: int) -> list[list[WalkedFile]]:
    """Consecutive groups of at most ``max_files`` files and ``max_bytes`` bytes (a bigger file goes alone)."""
    out: list[list[WalkedFile]] = []
    current: list[WalkedFile] = []
    size = 0
    for f in files:
        if current and (len(current) >= max_files or size + f.size > max_bytes):
            out.append(current)
            current, size = [], 0
        current.append(f)
        size += f.size
    if current:
        out.append(current)
    return out


class _RateColumn(ProgressColumn):
    """``12.3 files/s · 456.7 chunks/s`` from the task's completed count and ``chunks`` field."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        if elapsed <= 0:
            return Text("– files/s · – chunks/s", style="progress.data.speed")
        chunks = float(task.fields.get("chunks", 0))
        return Text(f"{task.completed / elapsed:,.1f} files/s · {chunks / elapsed:,.1f} chunks/s",
                    style="progress.data.speed")


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return f"{response.status_code} {body['error']['code']}: {body['error']['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{response.status_code} {response.text[:200]}"


def _page_limit(response: httpx.Response) -> int | None:
    """The largest page a 400 for ``limit`` names (``details.limit``), else None."""
    if response.status_code != 400:
        return None
    try:
        details = response.json()["error"]["details"]
        limit = details["limit"] if details.get("field") == "limit" else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return limit if isinstance(limit, int) and limit >= 1 else None


MAX_RATE_WAIT_S = 120.0
"""Longest an import waits out 429s in all for one request before it gives up."""


def retry_after(response: httpx.Response) -> float:
    """Seconds a 429 or 503 asks to wait (``Retry-After`` in seconds, as the service sends it; else 1)."""
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return 1.0


class _Client:
    def __init__(self, http: httpx.AsyncClient, options: ImportOptions) -> None:
        self.http = http
        self.options = options
        self.headers = {"Authorization": f"Bearer {options.key}"}

    async def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """The response, after up to ``RETRIES`` tries on a transport error or a 5xx, and waiting out a
        429 as its ``Retry-After`` says (at most ``MAX_RATE_WAIT_S`` in all: the org's request budget is
        spent, and a batch sent again then is accepted)."""
        delay, waited, attempt = 0.5, 0.0, 1
        while True:
            try:
                response = await self.http.request(method, url, headers=self.headers, **kwargs)
            except httpx.TransportError as exc:
                if attempt == RETRIES:
                    raise ImportFailed(f"cannot reach {self.options.url}: {exc}") from exc
            else:
                if response.status_code == 401:
                    raise ImportFailed(f"the server refused the API key ({_error_message(response)})")
                if response.status_code == 429:
                    pause = retry_after(response)
                    if waited + pause > MAX_RATE_WAIT_S:
                        raise ImportFailed(f"{method} {url} still answered {_error_message(response)} after "
                                           f"waiting {waited:.0f} s; run the import again later (it resumes)")
                    waited += pause
                    await asyncio.sleep(pause)
                    continue
                if response.status_code < 500 or attempt == RETRIES:
                    return response
            attempt += 1
            await asyncio.sleep(delay)
            delay *= 2

    async def server_files(self) -> tuple[dict[str, ServerFile], str | None, int | None]:
        """The collection's files as the service lists them, and its current embedder and chunking version."""
        index = await self.request("GET", "/v1/documents/index")
        if index.status_code != 200:
            raise ImportFailed(f"GET /v1/documents/index failed: {_error_message(index)}")
        embedder = index.json().get("semantic", {}).get("embedder")
        chunker = index.json().get("chunker")
        files: dict[str, ServerFile] = {}
        cursor: str | None = None
        page_size = LIST_PAGE
        while True:
            params: dict[str, Any] = {"collection": self.options.collection, "limit": page_size}
            if cursor:
                params["cursor"] = cursor
            response = await self.request("GET", "/v1/documents", params=params)
            smaller = _page_limit(response)
            if smaller is not None and smaller < page_size:
                page_size = smaller  # the server serves smaller pages (PGCONTEXT_DOCUMENTS_MAX_LIST_PAGE)
                continue
            if response.status_code != 200:
                raise ImportFailed(f"GET /v1/documents failed: {_error_message(response)}")
            page = response.json()
            for item in page["items"]:
                files[item["path"]] = ServerFile(item["content_hash"], item["agent_id"], item["embedder"],
                                                 item.get("chunker"))
            cursor = page["next_cursor"]
            if not cursor:
                return files, embedder, chunker

    async def send(self, batch: list[WalkedFile], summary: ImportSummary,
                   on_done: Callable[[int, int], None]) -> None:
        """POST a batch; on a 4xx split it until the offending file is alone and record it as failed."""
        body: dict[str, Any] = {"collection": self.options.collection,
                                "files": [{"path": f.path, "content": f.content} for f in batch]}
        if self.options.agent_id is not None:
            body["agent_id"] = self.options.agent_id
        response = await self.request("POST", "/v1/documents", json=body)
        if response.status_code == 200:
            result = response.json()
            summary.sent += len(batch)
            summary.created += result["created"]
            summary.updated += result["updated"]
            summary.unchanged += result["unchanged"]
            summary.chunks += result["chunks_written"]
            summary.revision = result["revision"]
            for name, value in result["timings"].items():
                summary.server_timings_ms[name] = summary.server_timings_ms.get(name, 0.0) + value
            on_done(len(batch), result["chunks_written"])
            return
        if 400 <= response.status_code < 500:
            if len(batch) > 1:
                half = len(batch) // 2
                await self.send(batch[:half], summary, on_done)
                await self.send(batch[half:], summary, on_done)
                return
            summary.failed.append((batch[0].path, _error_message(response)))
            on_done(1, 0)
            return
        raise ImportFailed(f"POST /v1/documents failed: {_error_message(response)}")

    async def delete(self, paths: list[str], summary: ImportSummary) -> None:
        for start in range(0, len(paths), DELETE_BATCH):
            chunk = paths[start : start + DELETE_BATCH]
            params = [("collection", self.options.collection), *(("path", p) for p in chunk)]
            response = await self.request("DELETE", "/v1/documents", params=params)
            if response.status_code == 200:
                result = response.json()
                summary.deleted += len(result["deleted"])
                summary.deleted_paths.extend(result["deleted"])
                summary.revision = result["revision"]
            elif response.status_code != 404:  # 404: all already gone (a concurrent import)
                for p in chunk:
                    summary.failed.append((p, f"delete: {_error_message(response)}"))


async def run_import(options: ImportOptions, *, http: httpx.AsyncClient | None = None,
                     console: Console | None = None, show_progress: bool = True) -> ImportSummary:
    """Mirror ``options.root`` into ``options.collection`` (see the module docstring)."""
    started = time.perf_counter()
    console = console or Console(stderr=True)
    own = http is None
    client = http or httpx.AsyncClient(base_url=options.url, timeout=options.timeout_s)
    try:
        api = _Client(client, options)
        server, embedder, chunker = await api.server_files()
        work = await asyncio.to_thread(plan, options.root, server, agent_id=options.agent_id, embedder=embedder,
                                       max_file_bytes=options.max_file_bytes, delete=options.delete,
                                       include_vcs=options.include_vcs, chunker=chunker)
        summary = ImportSummary(scanned=work.scanned, unchanged=len(work.unchanged), skipped=work.skipped)
        progress = Progress(TextColumn("[bold]importing"), BarColumn(), TaskProgressColumn(),
                            TextColumn("{task.completed}/{task.total} files"), _RateColumn(), TimeElapsedColumn(),
                            console=console, disable=not show_progress, transient=False)
        with progress:
            task = progress.add_task("import", total=len(work.send), chunks=0)
            chunks_done = 0

            def advance(files: int, chunks: int) -> None:
                nonlocal chunks_done
                chunks_done += chunks
                progress.update(task, advance=files, chunks=chunks_done)

            for batch in batches(work.send, options.batch_files, options.batch_bytes):
                await api.send(batch, summary, advance)
            if work.delete:
                await api.delete(work.delete, summary)
        summary.elapsed_s = time.perf_counter() - started
        return summary
    finally:
        if own:
            await client.aclose()


def print_summary(summary: ImportSummary, console: Console) -> None:
    table = Table(title="pgcontext import", show_header=False)
    rate = summary.sent / summary.elapsed_s if summary.elapsed_s else 0.0
    chunk_rate = summary.chunks / summary.elapsed_s if summary.elapsed_s else 0.0
    rows = [
        ("files scanned", str(summary.scanned)),
        ("sent", f"{summary.sent} ({summary.created} created, {summary.updated} updated)"),
        ("unchanged", str(summary.unchanged)),
        ("deleted", str(summary.deleted)),
        ("skipped", str(len(summary.skipped))),
        ("failed", str(len(summary.failed))),
        ("chunks written", str(summary.chunks)),
        ("revision", "-" if summary.revision is None else str(summary.revision)),
        ("elapsed", f"{summary.elapsed_s:.1f} s ({rate:.1f} files/s, {chunk_rate:.1f} chunks/s)"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    reasons: dict[str, int] = {}
    for s in summary.skipped:
        reasons[s.reason] = reasons.get(s.reason, 0) + 1
    if reasons:
        console.print("skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())))
        for s in summary.skipped[:20]:
            console.print(f"  {s.path}: {s.reason}{' (' + s.detail + ')' if s.detail else ''}")
    for p, why in summary.failed[:50]:
        console.print(f"[red]failed[/red] {p}: {why}")

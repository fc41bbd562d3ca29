"""``pgcontext export`` and ``pgcontext restore``: an org's (or one agent's) export saved to a file, and a
saved export written into the org of another key, over the HTTP API (``GET /v1/export``, ``POST
/v1/import``; see docs/operations.md, "Moving an org").

``restore`` sends the file's lines in batches (at most ``batch_memories`` memory lines and
``batch_bytes`` of JSON each: the service's limits are 256 memories and 8 MiB per request). Each
batch is one transaction on the service; ids are kept, so running ``restore`` again after a failure
writes only what is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from service.files import replace_atomically
from service.settings import Settings

TIMEOUT_S = 300.0


class TransferFailed(Exception):
    """An export or a restore that did not complete (the message says what to do)."""


@dataclass(slots=True)
class Totals:
    imported: Counter[str] = field(default_factory=Counter)
    existing: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    requests: int = 0


def _client(url: str, key: str, http: httpx.AsyncClient | None) -> tuple[httpx.AsyncClient, dict[str, str]]:
    return (http or httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S)), {"Authorization": f"Bearer {key}"}


def _failure(response: httpx.Response, what: str) -> TransferFailed:
    try:
        error = response.json()["error"]
        detail = f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        detail = response.text[:300]
    return TransferFailed(f"{what} answered {response.status_code} ({detail})")


async def export_to(out: IO[bytes], *, url: str, key: str, agent_id: str | None = None,
                    http: httpx.AsyncClient | None = None) -> dict[str, int]:
    """Write the export to ``out``; returns the counts of its ``end`` line (raises when there is none)."""
    client, headers = _client(url, key, http)
    params = {"agent_id": agent_id} if agent_id else {}
    last = b""
    try:
        async with client.stream("GET", "/v1/export", params=params, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                raise _failure(response, "GET /v1/export")
            async for line in response.aiter_lines():
                if line:
                    out.write(line.encode() + b"\n")
                    last = line.encode()
    except httpx.HTTPError as exc:
        raise TransferFailed(f"the export broke off ({exc}); run it again") from exc
    finally:
        if http is None:
            await client.aclose()
    end = json.loads(last) if last else {}
    if end.get("type") != "end":
        raise TransferFailed("the export has no end line (it broke off); run it again")
    return dict(end["counts"])


def read_export(path: Path) -> list[dict[str, Any]]:
    """The lines of a saved export, checked whole: an export that broke off is refused."""
    lines: list[dict[str, Any]] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except ValueError as exc:
                raise TransferFailed(f"{path}:{number} is not JSON") from exc
            if not isinstance(line, dict) or "type" not in line:
                raise TransferFailed(f"{path}:{number} is not an export line")
            lines.append(line)
    if not lines or lines[-1]["type"] != "end" or any(line["type"] == "error" for line in lines):
        raise TransferFailed(f"{path} is not a complete export (no end line): export again")
    return lines


def batches(lines: list[dict[str, Any]], *, max_memories: int, max_bytes: int) -> Iterator[list[dict[str, Any]]]:
    """Lines to send, in order, at most ``max_memories`` memory lines and about ``max_bytes`` of JSON each."""
    batch: list[dict[str, Any]] = []
    memories = size = 0
    for line in lines:
        if line["type"] in ("export", "end"):
            continue
        cost = len(json.dumps(line))
        is_memory = line["type"] == "memory"
        if batch and (memories + is_memory > max_memories or size + cost > max_bytes):
            yield batch
            batch, memories, size = [], 0, 0
        batch.append(line)
        memories += is_memory
        size += cost
    if batch:
        yield batch


async def restore_from(path: Path, *, url: str, key: str, batch_memories: int = 200, batch_bytes: int = 4_000_000,
                       http: httpx.AsyncClient | None = None) -> Totals:
    """Send the saved export at ``path`` to ``POST /v1/import``; returns what the service wrote."""
    lines = read_export(path)
    client, headers = _client(url, key, http)
    totals = Totals()
    try:
        for batch in batches(lines, max_memories=batch_memories, max_bytes=batch_bytes):
            try:
                response = await client.post("/v1/import", json={"lines": batch}, headers=headers)
            except httpx.HTTPError as exc:
                raise TransferFailed(f"POST /v1/import failed ({exc}); run restore again (it resumes)") from exc
            if response.status_code != 200:
                raise _failure(response, "POST /v1/import")
            result = response.json()
            totals.requests += 1
            for name, counter in (("imported", totals.imported), ("existing", totals.existing),
                                  ("skipped", totals.skipped)):
                counter.update(result[name])
    finally:
        if http is None:
            await client.aclose()
    return totals


def service_access(settings: Settings, args: argparse.Namespace) -> tuple[str, str] | None:
    """The service URL and API key from ``--url``/``--key`` or the environment (None, said on stderr: no key)."""
    url = args.url or os.environ.get("PGCONTEXT_URL") or f"http://{settings.server.host}:{settings.server.port}"
    key = args.key or os.environ.get("PGCONTEXT_API_KEY")
    if not key:
        print("error: an API key is required (--key or PGCONTEXT_API_KEY)", file=sys.stderr)
        return None
    return url, key


def _export_into(tmp: Path, counts: dict[str, int], url: str, key: str, agent_id: str | None) -> None:
    """Writes the export into ``tmp``, the temporary file :func:`replace_atomically` renames over ``--out``."""
    with open(tmp, "wb") as out:
        counts.update(asyncio.run(export_to(out, url=url, key=key, agent_id=agent_id)))


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    access = service_access(settings, args)
    if access is None:
        return 2
    url, key = access
    counts: dict[str, int] = {}
    try:
        if args.out:  # a file holds a whole export or none: an export that broke off leaves no part
            replace_atomically(Path(args.out), lambda tmp: _export_into(tmp, counts, url, key, args.agent_id))
        else:
            counts.update(asyncio.run(export_to(sys.stdout.buffer, url=url, key=key, agent_id=args.agent_id)))
    except (TransferFailed, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("exported " + ", ".join(f"{n} {kind}" for kind, n in counts.items()), file=sys.stderr)
    return 0


def cmd_restore(settings: Settings, args: argparse.Namespace) -> int:
    access = service_access(settings, args)
    if access is None:
        return 2
    url, key = access
    try:
        totals = asyncio.run(restore_from(Path(args.file), url=url, key=key, batch_memories=args.batch))
    except (TransferFailed, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, counter in (("imported", totals.imported), ("existing", totals.existing),
                          ("skipped", totals.skipped)):
        print(f"{name}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(counter.items())))
    return 0

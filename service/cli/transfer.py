"""``pgcontext export`` and ``pgcontext restore``: an org's (or one agent's) export saved to a file, and a
saved export written into the org of another key, over the HTTP API (``GET /v1/export``, ``POST
/v1/import``; see docs/operations.md, "Moving an org").

``restore`` sends the file's lines in batches (at most ``batch_memories`` memory lines, ``MAX_EVENTS``
event lines and as many conversation lines, ``BATCH_DOCUMENTS`` document lines and ``batch_bytes`` of
JSON each: the service's limits are 256 memories, 20,000 events and conversations, 256 files of 6 MiB and
8 MiB per request), in the file's order: an export's ``conversation`` lines come before the messages, so
each conversation is sent before or with its messages. Each
batch is one transaction on the service (its documents: one per collection and owner); ids are kept and
unchanged files left as they are, so running ``restore`` again after a failure or a Ctrl-C writes only
what is missing. ``chunk`` lines and ``document`` lines without their content (an older export), which
the service does not restore (it counts them ``skipped``), are counted here and not sent: a document's
chunks are cut again from its content, and each request's rate-limit price grows with its size. A 429
or 503 is waited out as its ``Retry-After`` asks and the same batch sent again, up to ``max_wait_s`` per
batch; a connection that drops is tried again up to ``RETRIES`` times (a batch the service wrote before the
answer was lost is then counted ``existing``). A batch the service refuses ends the restore with its answer,
each line it names (``lines[i]`` of the batch) said as the file's line. The file is read twice, a line at a
time: once to check it is a whole export, once to send it, so memory stays flat however large the export
(``export``, likewise, writes what it reads as it reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
from rich.console import Console

from service.cli.answers import RETRY_STATUSES, describe, progress_bar
from service.documents.importer import RETRIES, retry_after
from service.export.restore import MAX_EVENTS
from service.files import replace_atomically
from service.settings import Settings

TIMEOUT_S = 300.0
MAX_WAIT_S = 120.0
"""How long one batch may wait on 429/503 answers in all before ``restore`` gives up."""
SKIPPED = ("document", "chunk")
"""Line types ``POST /v1/import`` may count ``skipped``: every chunk, and a document without its content."""
BATCH_DOCUMENTS = 200
"""Document lines per request (the service takes ``PGCONTEXT_DOCUMENTS_MAX_FILES``, 256 by default)."""
INTERRUPTED = 130
"""The exit status of a command stopped by Ctrl-C (128 + SIGINT), as a shell reports it."""


class TransferFailed(Exception):
    """An export or a restore that did not complete (the message says what to do)."""


COUNTED = ("conversation", "directive", "document", "event", "memory")
"""Line types the summary always shows (an older service's answers have no ``conversation``)."""


def _zeros(*kinds: str) -> Callable[[], Counter[str]]:
    return lambda: Counter(dict.fromkeys(kinds, 0))


@dataclass(slots=True)
class Totals:
    """What a restore did so far: the service's counts, plus the lines counted ``skipped`` here."""

    imported: Counter[str] = field(default_factory=_zeros(*COUNTED))
    existing: Counter[str] = field(default_factory=_zeros(*COUNTED))
    skipped: Counter[str] = field(default_factory=_zeros(*SKIPPED))
    requests: int = 0
    sent: int = 0
    """Lines the service has answered for."""

    def summary(self) -> list[str]:
        """``imported: 3 conversation, 1 directive, 2 document, 214 event, 96 memory`` and the same for existing
        and skipped."""
        return [f"{name}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(counter.items()))
                for name, counter in (("imported", self.imported), ("existing", self.existing),
                                      ("skipped", self.skipped))]


def _client(url: str, key: str, http: httpx.AsyncClient | None) -> tuple[httpx.AsyncClient, dict[str, str]]:
    return (http or httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S)), {"Authorization": f"Bearer {key}"}


def _failure(response: httpx.Response, what: str) -> TransferFailed:
    return TransferFailed(f"{what} answered {describe(response)}")


_NAMED = re.compile(r"lines\[(\d+)\](?:\.(\w+))?")
"""A line of a request (and a field of it) as the service names it: ``lines[3]``, ``lines[3].valid_until``."""


def _refused(response: httpx.Response, numbers: list[int], source: str) -> TransferFailed:
    """A batch the service refused, each line it names (``lines[i]``, of the batch) said as the file's line."""
    said = f"POST /v1/import answered {describe(response)}"
    whole = {match[1] for match in _NAMED.finditer(said) if match[2] is None}

    def where(match: re.Match[str]) -> str:
        index, name = int(match[1]), match[2]
        if index >= len(numbers):
            return match[0]
        line = f"line {numbers[index]} of {source}"
        if name is None:
            return line
        return name if match[1] in whole else f"{name} of {line}"  # the field alone where its line is said

    return TransferFailed(_NAMED.sub(where, said))


def _unreachable(url: str, exc: Exception) -> TransferFailed:
    return TransferFailed(f"could not connect to {url} ({exc}): is the service running there? "
                          "(--url or PGCONTEXT_URL)")


async def export_to(out: IO[bytes], *, url: str, key: str, agent_id: str | None = None,
                    http: httpx.AsyncClient | None = None) -> dict[str, int]:
    """Write the export to ``out``; returns the counts of its ``end`` line (raises when there is none)."""
    client, headers = _client(url, key, http)
    params = {"agent_id": agent_id} if agent_id else {}
    last = pending = b""
    try:
        async with client.stream("GET", "/v1/export", params=params, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                raise _failure(response, "GET /v1/export")
            # Split at b"\n" alone: a text splitter (``aiter_lines``) also cuts at U+2028, U+2029 and NEL,
            # which JSON may hold raw inside a string.
            async for data in response.aiter_bytes():
                *whole, pending = (pending + data).split(b"\n")
                for line in whole:
                    if line.strip():
                        out.write(line + b"\n")
                        last = line
            if pending.strip():
                out.write(pending + b"\n")
                last = pending
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise _unreachable(url, exc) from exc
    except httpx.HTTPError as exc:
        raise TransferFailed(f"the export broke off ({exc}); run it again") from exc
    finally:
        if http is None:
            await client.aclose()
    end = json.loads(last) if last else {}
    if end.get("type") != "end":
        raise TransferFailed("the export has no end line (it broke off); run it again")
    return dict(end["counts"])


def _not_json(constant: str) -> Any:
    """``NaN`` and ``Infinity``, which Python's reader takes but JSON (and a request body) has not."""
    raise ValueError(f"{constant} is not JSON")


Numbered = tuple[int, dict[str, Any]]
"""A line of a saved export and its line number in the file."""


def _read(path: Path) -> Iterator[Numbered]:
    """The lines of a saved export and their numbers, one at a time (the file is never held in memory)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):  # binary: lines end at b"\n" only
            if not raw.strip():
                continue
            try:
                line = json.loads(raw, parse_constant=_not_json)
            except ValueError as exc:
                raise TransferFailed(f"{path}:{number} is not JSON") from exc
            if not isinstance(line, dict) or "type" not in line:
                raise TransferFailed(f"{path}:{number} is not an export line")
            yield number, line


def skipped(line: dict[str, Any]) -> bool:
    """A line the service counts ``skipped`` (a chunk; a document of an export made before documents carried
    their content)."""
    return line["type"] == "chunk" or (line["type"] == "document" and line.get("content") is None)


def sent(line: dict[str, Any]) -> bool:
    """A line ``restore`` sends: not the ``export`` and ``end`` lines, nor one the service would skip."""
    return line["type"] not in ("export", "end") and not skipped(line)


def check_export(path: Path) -> int:
    """Read a saved export through once, checking it whole (every line an export line, none an ``error``
    and the last the ``end`` line: an export that broke off is refused before anything is sent);
    returns how many of its lines a restore sends. Holds one line at a time."""
    last: str | None = None
    count = 0
    for _, line in _read(path):
        last = line["type"]
        if last == "error":
            break
        count += sent(line)
    if last != "end":
        raise TransferFailed(f"{path} is not a complete export (no end line): export again")
    return count


def read_export(path: Path) -> Iterator[Numbered]:
    """The lines of a saved export and their numbers, checked whole first (:func:`check_export`), then read
    again one at a time: memory stays flat however large the file."""
    check_export(path)
    return _read(path)


def batches(lines: Iterable[dict[str, Any]], *, max_memories: int, max_bytes: int,
            max_events: int = MAX_EVENTS, max_documents: int = BATCH_DOCUMENTS) -> Iterator[list[dict[str, Any]]]:
    """Lines to send (:func:`sent`), in order, at most ``max_memories`` memory lines, ``max_events`` event
    lines and as many conversation lines, ``max_documents`` document lines and about ``max_bytes`` of JSON
    each (a document's content counts in full: the service takes 6 MiB of files per request)."""
    limits = {"memory": max_memories, "event": max_events, "conversation": max_events, "document": max_documents}
    batch: list[dict[str, Any]] = []
    counts: Counter[str] = Counter()
    size = 0
    for line in filter(sent, lines):
        cost = len(json.dumps(line))
        kind = line["type"]
        full = kind in limits and counts[kind] >= limits[kind]
        if batch and (full or size + cost > max_bytes):
            yield batch
            batch, counts, size = [], Counter(), 0
        batch.append(line)
        counts[kind] += 1
        size += cost
    if batch:
        yield batch


async def _post(client: httpx.AsyncClient, headers: dict[str, str], batch: list[dict[str, Any]], *, url: str,
                max_wait_s: float) -> httpx.Response:
    """``POST /v1/import`` of one batch, sent again while the service answers 429 or 503 (after the
    ``Retry-After`` it asks for) until it has waited ``max_wait_s`` in all, and after a transport error
    (up to ``RETRIES`` tries, waiting 0.5 s, then 1 s, ...): an import is idempotent by id."""
    waited, delay, attempt = 0.0, 0.5, 1
    while True:
        try:
            response = await client.post("/v1/import", json={"lines": batch}, headers=headers)
        except httpx.TransportError as exc:
            if attempt < RETRIES:
                attempt += 1
                await asyncio.sleep(delay)
                delay *= 2
                continue
            if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
                raise _unreachable(url, exc) from exc
            raise TransferFailed(f"POST /v1/import failed {RETRIES} times ({type(exc).__name__}: {exc}); "
                                 "run restore again (it resumes)") from exc
        except httpx.HTTPError as exc:
            raise TransferFailed(f"POST /v1/import failed ({exc}); run restore again (it resumes)") from exc
        if response.status_code not in RETRY_STATUSES:
            return response
        wait = retry_after(response)
        if waited + wait > max_wait_s:
            raise TransferFailed(f"POST /v1/import still answered {describe(response)} after waiting "
                                 f"{waited:.0f} s for one batch; run restore again later (it resumes)")
        await asyncio.sleep(wait)
        waited += wait


def _counting(lines: Iterable[Numbered], counted: Counter[str], numbers: deque[int]) -> Iterator[dict[str, Any]]:
    """The lines, counting into ``skipped`` the ones the service would count ``skipped`` as they pass, and
    queueing into ``numbers`` the file's line number of each one sent."""
    for number, line in lines:
        if skipped(line):
            counted[line["type"]] += 1
        elif sent(line):
            numbers.append(number)
        yield line


async def restore_lines(lines: Iterable[Numbered], *, source: str, url: str, key: str, batch_memories: int = 200,
                        batch_bytes: int = 4_000_000, http: httpx.AsyncClient | None = None,
                        totals: Totals | None = None, on_sent: Callable[[int], None] | None = None,
                        max_wait_s: float = MAX_WAIT_S) -> Totals:
    """Send an export's lines (numbered, of the file ``source``) to ``POST /v1/import``; returns (and adds to
    ``totals``, which holds what was done when this raises) what the service wrote. ``on_sent(n)``: ``n``
    more lines answered for. A refused batch raises naming the file's line the service refused."""
    totals = Totals() if totals is None else totals
    client, headers = _client(url, key, http)
    numbers: deque[int] = deque()
    try:
        for batch in batches(_counting(lines, totals.skipped, numbers), max_memories=batch_memories,
                             max_bytes=batch_bytes):
            in_file = [numbers.popleft() for _ in batch]  # (the next batch's first may be queued already)
            response = await _post(client, headers, batch, url=url, max_wait_s=max_wait_s)
            if response.status_code != 200:
                raise _refused(response, in_file, source)
            result = response.json()
            totals.requests += 1
            totals.sent += len(batch)
            for name, counter in (("imported", totals.imported), ("existing", totals.existing),
                                  ("skipped", totals.skipped)):
                counter.update(result[name])
            if on_sent is not None:
                on_sent(len(batch))
    finally:
        if http is None:
            await client.aclose()
    return totals


async def restore_from(path: Path, *, url: str, key: str, batch_memories: int = 200, batch_bytes: int = 4_000_000,
                       http: httpx.AsyncClient | None = None, max_wait_s: float = MAX_WAIT_S) -> Totals:
    """Send the saved export at ``path`` to ``POST /v1/import``; returns what the service wrote."""
    return await restore_lines(read_export(path), source=str(path), url=url, key=key,
                               batch_memories=batch_memories, batch_bytes=batch_bytes, http=http, max_wait_s=max_wait_s)


def service_access(settings: Settings, args: argparse.Namespace) -> tuple[str, str] | None:
    """The service URL and API key from ``--url``/``--key`` or the environment (None, said on stderr: no key)."""
    url = args.url or os.environ.get("PGCONTEXT_URL") or f"http://{settings.server.host}:{settings.server.port}"
    key = args.key or os.environ.get("PGCONTEXT_API_KEY")
    if not key:
        print("error: an API key is required (--key or PGCONTEXT_API_KEY)", file=sys.stderr)
        return None
    return url, key


def check_out(out: Path) -> str | None:
    """Why ``--out`` cannot be written (None: it can), said before anything is asked of the service."""
    if out.is_dir():
        return f"--out {out} is a directory: name a file to write"
    parent = out.parent
    if not parent.is_dir():
        return f"--out {out}: the directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {out}: cannot write in the directory {parent}"
    return None


def _export_into(tmp: Path, counts: dict[str, int], url: str, key: str, agent_id: str | None) -> None:
    """Writes the export into ``tmp``, the temporary file :func:`replace_atomically` renames over ``--out``."""
    with open(tmp, "wb") as out:
        counts.update(asyncio.run(export_to(out, url=url, key=key, agent_id=agent_id)))


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    access = service_access(settings, args)
    if access is None:
        return 2
    url, key = access
    if args.out and (problem := check_out(Path(args.out))):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    counts: dict[str, int] = {}
    try:
        if args.out:  # a file holds a whole export or none: an export that broke off leaves no part
            replace_atomically(Path(args.out), lambda tmp: _export_into(tmp, counts, url, key, args.agent_id))
        else:
            counts.update(asyncio.run(export_to(sys.stdout.buffer, url=url, key=key, agent_id=args.agent_id)))
    except (TransferFailed, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"export interrupted{f'; {args.out} was not written' if args.out else ''}: run it again",
              file=sys.stderr)
        return INTERRUPTED
    print("exported " + ", ".join(f"{n} {kind}" for kind, n in counts.items()), file=sys.stderr)
    return 0


def cmd_restore(settings: Settings, args: argparse.Namespace) -> int:
    """Restore with a progress bar on stderr; on success, failure or Ctrl-C the totals of what was done."""
    access = service_access(settings, args)
    if access is None:
        return 2
    url, key = access
    totals = Totals()
    total: int | None = None
    problem: Exception | None = None
    try:
        path = Path(args.file)
        total = check_export(path)
        with progress_bar("restoring", "lines", console=Console(stderr=True),
                          disable=bool(getattr(args, "quiet", False))) as progress:
            task = progress.add_task("restore", total=total)
            asyncio.run(restore_lines(_read(path), source=str(path), url=url, key=key, batch_memories=args.batch,
                                      totals=totals, on_sent=lambda n: progress.advance(task, n)))
    except (TransferFailed, OSError) as exc:
        problem = exc
    except KeyboardInterrupt:
        print("\n".join(totals.summary()), flush=True)
        done = f" after {totals.sent:,} of {total:,} lines" if total is not None else ""
        print(f"restore interrupted{done}; run it again to resume (it writes only what is missing)",
              file=sys.stderr)
        return INTERRUPTED
    if problem is not None and total is None:  # the file was refused: nothing was sent
        print(f"error: {problem}", file=sys.stderr)
        return 1
    print("\n".join(totals.summary()), flush=True)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return 0

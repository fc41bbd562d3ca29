"""``pgcontext export`` / ``pgcontext restore`` (service.cli.transfer) against the in-process app: an org saved
to a file and restored into a fresh org in several batches answers as the original, its documents
included (those of an older export, without their content, are counted skipped and not sent); a
broken-off file is refused; a second restore writes nothing twice."""

from __future__ import annotations

import io
import json
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.cli.main import build_parser
from service.cli.transfer import TransferFailed, batches, check_export, export_to, read_export, restore_from
from tests.conftest import Tenant
from tests.integration.test_export_import import seed, views

URL = "http://testserver.local"


async def test_export_then_restore_in_batches(client: AsyncTestClient[Any], tenant: Tenant, tmp_path: Path,
                                              make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    ids = await seed(client, tenant)
    before = await views(client, tenant, ids)
    out = io.BytesIO()
    counts = await export_to(out, url=URL, key=tenant.key, http=client)
    assert counts["memory"] == 12 and counts["directive"] == 1 and counts["conversation"] == 1
    plans = (await client.get("/v1/conversations/plans", headers=tenant.headers)).json()
    saved = tmp_path / "org.ndjson"
    saved.write_bytes(out.getvalue())

    fresh = await make_tenant("restored")
    totals = await restore_from(saved, url=URL, key=fresh.key, batch_memories=5, http=client)
    assert totals.requests >= 3  # 12 memories, at most 5 per request
    assert totals.imported["memory"] == 12 and totals.imported["event"] == counts["event"]
    assert await views(client, fresh, ids) == before
    assert totals.imported["conversation"] == 1  # its line sent before (or with) its messages: its own times
    assert (await client.get("/v1/conversations/plans", headers=fresh.headers)).json() == plans
    again = await restore_from(saved, url=URL, key=fresh.key, http=client)
    assert again.imported["memory"] == again.imported["event"] == 0 and again.existing["memory"] == 12
    assert again.imported["conversation"] == 0 and again.existing["conversation"] == 1

    broken = tmp_path / "broken.ndjson"
    broken.write_bytes(b"\n".join(out.getvalue().splitlines()[:-1]))
    with pytest.raises(TransferFailed, match="not a complete export"):
        await restore_from(broken, url=URL, key=fresh.key, http=client)
    with pytest.raises(TransferFailed, match="401"):
        await export_to(io.BytesIO(), url=URL, key="pgc_not-a-key", http=client)


async def test_documents_are_restored_and_those_of_an_older_export_skipped(
        client: AsyncTestClient[Any], tenant: Tenant, tmp_path: Path,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    files = [{"path": f"notes/{n}.md", "content": f"# Note {n}\n\nThe {n} part of the garden plan.\n"}
             for n in ("north", "south", "west")]
    r = await client.post("/v1/documents", json={"collection": "notes", "files": files}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    out = io.BytesIO()
    counts = await export_to(out, url=URL, key=tenant.key, http=client)
    saved = tmp_path / "org.ndjson"
    saved.write_bytes(out.getvalue())

    fresh = await make_tenant("restored")
    totals = await restore_from(saved, url=URL, key=fresh.key, http=client)
    assert totals.imported["document"] == 3 and dict(totals.skipped) == {"document": 0, "chunk": counts["chunk"]}
    r = await client.get("/v1/documents", params={"collection": "notes"}, headers=fresh.headers)
    assert [(d["path"], d["chunks"]) for d in r.json()["items"]] == [
        (d["path"], d["chunks"]) for d in (await client.get("/v1/documents", params={"collection": "notes"},
                                                            headers=tenant.headers)).json()["items"]]
    again = await restore_from(saved, url=URL, key=fresh.key, http=client)
    assert again.imported["document"] == 0 and again.existing["document"] == 3

    old = tmp_path / "old.ndjson"  # an export made before document lines carried their content
    old.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "content"}) + "\n"
                           for line in out.getvalue().splitlines()))
    assert check_export(old) == counts["event"]  # no document line is sent
    other = await make_tenant("older")
    totals = await restore_from(old, url=URL, key=other.key, http=client)
    assert dict(totals.skipped) == {"document": 3, "chunk": counts["chunk"]} and totals.imported["document"] == 0
    r = await client.get("/v1/documents", params={"collection": "notes"}, headers=other.headers)
    assert r.json()["items"] == []


def test_batches_hold_the_limits() -> None:
    lines: list[dict[str, Any]] = [{"type": "export"}, *({"type": "memory", "text": "x" * 50} for _ in range(7)),
             *({"type": "event", "detail": {}} for _ in range(3)), {"type": "end"}]
    sent = list(batches(lines, max_memories=3, max_bytes=10_000))
    assert [sum(line["type"] == "memory" for line in b) for b in sent] == [3, 3, 1]
    assert sum(len(b) for b in sent) == 10 and all(line["type"] not in ("export", "end") for b in sent for line in b)
    assert all(len(b) == 1 for b in batches(lines, max_memories=100, max_bytes=10))
    by_events = list(batches(lines, max_memories=100, max_bytes=10_000, max_events=2))
    assert [sum(line["type"] == "event" for line in b) for b in by_events] == [2, 1]  # the service takes 20,000
    assert [line for b in by_events for line in b] == lines[1:-1]
    files = [{"type": "document", "path": f"{n}.md", "content": "x"} for n in range(5)]
    old = [{"type": "document", "path": "old.md"}, {"type": "chunk", "text": "x"}]  # not sent: counted skipped
    by_documents = list(batches([*files, *old, *lines], max_memories=100, max_bytes=10_000, max_documents=2))
    assert [sum(line["type"] == "document" for line in b) for b in by_documents] == [2, 2, 1]
    assert [line for b in by_documents for line in b] == [*files, *lines[1:-1]]
    # Conversation lines, as many as events a request (they come before their messages, and stay before them).
    talks = [{"type": "conversation", "id": f"c{n}"} for n in range(3)]
    by_talks = list(batches([*talks, *lines], max_memories=100, max_bytes=10_000, max_events=2))
    assert [sum(line["type"] == "conversation" for line in b) for b in by_talks] == [2, 1, 0]
    assert [line for b in by_talks for line in b] == [*talks, *lines[1:-1]]


def test_a_large_export_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """Checking and sending a saved export holds a line (a batch) at a time, never the whole file."""
    saved = tmp_path / "big.ndjson"
    count = 20_000
    with saved.open("w") as out:
        out.write(json.dumps({"type": "export", "format": 1}) + "\n")
        for n in range(count):
            out.write(json.dumps({"type": "memory", "id": f"00000000-0000-4000-8000-{n:012d}",
                                  "text": f"Memory {n} " + "x" * 900}) + "\n")
        out.write(json.dumps({"type": "end", "counts": {"memory": count}}) + "\n")
    assert saved.stat().st_size > 18_000_000
    tracemalloc.start()
    try:
        assert check_export(saved) == count
        lines = (line for _, line in read_export(saved))
        sent = sum(len(batch) for batch in batches(lines, max_memories=200, max_bytes=4_000_000))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sent == count
    assert peak < 3_000_000, peak  # a batch of 200 lines, not 18 MB of file (or its dicts)
    cut = tmp_path / "cut.ndjson"
    cut.write_bytes(b"".join(saved.read_bytes().splitlines(keepends=True)[:-1]))
    with pytest.raises(TransferFailed, match="not a complete export"):
        check_export(cut)
    edited = tmp_path / "edited.ndjson"  # NaN: Python's json reads it, no request body can carry it
    edited.write_text('{"type": "export"}\n{"type": "memory", "id": "x", "text": "t", "importance": NaN}\n'
                      '{"type": "end"}\n')
    with pytest.raises(TransferFailed, match=r"edited.ndjson:2 is not JSON"):
        check_export(edited)


def test_cli_arguments() -> None:
    args = build_parser().parse_args(["export", "--agent-id", "alice", "--out", "a.ndjson"])
    assert args.agent_id == "alice" and args.out == "a.ndjson" and args.func.__name__ == "cmd_export"
    args = build_parser().parse_args(["restore", "a.ndjson", "--batch", "50"])
    assert args.file == "a.ndjson" and args.batch == 50 and args.func.__name__ == "cmd_restore"

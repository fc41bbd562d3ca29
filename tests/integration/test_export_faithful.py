"""What an export and an import must not lose or break, on real Postgres + Redis: a text holding a line
boundary other than ``\\n`` (U+2028, U+2029, NEL) stays on its line for every reader and comes back
through ``pgcontext export`` / ``restore``; a write committed while an export is read is wholly in it or
wholly out (one snapshot); a hand-edited line Postgres could not read is a 422 naming the line and field
(or a column the import does not write is ignored), never the database's error; a restore run again
counts the org's defaults ``existing``."""

from __future__ import annotations

import io
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.cli.transfer import export_to, restore_from
from service.db import Database, create_pool
from service.export import stream
from service.runtime import Endpoints
from tests.conftest import Tenant
from tests.integration.test_data_subject import remember
from tests.integration.test_export_import import export_org, import_lines
from tests.integration.test_memories_api import assert_error, list_all

URL = "http://testserver.local"
BREAKS = "one\u2028two\u2029three\x85four"
"""Line boundaries JSON may hold raw in a string (Postgres escapes only the controls below U+0020)."""


async def test_line_boundaries_in_texts_stay_on_their_line(
        client: AsyncTestClient[Any], tenant: Tenant, tmp_path: Path,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    (kept,) = await remember(client, tenant, {"text": f"Notes: {BREAKS}", "agent_id": "scribe",
                                              "metadata": {"note": BREAKS}})
    r = await client.put("/v1/agents/scribe/directive", json={"content": f"Be brief. {BREAKS}"},
                         headers=tenant.headers)
    assert r.status_code in (200, 201), r.text
    r = await client.get("/v1/export", headers=tenant.headers)
    assert r.status_code == 200, r.text
    # Any line splitter (Python's str.splitlines, httpx's iter_lines) sees one object per line.
    assert r.text.splitlines() == r.text.split("\n")[:-1]
    lines = [json.loads(line) for line in r.text.splitlines()]
    memory = next(line for line in lines if line["type"] == "memory")
    assert memory["text"] == f"Notes: {BREAKS}" and memory["metadata"] == {"note": BREAKS}

    # Saved by `pgcontext export` and restored by `pgcontext restore` into another org: the same texts.
    out = io.BytesIO()
    await export_to(out, url=URL, key=tenant.key, http=client)
    saved = tmp_path / "org.ndjson"
    saved.write_bytes(out.getvalue())
    fresh = await make_tenant("restored")
    totals = await restore_from(saved, url=URL, key=fresh.key, http=client)
    assert totals.imported["memory"] == 1 and totals.imported["directive"] == 1
    (restored,) = await list_all(client, fresh)
    assert restored["id"] == kept and restored["text"] == f"Notes: {BREAKS}"
    assert restored["metadata"] == {"note": BREAKS}
    r = await client.get("/v1/agents/scribe/directive", headers=fresh.headers)
    assert r.json()["content"] == f"Be brief. {BREAKS}"


async def test_an_export_is_one_snapshot(client: AsyncTestClient[Any], tenant: Tenant, endpoints: Endpoints,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory written while the export is read (after its first memory left) is not in it, and
    neither is its history: no event of the export names a memory the export does not hold."""
    before = await remember(client, tenant, *({"text": f"Row {i} of the snapshot.", "agent_id": "snap"}
                                              for i in range(3)))
    monkeypatch.setattr(stream, "_CHUNK_BYTES", 1)  # one line per chunk: the reader sets the pace
    monkeypatch.setattr(stream, "_PREFETCH", 1)
    db = Database(await create_pool(endpoints.app_dsn, min_size=1, max_size=1), statement_timeout_ms=5000)
    running = stream.export_lines(db, tenant.org_id, "snap")
    try:
        chunks = [await anext(running), await anext(running)]  # the header, the first memory
        assert json.loads(chunks[1])["type"] == "memory"
        (late,) = await remember(client, tenant, {"text": "Written while the export was read.", "agent_id": "snap"})
        chunks += [chunk async for chunk in running]
    finally:
        await running.aclose()
        await db.close()
    lines = [json.loads(line) for chunk in chunks for line in chunk.splitlines()]
    assert lines[-1]["type"] == "end"
    memories = {line["id"] for line in lines if line["type"] == "memory"}
    events = {line["memory_id"] for line in lines if line["type"] == "event"}
    assert memories == set(before) and late not in events
    assert events <= memories


MEMORY_ID = "44444444-4444-4444-8444-444444444444"
EVENT_ID = "55555555-5555-4555-8555-555555555555"


async def test_a_hand_edited_line_is_checked_not_handed_to_postgres(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    memory = {"type": "memory", "id": MEMORY_ID, "text": "The user rides a red bicycle.", "agent_id": "editor"}
    event = {"type": "event", "id": EVENT_ID, "memory_id": MEMORY_ID, "event": "created",
             "at": "2024-01-01T00:00:00Z"}
    # Refused, the line and the field named (nothing of the request written).
    for bad, field, code in (
            ({**event, "detail": {"text": "nul\u0000"}}, "detail", "validation_error"),
            ({"type": "directive", "agent_id": "editor", "content": "Be\u0000brief."}, "content",
             "validation_error"),
            ({**memory, "metadata": {"k": "nul\u0000"}}, "metadata", "validation_error"),
            ({**memory, "importance": 5}, "importance", "invalid_line"),
            ({**memory, "seen_count": 0}, "seen_count", "invalid_line"),
            ({**memory, "superseded_by": "nope"}, "superseded_by", "invalid_line"),
            ({**event, "memory_id": None}, "memory_id", "invalid_line"),
            ({"type": "event", "memory_id": MEMORY_ID, "event": "created", "at": "2024-01-01T00:00:00Z"}, "id",
             "invalid_line")):
        r = await client.post("/v1/import", json={"lines": [memory, bad]}, headers=tenant.headers)
        error = assert_error(r, 422, code)
        assert error["details"]["field"] == f"lines[1].{field}", (bad, error)
        assert "sqlstate" not in json.dumps(error).lower(), error
    assert await list_all(client, tenant, include_superseded="true") == []

    # Columns the import does not write (the org, the vector, a chunk's place, the derived hash) are
    # ignored whatever they hold, and values read leniently are written as read.
    ignored = {"org_id": "not-an-org", "embedding": "garbage", "level": "x", "line_start": 2**40, "tsv": 5,
               "text_hash": "zz", "source_path": 7}
    lenient = {"seen_count": 3.0, "created_at": 1_700_000_000, "importance": "0.25"}
    result = await import_lines(client, tenant, [{**memory, **ignored, **lenient},
                                                 {**event, "org_id": "not-an-org", "at": 1_700_000_000}])
    assert result["imported"]["memory"] == 1 and result["imported"]["event"] == 1
    (stored,) = await list_all(client, tenant)
    assert stored["seen_count"] == 3 and stored["importance"] == 0.25
    assert stored["created_at"].startswith("2023-11-14T22:13:20")
    r = await client.get(f"/v1/memories/{MEMORY_ID}/history", headers=tenant.headers)
    assert [e["at"][:19] for e in r.json()["items"]] == ["2023-11-14T22:13:20"]


async def test_a_restore_run_again_finds_the_orgs_defaults_in_place(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    r = await client.patch("/v1/org/settings", json={"on_duplicate": "reject"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    lines = await export_org(client, tenant)
    first = await import_lines(client, other_tenant, lines)
    assert first["imported"]["settings"] == 1 and first["existing"]["settings"] == 0
    changed = (await client.get("/v1/org/settings", headers=other_tenant.headers)).json()
    again = await import_lines(client, other_tenant, lines)
    assert again["imported"]["settings"] == 0 and again["existing"]["settings"] == 1
    assert (await client.get("/v1/org/settings", headers=other_tenant.headers)).json() == changed


async def test_a_directive_comes_back_with_its_version_and_times(
        client: AsyncTestClient[Any], tenant: Tenant, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    for text in ("Be brief.", "Be briefer.", "Be briefest."):
        r = await client.put("/v1/agents/herald/directive", json={"content": text}, headers=tenant.headers)
        assert r.status_code in (200, 201), r.text
    original = (await client.get("/v1/agents/herald/directive", headers=tenant.headers)).json()
    assert original["version"] == 3
    lines = await export_org(client, tenant)
    fresh = await make_tenant("herald")
    await import_lines(client, fresh, lines)
    restored = (await client.get("/v1/agents/herald/directive", headers=fresh.headers)).json()
    assert (restored["content"], restored["version"], restored["updated_at"]) == (
        original["content"], 3, original["updated_at"])

    # An org whose agent already has another directive: the exported text at its next version, at least 3.
    other = await make_tenant("herald-held")
    r = await client.put("/v1/agents/herald/directive", json={"content": "Ramble."}, headers=other.headers)
    assert r.status_code in (200, 201), r.text
    await import_lines(client, other, lines)
    replaced = (await client.get("/v1/agents/herald/directive", headers=other.headers)).json()
    assert (replaced["content"], replaced["version"]) == ("Be briefest.", 3)
    await import_lines(client, other, lines)  # run again: nothing changes
    assert (await client.get("/v1/agents/herald/directive", headers=other.headers)).json()["version"] == 3


async def test_a_directive_restored_after_a_delete_takes_a_version_after_the_deleted_one(
        client: AsyncTestClient[Any], tenant: Tenant, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    """Versions never go back: an export's directive restored where the agent's was deleted at a later
    version comes back at the version after it; at an earlier one, as exported."""
    path = "/v1/agents/phoenix/directive"
    for text in ("Be brief.", "Be briefer."):
        assert (await client.put(path, json={"content": text}, headers=tenant.headers)).status_code == 200
    exported = (await client.get(path, headers=tenant.headers)).json()
    lines = await export_org(client, tenant)
    assert (await client.put(path, json={"content": "Ramble."}, headers=tenant.headers)).json()["version"] == 3
    assert (await client.delete(path, headers=tenant.headers)).status_code == 204
    assert not [line for line in await export_org(client, tenant) if line["type"] == "directive"]
    await import_lines(client, tenant, lines)
    restored = (await client.get(path, headers=tenant.headers)).json()
    assert (restored["content"], restored["version"]) == ("Be briefer.", 4)

    earlier = await make_tenant("phoenix-early")
    assert (await client.put(path, json={"content": "Hello."}, headers=earlier.headers)).json()["version"] == 1
    assert (await client.delete(path, headers=earlier.headers)).status_code == 204
    await import_lines(client, earlier, lines)
    kept = (await client.get(path, headers=earlier.headers)).json()
    assert (kept["content"], kept["version"], kept["updated_at"]) == ("Be briefer.", 2, exported["updated_at"])

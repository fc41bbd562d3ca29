"""Undo of a history event that ``POST /v1/import`` wrote: an imported event's detail can hold anything,
so undo checks it as a write checks a memory and refuses what no write could make (422
``not_undoable``, never a 500); a well-formed imported merge is undone as the service's own."""

from __future__ import annotations

import uuid
from typing import Any

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant


async def test_undo_refuses_an_imported_event_whose_detail_no_write_could_make(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    r = await client.post("/v1/memories", json={"text": "The user drinks oat milk."}, headers=tenant.headers)
    assert r.status_code == 201, r.text
    kept = r.json()["ids"][0]

    def event(name: str, detail: Any) -> dict[str, Any]:
        return {"type": "event", "id": str(uuid.uuid4()), "memory_id": kept, "event": name,
                "at": "2024-01-01T00:00:00Z", "detail": detail}

    item = {"id": str(uuid.uuid4()), "text": "The user likes oat milk.", "kind": "fact"}
    bad = [event("merged", {"item": {"id": str(uuid.uuid4())}}),
           event("merged", {"item": {**item, "text": 42}}),
           event("merged", {"item": {**item, "id": "nope"}}),
           event("merged", {"item": {**item, "id": str(uuid.uuid4()), "occurred_at": "0001-01-01T00:00:00Z"}}),
           event("merged", {"item": {**item, "id": str(uuid.uuid4())}, "added_metadata": [1]}),
           event("consolidated", {"retired": ["not-a-uuid"]}),
           event("consolidated", {"retired": 5})]
    good = event("merged", {"item": item, "added_metadata": {}})
    r = await client.post("/v1/import", json={"lines": [*bad, good]}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    for line in bad:
        r = await client.post(f"/v1/memories/{kept}/history/{line['id']}/undo", json={}, headers=tenant.headers)
        assert r.status_code == 422, (line["detail"], r.text)
        assert r.json()["error"]["code"] == "not_undoable", r.text
    r = await client.post(f"/v1/memories/{kept}/history/{good['id']}/undo", json={}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert r.json()["restored"] == item["id"]
    restored = await client.get(f"/v1/memories/{item['id']}", headers=tenant.headers)
    assert restored.status_code == 200 and restored.json()["text"] == "The user likes oat milk."

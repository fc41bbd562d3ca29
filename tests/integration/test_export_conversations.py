"""Conversations through export and import: each travels as a ``conversation`` line (its owner, count and
times) ahead of its messages, so one whose messages were all removed comes back with its owner, and every
one keeps its exported ``created_at`` and ``updated_at``; its count is its last position present; a
restore run again counts it ``existing``; one the importing org holds under another owner is refused
(409 naming the line, nothing written); an export made before conversation lines imports as before; and
an import touches no other org's conversation of the same id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any
from uuid import uuid4

from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.test_conversations import append
from tests.integration.test_export_import import AGENT, assert_clean_conflict, export_org, import_lines
from tests.integration.test_memories_api import list_all


async def conversation(client: AsyncTestClient[Any], tenant: Tenant, conversation_id: str) -> dict[str, Any]:
    r = await client.get(f"/v1/conversations/{conversation_id}", headers=tenant.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, dict)
    return body


async def remove(client: AsyncTestClient[Any], tenant: Tenant, conversation_id: str, from_position: int) -> None:
    r = await client.delete(f"/v1/conversations/{conversation_id}/messages",
                            params={"from_position": from_position}, headers=tenant.headers)
    assert r.status_code == 200, r.text


def say(*words: str) -> list[dict[str, Any]]:
    return [{"speaker": "Ann", "role": "user", "content": text} for text in words]


async def seed(client: AsyncTestClient[Any], tenant: Tenant) -> dict[str, dict[str, Any]]:
    """Three conversations: "emptied" (the agent's, every message removed), "reworked" (the agent's, emptied
    and written again, then its last turn taken back: created before its messages, changed after them) and
    "lobby" (org-wide). Returns them as ``GET /v1/conversations/{id}`` answers."""
    await append(client, tenant, "emptied", say("Can we meet at noon?", "Or at one?"), agent_id=AGENT)
    await remove(client, tenant, "emptied", 1)
    await append(client, tenant, "reworked", say("A first draft."), agent_id=AGENT)
    await remove(client, tenant, "reworked", 1)
    await append(client, tenant, "reworked", say("Dinner at eight?", "Make it nine.", "No, eight."), agent_id=AGENT)
    await remove(client, tenant, "reworked", 3)
    await append(client, tenant, "lobby", say("The office closes at six."))
    return {c: await conversation(client, tenant, c) for c in ("emptied", "reworked", "lobby")}


async def test_conversations_come_back_with_their_owner_count_and_times(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    held = await seed(client, tenant)
    assert held["emptied"]["message_count"] == 0 and held["reworked"]["message_count"] == 2
    lines = await export_org(client, tenant)
    kinds = [line["type"] for line in lines]
    assert kinds.count("conversation") == 3 and lines[-1]["counts"]["conversation"] == 3
    assert max(i for i, k in enumerate(kinds) if k == "conversation") < kinds.index("memory")  # ahead of messages
    line = next(line for line in lines if line["type"] == "conversation" and line["id"] == "emptied")
    assert {k: line[k] for k in ("id", "agent_id", "message_count")} == {"id": "emptied", "agent_id": AGENT,
                                                                         "message_count": 0}
    for name in ("created_at", "updated_at"):
        assert datetime.fromisoformat(line[name]) == datetime.fromisoformat(held["emptied"][name])

    result = await import_lines(client, other_tenant, lines)
    assert result["imported"]["conversation"] == 3 and result["existing"]["conversation"] == 0
    for conversation_id, before in held.items():
        assert await conversation(client, other_tenant, conversation_id) == before, conversation_id
    # The emptied conversation is still the agent's: an append that names no agent goes to it.
    assert (await append(client, other_tenant, "emptied", say("Hello again.")))["agent_id"] == AGENT
    # An agent's export holds its conversations only.
    r = await client.get("/v1/export", params={"agent_id": AGENT}, headers=tenant.headers)
    assert r.status_code == 200 and '"id": "lobby"' not in r.text and '"id": "emptied"' in r.text


async def test_a_conversation_keeps_its_times_whichever_line_comes_first(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    held = await seed(client, tenant)
    lines = await export_org(client, tenant)
    # Its messages in a first request (they create the conversation), its line in a second.
    messages = [line for line in lines if line["type"] == "memory"]
    await import_lines(client, other_tenant, messages)
    reworked = await conversation(client, other_tenant, "reworked")
    assert reworked["created_at"] > held["reworked"]["created_at"]  # from its messages alone: later
    result = await import_lines(client, other_tenant, [line for line in lines if line["type"] == "conversation"])
    assert result["imported"]["conversation"] == 1 and result["existing"]["conversation"] == 2  # emptied: new
    for conversation_id, before in held.items():
        assert await conversation(client, other_tenant, conversation_id) == before, conversation_id


async def test_a_restore_run_again_counts_conversations_existing(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    held = await seed(client, tenant)
    lines = await export_org(client, tenant)
    await import_lines(client, other_tenant, lines)
    again = await import_lines(client, other_tenant, lines)
    assert again["imported"]["conversation"] == 0 and again["existing"]["conversation"] == 3
    assert again["imported"]["memory"] == 0
    for conversation_id, before in held.items():
        assert await conversation(client, other_tenant, conversation_id) == before, conversation_id


async def test_a_conversation_of_another_owner_is_refused_and_nothing_written(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    await seed(client, tenant)
    lines = await export_org(client, tenant)
    await append(client, other_tenant, "emptied", say("Mine."), agent_id="someone-else")
    await append(client, other_tenant, "reworked", say("Ours."))  # org-wide
    held = {c: await conversation(client, other_tenant, c) for c in ("emptied", "reworked")}
    note = {"type": "memory", "id": "00000000-0000-4000-8000-000000000042", "text": "A note.", "agent_id": AGENT}
    for conversation_id, owner in (("emptied", "someone-else"), ("reworked", None)):
        line = next(line for line in lines if line["type"] == "conversation" and line["id"] == conversation_id)
        r = await client.post("/v1/import", json={"lines": [note, line]}, headers=other_tenant.headers)
        assert_clean_conflict(r, "conversation_agent_mismatch", "lines[1].agent_id")
        assert r.json()["error"]["details"]["agent_id"] == owner
    # One request whose conversation line and message disagree about the owner.
    message = next(line for line in lines if line["type"] == "memory" and line["conversation_id"] == "lobby")
    lobby = next(line for line in lines if line["type"] == "conversation" and line["id"] == "lobby")
    r = await client.post("/v1/import", json={"lines": [{**lobby, "agent_id": AGENT}, message]},
                          headers=other_tenant.headers)
    assert_clean_conflict(r, "conversation_agent_mismatch", "lines[1].agent_id")
    r = await client.post("/v1/import", json={"lines": lines}, headers=other_tenant.headers)
    assert r.status_code == 409, r.text
    assert {m["text"] for m in await list_all(client, other_tenant, include_superseded="true")} == {"Mine.", "Ours."}
    for conversation_id, before in held.items():
        assert await conversation(client, other_tenant, conversation_id) == before, conversation_id
    assert (await client.get("/v1/conversations/lobby", headers=other_tenant.headers)).status_code == 404


async def test_an_export_without_conversation_lines_imports_as_before(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    held = await seed(client, tenant)
    old = [line for line in await export_org(client, tenant) if line["type"] != "conversation"]
    result = await import_lines(client, other_tenant, old)
    assert result["imported"]["conversation"] == 0 and result["existing"]["conversation"] == 0
    assert result["imported"]["memory"] == 3
    # Conversations are made from their messages: the owner, the last position, the messages' times.
    assert (await client.get("/v1/conversations/emptied", headers=other_tenant.headers)).status_code == 404
    messages = {m["text"]: m for m in await list_all(client, other_tenant)}
    reworked = await conversation(client, other_tenant, "reworked")
    assert reworked == {**held["reworked"], "created_at": messages["Dinner at eight?"]["created_at"],
                        "updated_at": messages["Make it nine."]["created_at"]}


async def test_an_import_touches_no_other_orgs_conversation(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    held = await seed(client, tenant)
    lines = await export_org(client, tenant)
    third = await make_tenant("third")
    await append(client, third, "emptied", say("Third's own."), agent_id="stranger")
    theirs = await conversation(client, third, "emptied")
    # Org B takes A's export, with its conversations under another owner: B's own rows, A's and C's unchanged.
    moved = [{**line, "agent_id": "newcomer"} if line["type"] == "conversation" and line["id"] == "emptied" else line
             for line in lines]
    assert (await import_lines(client, other_tenant, moved))["imported"]["conversation"] == 3
    assert (await conversation(client, other_tenant, "emptied"))["agent_id"] == "newcomer"
    await remove(client, other_tenant, "reworked", 1)
    for conversation_id, before in held.items():
        assert await conversation(client, tenant, conversation_id) == before, conversation_id
    assert await conversation(client, third, "emptied") == theirs


async def test_a_conversation_counts_the_messages_it_holds_not_its_lines_count(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    """An export split over requests (or cut short): the count is the last position present, so the next
    append lands right after it."""
    held = await seed(client, tenant)
    lines = await export_org(client, tenant)
    reworked = next(line for line in lines if line["type"] == "conversation" and line["id"] == "reworked")
    first, second = (line for line in lines if line["type"] == "memory" and line["conversation_id"] == "reworked")
    await import_lines(client, other_tenant, [reworked])
    assert (await conversation(client, other_tenant, "reworked"))["message_count"] == 0
    await import_lines(client, other_tenant, [first])
    assert (await conversation(client, other_tenant, "reworked"))["message_count"] == 1
    await import_lines(client, other_tenant, [second, reworked])
    assert await conversation(client, other_tenant, "reworked") == held["reworked"]


async def test_a_conversation_line_is_checked_as_an_append_checks_its_ids(
        client: AsyncTestClient[Any], other_tenant: Tenant) -> None:
    good = {"type": "conversation", "id": "c1", "agent_id": AGENT, "message_count": 0,
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-02T00:00:00Z"}
    for changes, code, field in (({"id": "bad id!"}, "validation_error", "id"),
                                 ({"agent_id": "a\n"}, "invalid_line", "agent_id"),
                                 ({"created_at": "0001-01-01T00:00:00Z"}, "validation_error", "created_at"),
                                 ({"message_count": -1}, "invalid_line", "message_count")):
        r = await client.post("/v1/import", json={"lines": [good, {**good, **changes}]}, headers=other_tenant.headers)
        assert r.status_code == 422 and r.json()["error"]["code"] == code, r.text
        assert r.json()["error"]["details"] == {"field": f"lines[1].{field}"}, r.text
    assert (await client.get("/v1/conversations", headers=other_tenant.headers)).json()["items"] == []
    assert (await import_lines(client, other_tenant, [good]))["imported"]["conversation"] == 1


async def test_a_conversation_past_any_position_an_import_took_imports(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    """Appends go on from an imported message's position, so an import takes every position a bigint holds:
    the org's own export imports (past 2**31 - 1 it was refused: position <= 2147483647)."""
    for conversation_id, last in (("past-int", 2**31 - 1), ("past-double", 2**53 - 1)):
        message = {"type": "memory", "id": str(uuid4()), "kind": "message", "text": "Hi.", "agent_id": AGENT,
                   "conversation_id": conversation_id, "position": last, "speaker": "Ann", "role": "user"}
        assert (await import_lines(client, tenant, [message]))["imported"]["memory"] == 1
        appended = await append(client, tenant, conversation_id, say("And after."), agent_id=AGENT)
        assert appended["messages"][0]["position"] == last + 1
        done = await import_lines(client, other_tenant, await export_org(client, tenant))
        assert done["imported"]["memory"] == 2 and done["imported"]["conversation"] == 1
        assert (await conversation(client, other_tenant, conversation_id))["message_count"] == last + 1
    for line, field in (({**message, "position": 2**63}, "position"),
                        ({"type": "conversation", "id": "x", "message_count": 2**63}, "message_count")):
        r = await client.post("/v1/import", json={"lines": [line]}, headers=other_tenant.headers)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_line", r.text
        assert r.json()["error"]["details"] == {"field": f"lines[0].{field}"}

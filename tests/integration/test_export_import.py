"""Org export and import over HTTP on real Postgres + Redis: a whole org's memories, with their keys, valid
time, supersession, reinforcement and history (merges, an undone merge), exported by ``GET /v1/export``
and imported by ``POST /v1/import`` into a fresh org answer list, ``as_of``, ``include_superseded``,
search and history exactly as the original; older export lines still import; each request is all or
nothing; an import touches only the caller's org; a conversation's messages are checked as an append
checks them (ids, speaker, the conversation's agent); and a collision names its line, not the database's
internals."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from litestar.testing import AsyncTestClient

from service.db import query
from service.embeddings import Embedder
from tests.conftest import Tenant
from tests.integration.test_bad_input import assert_error
from tests.integration.test_conversations import append
from tests.integration.test_data_subject import owner_rows
from tests.integration.test_facts import history, write
from tests.integration.test_memories_api import list_all

AGENT = "concierge"
LIFECYCLE = ("key", "valid_until", "superseded_by", "superseded_at", "seen_count", "last_seen_at",
             "first_occurred_at", "last_occurred_at", "text_hash")
"""The columns the fact lifecycle added to memories: lines of an older export have none of them."""


async def export_org(client: AsyncTestClient[Any], tenant: Tenant) -> list[dict[str, Any]]:
    r = await client.get("/v1/export", headers=tenant.headers)
    assert r.status_code == 200, r.text
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert lines[0]["type"] == "export" and lines[0]["agent_id"] is None and lines[-1]["type"] == "end"
    return lines


async def import_lines(client: AsyncTestClient[Any], tenant: Tenant, lines: list[dict[str, Any]],
                       status: int = 200) -> Any:
    r = await client.post("/v1/import", json={"lines": lines}, headers=tenant.headers)
    assert r.status_code == status, r.text
    return r.json()


async def seed(client: AsyncTestClient[Any], tenant: Tenant) -> dict[str, str]:
    """An org whose memories went through every lifecycle change."""
    ids: dict[str, str] = {}
    for name, text, at in (("paris", "The user lives in Paris.", "2023-01-10T09:00:00Z"),
                           ("lisbon", "The user lives in Lisbon.", "2024-03-01T09:00:00Z"),
                           ("berlin", "The user lives in Berlin.", "2023-08-01T09:00:00Z")):  # late arrival
        item = (await write(client, tenant, {"text": text, "agent_id": AGENT, "key": "user.city",
                                             "occurred_at": at}))["items"][0]
        ids[name] = item["id"]
    ids["roast"] = (await write(client, tenant, {"text": "The user prefers dark roast coffee.", "agent_id": AGENT,
                                                 "metadata": {"source": "chat"},
                                                 "occurred_at": "2024-01-05T08:00:00Z"}))["ids"][0]
    merged = (await write(client, tenant, {"text": "Honestly, the user prefers dark-roast coffee!", "agent_id": AGENT,
                                           "metadata": {"channel": "email"},
                                           "occurred_at": "2024-02-05T08:00:00Z"}))["items"][0]
    assert merged == {**merged, "status": "merged", "id": ids["roast"]}
    ids["peanuts"] = (await write(client, tenant, {"text": "Sam is allergic to peanuts.", "agent_id": AGENT}))["ids"][0]
    await write(client, tenant, {"text": "sam is allergic to peanuts", "agent_id": AGENT})
    merge = (await history(client, tenant, ids["peanuts"]))[-1]
    r = await client.post(f"/v1/memories/{ids['peanuts']}/history/{merge['id']}/undo", json={},
                          headers=tenant.headers)
    assert r.status_code == 200, r.text
    ids["restored"] = r.json()["restored"]
    ids["tea"] = (await write(client, tenant, {"text": "The user drinks green tea in the afternoon.",
                                               "agent_id": AGENT, "occurred_at": "2023-05-01T00:00:00Z"}))["ids"][0]
    ids["coffee"] = (await write(client, tenant, {"text": "The user switched to coffee in the afternoon.",
                                                  "agent_id": AGENT, "supersedes": [ids["tea"]],
                                                  "occurred_at": "2024-05-01T00:00:00Z"}))["ids"][0]
    ids["gym"] = (await write(client, tenant, {"text": "The user has a gym membership.", "agent_id": AGENT,
                                               "occurred_at": "2022-01-01T00:00:00Z",
                                               "valid_until": "2023-01-01T00:00:00Z"}))["ids"][0]
    for _ in range(2):  # conversation turns are never merged: both are kept, and both travel
        r = await client.post("/v1/conversations/plans/messages", headers=tenant.headers, json={
            "agent_id": AGENT, "messages": [{"speaker": "Ann", "content": "Sounds good, see you then!"}]})
        assert r.status_code == 201, r.text
    ids["office"] = (await write(client, tenant, {"text": "The office closes at six."}))["ids"][0]  # org-wide
    r = await client.patch(f"/v1/memories/{ids['office']}", json={"text": "The office closes at seven."},
                           headers=tenant.headers)
    assert r.status_code == 200, r.text
    r = await client.put(f"/v1/agents/{AGENT}/directive", json={"content": "Be brief."}, headers=tenant.headers)
    assert r.status_code in (200, 201), r.text
    return ids


async def views(client: AsyncTestClient[Any], tenant: Tenant, ids: dict[str, str]) -> dict[str, Any]:
    """Everything a reader can ask of the memories' lifecycle."""
    out: dict[str, Any] = {
        "current": await list_all(client, tenant),
        "all": await list_all(client, tenant, include_superseded="true"),
        "history": {name: await history(client, tenant, memory_id) for name, memory_id in ids.items()},
    }
    for when in ("2022-06-01T00:00:00Z", "2023-03-01T00:00:00Z", "2023-09-01T00:00:00Z", "2025-01-01T00:00:00Z"):
        out[f"as_of {when}"] = await list_all(client, tenant, agent_id=AGENT, as_of=when)
    for filters in ({}, {"include_superseded": True}, {"as_of": "2023-09-01T00:00:00Z"}):
        r = await client.post("/v1/memories/search", headers=tenant.headers, json={
            "query": "where does the user live", "strategy": "hybrid", "limit": 20,
            "filters": {"agent_id": AGENT, **filters}})
        assert r.status_code == 200, r.text
        # Keyed by id: texts that score exactly the same (Berlin / Lisbon) may rank in either order.
        out[f"search {filters}"] = {hit["id"]: {k: hit[k] for k in ("text", "current", "superseded_by", "valid_until")}
                                    for hit in r.json()["results"]}
    return out


async def test_an_org_round_trips_with_its_history_and_supersession(
        client: AsyncTestClient[Any], tenant: Tenant, make_tenant: Callable[[str], Awaitable[Tenant]],
        owner_dsn: str, embedder: Embedder) -> None:
    ids = await seed(client, tenant)
    before = await views(client, tenant, ids)
    lines = await export_org(client, tenant)
    kinds = [line["type"] for line in lines]
    assert kinds.count("memory") == 12 and kinds.count("directive") == 1 and kinds.count("event") >= 15
    assert kinds.count("conversation") == 1
    every = {m["id"]: m for m in before["all"]}
    assert every[ids["paris"]]["superseded_by"] == ids["berlin"]  # the late value took its place on the timeline
    assert every[ids["roast"]]["seen_count"] == 2 and every[ids["tea"]]["superseded_by"] == ids["coffee"]

    fresh = await make_tenant("restored")
    # Any split and order: history first, then the memories in two requests.
    events = [line for line in lines if line["type"] == "event"]
    rest = [line for line in lines if line["type"] != "event"]
    first = await import_lines(client, fresh, events)
    assert first["imported"]["event"] == len(events) and first["imported"]["memory"] == 0
    half = len(rest) // 2
    done = [await import_lines(client, fresh, part) for part in (rest[:half], rest[half:])]
    assert sum(d["imported"]["memory"] for d in done) == 12 and sum(d["imported"]["directive"] for d in done) == 1

    after = await views(client, fresh, ids)
    for name, view in before.items():
        assert after[name] == view, name
    r = await client.get(f"/v1/agents/{AGENT}/directive", headers=fresh.headers)
    assert r.status_code == 200 and r.json()["content"] == "Be brief."
    again = await export_org(client, fresh)
    def same(line: dict[str, Any]) -> dict[str, Any]:
        """What an import keeps: not the org, the export's time or when a directive was written."""
        strip = {"org_id", "exported_at"} | ({"created_at", "updated_at"} if line["type"] == "directive" else set())
        return {k: v for k, v in line.items() if k not in strip}

    assert [same(line) for line in again] == [same(line) for line in lines]

    # The restored org behaves like the original: duplicates merge into imported memories, keys retire them.
    merged = (await write(client, fresh, {"text": "the user prefers dark roast coffee", "agent_id": AGENT}))["items"]
    assert merged[0]["status"] == "merged" and merged[0]["id"] == ids["roast"]
    newer = (await write(client, fresh, {"text": "The user lives in Porto.", "agent_id": AGENT, "key": "user.city",
                                         "occurred_at": "2025-02-01T00:00:00Z"}))["items"][0]
    assert newer["status"] == "superseded" and newer["superseded"] == [ids["lisbon"]]
    undo = next(e for e in before["history"]["peanuts"] if e["event"] == "merged")
    r = await client.post(f"/v1/memories/{ids['peanuts']}/history/{undo['id']}/undo", json={}, headers=fresh.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "already_undone"

    # A message's vector is computed as an append computes it: from its speaker's name and its words.
    sql = ("SELECT text, speaker, embedding::text AS v FROM memories WHERE org_id = $1 AND kind = 'message' "
           "AND speaker IS NOT NULL")
    messages = await owner_rows(owner_dsn, sql, fresh.org_id)
    assert messages
    for message in messages:
        restored = np.array(json.loads(message["v"]), dtype=np.float32)
        said, alone = await embedder.embed([f"{message['speaker']}: {message['text']}", message["text"]])
        assert float(restored @ said) > float(restored @ alone) + 0.01, message["text"]

    # A retried import writes nothing twice (the directive neither: its version stays).
    version = (await client.get(f"/v1/agents/{AGENT}/directive", headers=fresh.headers)).json()["version"]
    retried = await import_lines(client, fresh, lines)
    assert retried["imported"] == {"directive": 0, "memory": 0, "event": 0, "settings": 0, "document": 0,
                                   "conversation": 0}
    assert retried["existing"]["memory"] == 12 and retried["existing"]["event"] == len(events)
    assert retried["existing"]["conversation"] == 1
    assert retried["existing"]["directive"] == 1
    assert (await client.get(f"/v1/agents/{AGENT}/directive", headers=fresh.headers)).json()["version"] == version


async def test_the_orgs_defaults_come_with_a_whole_org_export(client: AsyncTestClient[Any], tenant: Tenant,
                                                              other_tenant: Tenant) -> None:
    await write(client, tenant, {"text": "Maya's sister is a nurse.", "agent_id": AGENT})
    r = await client.patch("/v1/org/settings", json={"on_duplicate": "reject"}, headers=tenant.headers)
    assert r.status_code == 200, r.text
    lines = await export_org(client, tenant)
    assert lines[1] == {"type": "settings", "on_duplicate": "reject", "updated_at": lines[1]["updated_at"]}
    r = await client.get("/v1/export", params={"agent_id": AGENT}, headers=tenant.headers)
    assert r.status_code == 200 and '"settings"' not in r.text  # an agent's export holds no org defaults
    assert (await import_lines(client, other_tenant, lines))["imported"]["settings"] == 1
    r = await client.get("/v1/org/settings", headers=other_tenant.headers)
    assert r.status_code == 200 and r.json()["on_duplicate"] == "reject"
    r = await client.post("/v1/memories", json={"text": "maya's sister is a nurse", "agent_id": AGENT},
                          headers=other_tenant.headers)
    assert r.status_code == 409 and r.json()["error"]["code"] == "duplicate"
    bad = [{"type": "settings", "on_duplicate": "sometimes"}]
    await import_lines(client, other_tenant, bad, status=422)
    r = await client.get("/v1/org/settings", headers=tenant.headers)
    assert r.json()["on_duplicate"] == "reject"  # the source org is untouched


async def test_lines_of_an_older_export_import(client: AsyncTestClient[Any], tenant: Tenant,
                                              other_tenant: Tenant) -> None:
    ids = [(await write(client, tenant, {"text": text, "agent_id": AGENT}))["ids"][0]
           for text in ("Maya's sister is a nurse.", "Maya moved to Lisbon in May.")]
    lines = await export_org(client, tenant)
    old = [{k: v for k, v in line.items() if k not in LIFECYCLE} for line in lines if line["type"] != "event"]
    result = await import_lines(client, other_tenant, old)
    assert result["imported"]["memory"] == 2
    restored = {m["id"]: m for m in await list_all(client, other_tenant, include_superseded="true")}
    assert set(restored) == set(ids)
    for m in restored.values():
        assert m["current"] is True and m["seen_count"] == 1 and m["key"] is None and m["valid_until"] is None
    # the normalized-text hash is computed again: the exact duplicate check finds imported memories
    (item,) = (await write(client, other_tenant, {"text": "maya moved to lisbon in may", "agent_id": AGENT}))["items"]
    assert item["status"] == "merged" and item["id"] == ids[1]


async def test_an_import_is_all_or_nothing_and_stays_in_the_callers_org(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant,
        make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    first = (await write(client, tenant, {"text": "The user lives in Paris.", "agent_id": AGENT, "key": "user.city",
                                          "occurred_at": "2023-01-01T00:00:00Z"}))["ids"][0]
    lines = await export_org(client, tenant)
    memory = next(line for line in lines if line["type"] == "memory")

    # A bad line anywhere: 4xx, and nothing of the request written.
    # (Any object is a line to the body's schema: what makes one a bad line is a 422.)
    for bad, status in (({"type": "event", "id": "nope"}, 422), ({"type": "mystery"}, 422),
                        ({**memory, "id": "11111111-1111-4111-8111-111111111111", "kind": "document_chunk"}, 422),
                        ({"type": "error", "code": "export_failed", "message": "x"}, 422),
                        ({"type": "export", "format": 99}, 422),
                        ({"type": "directive", "agent_id": "a\n", "content": "Be brief."}, 422),
                        ({"type": "directive", "agent_id": "a", "content": " "}, 422),
                        ({**memory, "id": "22222222-2222-4222-8222-222222222222", "kind": "message"}, 422)):
        r = await client.post("/v1/import", json={"lines": [memory, bad]}, headers=other_tenant.headers)
        assert_error(r, status, r.json()["error"]["code"])
    assert await list_all(client, other_tenant, include_superseded="true") == []
    bodies: list[dict[str, Any]] = [{}, {"lines": []}, {"lines": "x"}, {"lines": [memory], "extra": 1}]
    for body in bodies:
        assert (await client.post("/v1/import", json=body, headers=other_tenant.headers)).status_code == 400
    assert (await client.post("/v1/import", json={"lines": [memory]})).status_code == 401

    # A second current value of a key is refused by the database: 409, nothing written.
    (mine,) = (await write(client, other_tenant, {"text": "The user lives in Rome.", "agent_id": AGENT,
                                                  "key": "user.city"}))["ids"]
    r = await client.post("/v1/import", json={"lines": lines}, headers=other_tenant.headers)
    assert_clean_conflict(r, "conflict", f"lines[{lines.index(memory)}].key")
    assert [m["id"] for m in await list_all(client, other_tenant, include_superseded="true")] == [mine]

    # Imported into a third org: its own rows, independent of the exporting org's.
    third = await make_tenant("third")
    await import_lines(client, third, lines)
    r = await client.delete(f"/v1/memories/{first}", params={"erase": "true"}, headers=third.headers)
    assert r.status_code == 204, r.text
    assert (await client.get(f"/v1/memories/{first}", headers=third.headers)).status_code == 404
    assert (await client.get(f"/v1/memories/{first}", headers=tenant.headers)).status_code == 200
    assert [e["event"] for e in await history(client, tenant, first)] == ["created"]
    assert (await client.get(f"/v1/memories/{first}", headers=other_tenant.headers)).status_code == 404
    assert (await client.get(f"/v1/memories/{first}/history", headers=other_tenant.headers)).status_code == 404


CONVERSATION = "gap"


async def message_lines(client: AsyncTestClient[Any], tenant: Tenant) -> list[dict[str, Any]]:
    """The export lines of the agent's conversation "gap": messages g1 and g2 at positions 1 and 2."""
    await append(client, tenant, CONVERSATION, [
        {"speaker": "Ann", "role": "user", "content": "Can we meet at noon?", "session_id": "mon", "message_id": "g1"},
        {"role": "assistant", "content": "Noon works for me.", "session_id": "mon", "message_id": "g2"},
    ], agent_id=AGENT)
    lines = [line for line in await export_org(client, tenant) if line["type"] == "memory"]
    assert [(m["position"], m["message_id"]) for m in lines] == [(1, "g1"), (2, "g2")]
    return lines


def another(line: dict[str, Any], at: int, **changes: Any) -> dict[str, Any]:
    """``line`` as another message: a new id, at position ``at``, message_id ``g<at>``, unless changed."""
    return {**line, "id": f"00000000-0000-4000-8000-{at:012d}", "position": at, "message_id": f"g{at}", **changes}


def assert_clean_conflict(r: Any, code: str, field: str) -> None:
    """A 409 that names the line and field that collided, and no database internals."""
    assert_error(r, 409, code)
    error = r.json()["error"]
    assert error["details"]["field"] == field and field.split(".")[0] in error["message"], error
    assert not {"sqlstate", "constraint"} & set(error["details"]), error
    assert "memories_" not in error["message"] and "sqlstate" not in error["message"], error


async def assert_messages(client: AsyncTestClient[Any], tenant: Tenant, conversation: str,
                          ids: list[str]) -> None:
    """The conversation holds these messages, and counts as many (a refused import changed nothing)."""
    r = await client.get(f"/v1/conversations/{conversation}/messages", headers=tenant.headers)
    assert r.status_code == 200, r.text
    assert [m["message_id"] for m in r.json()["items"]] == ids
    r = await client.get(f"/v1/conversations/{conversation}", headers=tenant.headers)
    assert r.status_code == 200 and r.json()["message_count"] == len(ids), r.text


BAD_MESSAGES: list[tuple[dict[str, Any], str]] = [
    ({"conversation_id": "stuck conv/.."}, "conversation_id"),
    ({"conversation_id": "bad id!"}, "conversation_id"),
    ({"conversation_id": "x" * 201}, "conversation_id"),
    ({"conversation_id": "gap\n"}, "conversation_id"),
    ({"message_id": "bad id!"}, "message_id"),
    ({"message_id": ""}, "message_id"),
    ({"session_id": "mon day"}, "session_id"),
    ({"speaker": "Ann\nBob"}, "speaker"),
    ({"speaker": "   "}, "speaker"),
    ({"position": None}, "position"),
    ({"kind": "fact"}, "conversation_id"),
    ({"conversation_id": None, "position": None}, "message_id"),
]
"""Changes that make a message line bad, and the field the 422 names."""


async def test_messages_are_checked_as_an_append_checks_them(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    good, line = await message_lines(client, tenant)
    for changes, field in BAD_MESSAGES:
        r = await client.post("/v1/import", json={"lines": [good, another(line, 3, **changes)]},
                              headers=other_tenant.headers)
        assert_error(r, 422, "validation_error")
        error = r.json()["error"]
        assert error["details"] == {"field": f"lines[1].{field}"} and "lines[1]" in error["message"], (changes, error)
    for changes in ({"role": "boss"}, {"position": 0}, {"speaker": "x" * 201}):  # the schema's: 422 invalid_line
        r = await client.post("/v1/import", json={"lines": [good, another(line, 3, **changes)]},
                              headers=other_tenant.headers)
        assert_error(r, 422, "invalid_line")
    # Nothing of those requests was written; the good line alone imports.
    assert await list_all(client, other_tenant, include_superseded="true") == []
    assert (await client.get("/v1/conversations", headers=other_tenant.headers)).json()["items"] == []
    assert (await import_lines(client, other_tenant, [good]))["imported"]["memory"] == 1
    await assert_messages(client, other_tenant, CONVERSATION, ["g1"])


async def test_memory_lines_are_checked_as_a_write_checks_a_memory(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    """What no write could make is refused with the line and field named (it was written as sent, or
    failed in Postgres with its SQLSTATE): times out of bounds, valid time before the event, a search
    context over the text limit, a memory superseded by itself, values out of their columns' range."""
    await write(client, tenant, {"text": "The user drinks oat milk.", "occurred_at": "2024-02-01T00:00:00Z"})
    memory = next(line for line in await export_org(client, tenant) if line["type"] == "memory")
    fresh = "33333333-3333-4333-8333-333333333333"
    for changes, code, field in (
            ({"occurred_at": "0001-01-01T00:00:00Z"}, "validation_error", "occurred_at"),
            ({"created_at": "9999-12-31T00:00:00Z"}, "validation_error", "created_at"),
            ({"expires_at": "1000-01-01T00:00:00Z"}, "validation_error", "expires_at"),
            ({"valid_until": "2020-01-01T00:00:00Z"}, "validation_error", "valid_until"),
            ({"search_context": "c" * 40_000}, "text_too_long", "search_context"),
            ({"search_context": "nul\u0000"}, "validation_error", "search_context"),
            ({"superseded_by": fresh}, "validation_error", "superseded_by"),
            ({"importance": 5}, "invalid_line", "importance"), ({"usefulness": 1e308}, "invalid_line", "usefulness"),
            ({"feedback_count": -7}, "invalid_line", "feedback_count"),
            ({"access_count": 2**63}, "invalid_line", "access_count"),
            ({"expires_at": "not a date"}, "invalid_line", "expires_at")):
        r = await client.post("/v1/import", json={"lines": [{**memory, "id": fresh, **changes}]},
                              headers=other_tenant.headers)
        assert_error(r, 422, code)
        error = r.json()["error"]
        assert error["details"] == {"field": "lines[0]" + (f".{field}" if field else "")}, (changes, error)
        assert "sqlstate" not in json.dumps(error).lower(), error
    events = [{"type": "event", "id": fresh, "memory_id": memory["id"], "event": "created", "at": at}
              for at in ("0001-01-01T00:00:00Z", "9999-01-01T00:00:00Z")]
    for line in events:
        r = await client.post("/v1/import", json={"lines": [line]}, headers=other_tenant.headers)
        assert_error(r, 422, "validation_error")
        assert r.json()["error"]["details"] == {"field": "lines[0].at"}
    assert await list_all(client, other_tenant, include_superseded="true") == []


async def test_a_value_superseded_by_one_of_the_same_time_round_trips(
        client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    """Two values of a key said at the same moment: the first ends where it starts (valid_until ==
    occurred_at), and the org's own export imported as such (it was refused: valid_until must be after
    occurred_at). A live memory whose validity ends where it starts is refused as a write refuses it."""
    said = "2024-05-01T00:00:00Z"
    for city in ("Paris", "Berlin"):
        await write(client, tenant, {"text": f"Dana lives in {city}.", "agent_id": "dana", "key": "user.city",
                                     "occurred_at": said})
    lines = await export_org(client, tenant)
    retired = next(line for line in lines if line["type"] == "memory" and line["superseded_by"])
    assert retired["valid_until"] == retired["occurred_at"], retired
    done = await import_lines(client, other_tenant, lines)
    assert done["imported"]["memory"] == 2, done
    before = await list_all(client, tenant, include_superseded="true")
    assert await list_all(client, other_tenant, include_superseded="true") == before
    assert [m["text"] for m in await list_all(client, other_tenant)] == ["Dana lives in Berlin."]
    live = {**retired, "id": "44444444-4444-4444-8444-444444444444", "superseded_by": None, "superseded_at": None,
            "key": None}
    r = await client.post("/v1/import", json={"lines": [live]}, headers=other_tenant.headers)
    assert_error(r, 422, "validation_error")
    assert r.json()["error"]["details"] == {"field": "lines[0].valid_until"}


async def test_messages_keep_their_conversations_agent(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    _, line = await message_lines(client, tenant)
    for agent in ("different-agent", None):
        r = await client.post("/v1/import", json={"lines": [another(line, 99, agent_id=agent)]},
                              headers=tenant.headers)
        assert_clean_conflict(r, "conversation_agent_mismatch", "lines[0].agent_id")
        assert r.json()["error"]["details"]["agent_id"] == AGENT
    # Two lines of one import that disagree about a new conversation's agent.
    fresh = [another(line, 1, conversation_id="fresh", agent_id="one"),
             another(line, 2, conversation_id="fresh", agent_id="two")]
    r = await client.post("/v1/import", json={"lines": fresh}, headers=tenant.headers)
    assert_clean_conflict(r, "conversation_agent_mismatch", "lines[1].agent_id")
    assert (await client.get("/v1/conversations/fresh", headers=tenant.headers)).status_code == 404
    await assert_messages(client, tenant, CONVERSATION, ["g1", "g2"])
    # The owner's message imports.
    assert (await import_lines(client, tenant, [another(line, 3)]))["imported"]["memory"] == 1
    await assert_messages(client, tenant, CONVERSATION, ["g1", "g2", "g3"])


async def test_a_collision_names_its_line(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    first, line = await message_lines(client, tenant)
    assert (await import_lines(client, tenant, [first, line]))["existing"]["memory"] == 2  # a retry: no collision
    twin = "00000000-0000-4000-8000-000000000077"
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([first, another(line, 2, message_id="new")], "lines[1].position"),  # an occupied position
        ([first, another(line, 5, message_id="g1")], "lines[1].message_id"),  # a message_id the conversation holds
        ([another(line, 7), first, another(line, 7, id=twin, message_id="x")], "lines[2].position"),  # one request's
        ([another(line, 8), first, another(line, 9, message_id="g8")], "lines[2].message_id"),
    ]
    for lines, field in cases:
        r = await client.post("/v1/import", json={"lines": lines}, headers=tenant.headers)
        assert_clean_conflict(r, "conflict", field)
    await assert_messages(client, tenant, CONVERSATION, ["g1", "g2"])
    # Two current memories of one key in one request.
    keyed = [{"type": "memory", "id": f"00000000-0000-4000-8000-00000000010{n}", "text": f"The user lives in {city}.",
              "agent_id": AGENT, "key": "user.city"} for n, city in enumerate(("Oslo", "Rome"))]
    r = await client.post("/v1/import", json={"lines": keyed}, headers=tenant.headers)
    assert_clean_conflict(r, "conflict", "lines[1].key")
    assert [m["kind"] for m in await list_all(client, tenant)] == ["message", "message"]


NOT_RESTORED = {
    "tsv": "generated from the text",
    **{name: "a document's chunks are cut again from its content (a document line)"
       for name in ("source_path", "line_start", "line_end", "section_title", "breadcrumb", "level")},
}
"""Columns of ``memories`` an import deliberately does not take from a line."""


async def test_the_import_restores_every_column_of_memories(owner_dsn: str) -> None:
    """A column added to ``memories`` must be restored by ``sql/export/import_memories.sql`` (or listed
    above with the reason): otherwise an export and import would silently drop it."""
    sql = query("export.import_memories")
    inserted = {c.strip() for c in sql.split("INSERT INTO memories (", 1)[1].split(")", 1)[0].split(",")}
    rows = await owner_rows(owner_dsn, "SELECT column_name FROM information_schema.columns "
                                       "WHERE table_schema = 'public' AND table_name = 'memories'")
    columns = {r["column_name"] for r in rows}
    assert columns - set(NOT_RESTORED) == inserted, {"not restored": columns - set(NOT_RESTORED) - inserted}


async def test_a_directive_line_leaves_room_for_the_next_version(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    """A directive line's version is below the last an integer holds, so the agent's next directive has one
    (a line at the last was taken, and every PUT after it refused: a number is out of range). A directive that
    cannot change refuses its whole request before anything of it is written (its memories were written, and
    the answer was a 400)."""
    last = 2**31 - 1
    line = {"type": "directive", "agent_id": "vmax", "content": "first", "version": last}
    r = await client.post("/v1/import", json={"lines": [line]}, headers=tenant.headers)
    assert_error(r, 422, "invalid_line")
    assert r.json()["error"]["details"] == {"field": "lines[0].version"}
    assert (await import_lines(client, tenant, [{**line, "version": last - 1}]))["imported"]["directive"] == 1
    r = await client.put("/v1/agents/vmax/directive", json={"content": "second"}, headers=tenant.headers)
    assert r.status_code == 200 and r.json()["version"] == last, r.text

    memory = {"type": "memory", "id": "55555555-5555-4555-8555-555555555555", "text": "Sent with a directive."}
    r = await client.post("/v1/import", json={"lines": [memory, {**line, "content": "third", "version": 1}]},
                          headers=tenant.headers)
    assert_error(r, 409, "conflict")
    assert r.json()["error"]["details"] == {"field": "lines[1].version", "version": last}
    assert (await client.get(f"/v1/memories/{memory['id']}", headers=tenant.headers)).status_code == 404
    # The same text is no change: the request imports.
    done = await import_lines(client, tenant, [memory, {**line, "content": "second", "version": 1}])
    assert done["existing"]["directive"] == 1 and done["imported"]["memory"] == 1
    r = await client.get("/v1/agents/vmax/directive", headers=tenant.headers)
    assert r.json()["content"] == "second" and r.json()["version"] == last


async def test_an_id_is_one_line(client: AsyncTestClient[Any], tenant: Tenant, other_tenant: Tenant) -> None:
    """Two lines of one id in a request are the same line, or a 409 naming the second (it was dropped, counted
    existing, and its conversation made without it); a line whose id the org holds is not written, and makes
    no conversation."""
    first, _ = await message_lines(client, tenant)
    twin = {**first, "text": "Something else entirely.", "conversation_id": "other", "speaker": "Bob"}
    for lines in ([first, twin], [first, {**first, "text": "Can we meet at one?"}]):
        r = await client.post("/v1/import", json={"lines": lines}, headers=other_tenant.headers)
        assert_clean_conflict(r, "conflict", "lines[1].id")
        assert r.json()["error"]["details"]["other"] == "lines[0].id"
    assert await list_all(client, other_tenant, include_superseded="true") == []
    assert (await client.get("/v1/conversations", headers=other_tenant.headers)).json()["items"] == []

    done = await import_lines(client, other_tenant, [first, dict(first)])  # the same line twice: one memory
    assert (done["imported"]["memory"], done["existing"]["memory"]) == (1, 1)
    done = await import_lines(client, other_tenant, [{**first, "conversation_id": "ghost"}])
    assert done["existing"]["memory"] == 1
    assert (await client.get("/v1/conversations/ghost", headers=other_tenant.headers)).status_code == 404
    await assert_messages(client, other_tenant, CONVERSATION, ["g1"])


async def test_an_event_and_an_agents_directive_are_one_line_each(client: AsyncTestClient[Any], tenant: Tenant,
                                                                   other_tenant: Tenant) -> None:
    """As for memories: two event lines of one id, or two directive lines of one agent, that differ are a
    409 naming the second (the second event was dropped and counted existing; the last directive won)."""
    await write(client, tenant, {"text": "The user drinks oat milk.", "agent_id": AGENT})
    r = await client.put(f"/v1/agents/{AGENT}/directive", json={"content": "Be brief."}, headers=tenant.headers)
    assert r.status_code in (200, 201), r.text
    lines = await export_org(client, tenant)
    event = next(line for line in lines if line["type"] == "event")
    directive = next(line for line in lines if line["type"] == "directive")
    for pair, field in (([event, {**event, "at": "2024-01-01T00:00:00Z"}], "lines[1].id"),
                        ([directive, {**directive, "content": "Be verbose."}], "lines[1].agent_id")):
        r = await client.post("/v1/import", json={"lines": pair}, headers=other_tenant.headers)
        assert_clean_conflict(r, "conflict", field)
        assert r.json()["error"]["details"]["other"] == field.replace("[1]", "[0]")
    assert (await client.get(f"/v1/agents/{AGENT}/directive", headers=other_tenant.headers)).status_code == 404
    done = await import_lines(client, other_tenant, [event, dict(event), directive, dict(directive)])
    assert (done["imported"]["event"], done["existing"]["event"], done["imported"]["directive"]) == (1, 1, 1)

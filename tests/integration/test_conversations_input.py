"""What a conversation request must hold, over HTTP on real Postgres + Redis: bad appends and ids answer
4xx and write nothing, speakers are trimmed names on one line, cursors are checked before the database
sees them."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.test_conversations import TURNS, all_messages, append, search_contexts
from tests.integration.test_memories_api import assert_error


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"messages": []}, 400, None),
    ({"messages": [{"content": "   "}]}, 400, None),
    ({"messages": [{"content": "x", "role": "narrator"}]}, 400, None),
    ({"messages": [{"content": "x", "speaker": "two\nlines"}]}, 400, None),
    ({"messages": [{"content": "x", "speaker": "  "}]}, 400, None),
    *(({"messages": [{"content": "x", "speaker": bad}]}, 400, "validation_error") for bad in (
        "Dana\u2028Evil", "Dana\u2029Evil", "Dana\u0085Evil", "Dana\x7f", "\u200b", "\u202e", "Dana\u202eliveD",
        "\ufeffDana", "\u3000", "Dana\t")),
    ({"messages": [{"content": "x", "session_id": ".."}]}, 400, "validation_error"),
    ({"messages": [{"content": "x", "message_id": "."}]}, 400, "validation_error"),
    ({"messages": [{"content": "x", "message_id": "has space"}]}, 400, None),
    ({"messages": [{"content": "x", "session_id": "s" * 201}]}, 400, None),
    ({"messages": [{"content": "x", "occurred_at": "2024-05-01T14:30:00"}]}, 400, None),
    ({"messages": [{"content": "x", "occurred_at": "0999-05-01T14:30:00Z"}]}, 400, None),
    ({"messages": [{"content": "x", "metadata": {"k": "v" * 20_000}}]}, 413, "metadata_too_large"),
    ({"messages": [{"content": "x" * 40_000}]}, 413, "text_too_long"),
    ({"messages": [{"content": "x"}] * 257}, 413, "batch_too_large"),
    ({"messages": [{"content": "x"}], "extra": 1}, 400, None),
])
async def test_bad_appends_answer_4xx_and_write_nothing(client: AsyncTestClient[Any], tenant: Tenant,
                                                       body: dict[str, Any], status: int, code: str | None) -> None:
    r = await client.post("/v1/conversations/bad/messages", headers=tenant.headers, json=body)
    assert_error(r, status, code)
    assert_error(await client.get("/v1/conversations/bad", headers=tenant.headers), 404, "conversation_not_found")


@pytest.mark.parametrize("conversation", ["has space", "x" * 201, "new%0Aline", "%2E", "%2E%2E", "..."])
async def test_bad_conversation_ids_answer_400(client: AsyncTestClient[Any], tenant: Tenant, conversation: str) -> None:
    r = await client.post(f"/v1/conversations/{conversation}/messages", headers=tenant.headers,
                          json={"messages": TURNS[:1]})
    assert_error(r, 400, "validation_error")
    for method in ("GET", "DELETE"):
        assert_error(await client.request(method, f"/v1/conversations/{conversation}", headers=tenant.headers), 400)
    assert_error(await client.get(f"/v1/conversations/{conversation}/messages", headers=tenant.headers), 400)


async def test_ids_of_dots_only_are_refused_wherever_a_conversation_or_session_is_named(
        client: AsyncTestClient[Any], tenant: Tenant) -> None:
    # "." and ".." are path segments every HTTP client resolves away: such a conversation could not be reached
    await append(client, tenant, "dots", TURNS[:1])
    assert_error(await client.get("/v1/conversations/dots/messages", headers=tenant.headers,
                                  params={"session_id": ".."}), 400, "validation_error")
    r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
        "query": "anything", "model": "gpt-4o", "max_context_tokens": 1000, "conversation_id": ".."})
    assert_error(r, 400, "validation_error")
    schema = (await client.get("/schema/openapi.json")).json()
    pattern = next(p["schema"]["pattern"] for p in schema["paths"]["/v1/conversations/{conversation_id}"]["get"][
        "parameters"] if p["name"] == "conversation_id")
    assert re.search(pattern, "a.b") and not re.search(pattern, "..") and not re.search(pattern, ".")


async def test_a_speaker_is_trimmed_and_a_resend_still_matches(client: AsyncTestClient[Any], tenant: Tenant) -> None:
    first = await append(client, tenant, "trimmed", [{"speaker": " Dana\u00a0", "content": "Espresso at 8:45.",
                                                      "message_id": "m1", "session_id": "s"}])
    assert [m["speaker"] for m in await all_messages(client, tenant, "trimmed")] == ["Dana"]
    for speaker in (" Dana\u00a0", "Dana", "  Dana "):  # the same message, however it is padded
        again = await append(client, tenant, "trimmed", [{"speaker": speaker, "content": "Espresso at 8:45.",
                                                          "message_id": "m1", "session_id": "s"}])
        assert again["messages"][0] | {"created": True} == first["messages"][0] and not again["messages"][0]["created"]
    r = await client.post("/v1/conversations/trimmed/messages", headers=tenant.headers, json={"messages": [
        {"speaker": "Dan", "content": "Espresso at 8:45.", "message_id": "m1", "session_id": "s"}]})
    assert_error(r, 409, "message_id_reused")
    reply = await append(client, tenant, "trimmed", [{"speaker": "Bo", "content": "Noted.", "session_id": "s"}])
    assert await search_contexts(client, tenant, reply) == ["Dana: Espresso at 8:45."]


@pytest.mark.parametrize(("path", "raw"), [
    ("/v1/conversations", "2026-12-05T20:29:09+14:00|\x00"), ("/v1/conversations", "0001-01-01T00:00:00+14:00|x"),
    ("/v1/conversations", "2026-12-05T20:29:09|x"), ("/v1/conversations", "2026-12-05T20:29:09Z|a b"),
    ("/v1/conversations/paged/messages", "-1"), ("/v1/conversations/paged/messages", "9" * 19)])
async def test_a_cursor_is_checked_before_the_database_sees_it(client: AsyncTestClient[Any], tenant: Tenant,
                                                               path: str, raw: str) -> None:
    # once answered with the database's error (400 bad_request, sqlstate 22021 or 22000), or with a page
    await append(client, tenant, "paged", TURNS[:1])
    cursor = base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
    assert_error(await client.get(path, headers=tenant.headers, params={"cursor": cursor}), 400, "bad_cursor")

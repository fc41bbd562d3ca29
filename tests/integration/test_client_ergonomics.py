"""The Python client's small conveniences against a live service: a single write's ``id``, ``explain=`` and
``encoding=`` on ``assemble``, the default address from ``PGCONTEXT_PORT``, a clear ``TransportError`` when
nothing listens, and numbers as they were written (no float4 noise)."""

from __future__ import annotations

import functools
import json
from uuid import uuid4

import httpx
import pytest
from pgcontext_client import AsyncClient, Client, MessageIn, PgcontextError, RetryPolicy, TransportError
from pgcontext_client.client import default_url

from tests.conftest import Tenant
from tests.integration.test_client import _closed_port

pytestmark = pytest.mark.integration


def test_a_single_write_answers_its_id_and_status(live_url: str, tenant: Tenant) -> None:
    agent = f"ergo-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        written = pg.create_memory("The user's cat is called Miso.", agent_id=agent, importance=0.9)
        assert written.status == "created" and written.ids == [written.id]  # a batch's fields are still there
        memory = pg.get_memory(written.id)
        assert memory.text == "The user's cat is called Miso."
        assert memory.importance == 0.9  # as written, not 0.8999999761581421
        again = pg.create_memory("the user's cat is called Miso", agent_id=agent)
        assert again.status == "merged" and again.id == written.id


async def test_assemble_takes_explain_and_encoding(live_url: str, tenant: Tenant) -> None:
    agent = f"ergo-{uuid4().hex[:8]}"
    async with AsyncClient(live_url, tenant.key) as pg:
        for i in range(12):
            await pg.create_memory(
                f"Fact {i}: the office plant number {i} needs water on day {i}.", agent_id=agent, on_duplicate="keep"
            )
        ask = functools.partial(pg.assemble, agent, "which plant needs water?", max_context_tokens=120,
                                reserve_tokens=0, model="custom-model", encoding="o200k_base")
        plain = await ask()
        assert plain.budget.encoding == "o200k_base" and plain.budget.safety_factor == 1.0
        assert plain.dropped and all(d.text is None for d in plain.dropped)
        explained = await ask(explain=True)
        assert explained.dropped and all(d.text and d.scores is not None for d in explained.dropped)


def test_the_default_url_is_the_service_default_on_pgcontext_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONTEXT_URL", raising=False)
    monkeypatch.delenv("PGCONTEXT_PORT", raising=False)
    assert default_url() == "http://127.0.0.1:8080"
    monkeypatch.setenv("PGCONTEXT_PORT", "18123")
    assert default_url() == "http://127.0.0.1:18123"
    with Client() as pg:
        assert str(pg._http.base_url) == "http://127.0.0.1:18123"
    monkeypatch.setenv("PGCONTEXT_URL", "http://10.1.2.3:9000")  # an explicit URL wins (never contacted)
    assert default_url() == "http://10.1.2.3:9000"
    monkeypatch.delenv("PGCONTEXT_URL")
    monkeypatch.setenv("PGCONTEXT_PORT", "eighty")
    with pytest.raises(ValueError, match="PGCONTEXT_PORT"):
        Client()


def test_the_port_from_the_environment_reaches_a_live_service(
    live_url: str, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = httpx.URL(live_url)
    assert url.host == "127.0.0.1"
    monkeypatch.delenv("PGCONTEXT_URL", raising=False)
    monkeypatch.setenv("PGCONTEXT_PORT", str(url.port))
    monkeypatch.setenv("PGCONTEXT_API_KEY", tenant.key)
    with Client() as pg:
        assert pg.health().status == "ok"


async def test_nothing_listening_is_a_transport_error_naming_the_url(tenant: Tenant) -> None:
    port = _closed_port()
    policy = RetryPolicy(attempts=1)
    with Client(f"http://127.0.0.1:{port}", tenant.key, retry=policy) as pg, pytest.raises(TransportError) as down:
        pg.get_memory(uuid4())
    error = down.value
    assert error.status is None and error.code == "transport_error"
    assert f"127.0.0.1:{port}" in error.message and "nothing answered" in error.message
    assert error.url is not None and error.url.startswith(f"http://127.0.0.1:{port}/v1/memories/")
    assert str(error).startswith("transport_error: nothing answered at http://127.0.0.1:")
    assert isinstance(error, PgcontextError) and isinstance(error.__cause__, httpx.ConnectError)
    async with AsyncClient(f"http://127.0.0.1:{port}", tenant.key, retry=policy) as apg:
        with pytest.raises(TransportError) as adown:
            await apg.search("anything")
    assert adown.value.status is None and f"127.0.0.1:{port}" in adown.value.message


def test_search_scores_and_memory_numbers_have_no_float4_noise(live_url: str, tenant: Tenant) -> None:
    agent = f"ergo-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        written = pg.create_memory("Numbers check: the boiler pressure is 1.5 bar.", agent_id=agent, importance=0.3)
        raw = pg._http.get(f"/v1/memories/{written.id}")
        assert json.loads(raw.text)["importance"] == 0.3 and '"importance":0.3' in raw.text.replace(" ", "")


async def test_iterate_reads_every_page_of_a_listing(live_url: str, tenant: Tenant) -> None:
    agent, chat = f"ergo-{uuid4().hex[:8]}", f"pages-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as pg:
        written = [pg.create_memory(f"Page test fact number {i}.", agent_id=agent).id for i in range(5)]
        pg.append_messages(chat, [MessageIn(content=f"turn {i}", role="user") for i in range(5)], agent_id=agent)
        every = list(pg.iterate(pg.list_memories, agent_id=agent, kind="fact", limit=2))
        assert [m.id for m in every] == written[::-1]  # newest first, across three pages
        assert [m.content for m in pg.iterate(pg.list_messages, chat, limit=2)] == [f"turn {i}" for i in range(5)]
        second_page = pg.list_memories(agent_id=agent, kind="fact", limit=2).next_cursor
        assert [m.id for m in pg.iterate(pg.list_memories, agent_id=agent, kind="fact", limit=2,
                                         cursor=second_page)] == written[2::-1]
        assert len(list(pg.iterate(pg.list_memories, agent_id=agent, limit=3))) == 10  # the messages too
    async with AsyncClient(live_url, tenant.key) as apg:
        assert [m.id async for m in apg.iterate(apg.list_memories, agent_id=agent, kind="fact", limit=2)] \
            == written[::-1]
        assert [c.id async for c in apg.iterate(apg.list_conversations, agent_id=agent, limit=1)] == [chat]


def test_an_http_client_of_your_own_is_used_as_it_is(
        live_url: str, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """``http=`` brings its own base URL and key: a ``url`` or ``api_key`` beside it would go unused, so
    it is refused; the environment's defaults are not read (a bad ``PGCONTEXT_PORT`` does not matter)."""
    monkeypatch.setenv("PGCONTEXT_PORT", "eighty")
    with httpx.Client(base_url=live_url, headers={"Authorization": f"Bearer {tenant.key}"}) as http:
        with pytest.raises(TypeError, match="not both"):
            Client(live_url, tenant.key, http=http)
        with pytest.raises(TypeError, match="not both"):
            Client(api_key=tenant.key, http=http)
        with Client(http=http) as pg:
            assert pg.health().status == "ok" and pg.list_memories(limit=1).items == []
    with pytest.raises(TypeError, match="not both"):
        AsyncClient("http://127.0.0.1:1", http=httpx.AsyncClient())


def test_an_api_key_read_from_a_file_works_and_a_malformed_one_never_reaches_a_message(
        live_url: str, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key read from a file or a .env ends with a newline (or CRLF): it is taken without it. One with
    whitespace inside is refused when the client is made; an illegal ``Authorization`` header on an httpx
    client of your own is a ``TransportError`` that does not print the key."""
    with Client(live_url, tenant.key + "\n") as pg:
        assert pg.list_memories(limit=1).items == []
    monkeypatch.setenv("PGCONTEXT_URL", live_url)
    monkeypatch.setenv("PGCONTEXT_API_KEY", f" {tenant.key}\r\n")
    with Client() as pg:
        assert pg.list_memories(limit=1).items == []
    secret = tenant.key.removeprefix("pgc_")
    for bad in (f"{tenant.key[:10]} {tenant.key[10:]}", f"{tenant.key}\x00"):
        with pytest.raises(ValueError, match="API key") as refused:
            AsyncClient(live_url, bad)
        assert secret[:8] not in str(refused.value)
    headers = {"Authorization": f"Bearer {tenant.key}\n"}
    with (httpx.Client(base_url=live_url, headers=headers) as http, Client(http=http) as pg,
          pytest.raises(TransportError) as unsent):
        pg.health()
    assert "could not be sent" in unsent.value.message and secret[:8] not in str(unsent.value)
    assert "Bearer [redacted]" in unsent.value.message

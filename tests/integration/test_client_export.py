"""``Client.export`` and ``AsyncClient.export`` never pass off an export that stopped early as a whole one:
the live service's ``error`` line (its reading failed after the answer started) raises, as does a stream
that ends without its ``end`` line or in the middle of a line (served by a small scripted server: the
service itself always ends with one of the two). An export streams on one event loop after another."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import msgspec
import pytest
from pgcontext_client import AsyncClient, Client, IncompleteExport, TransportError

from service.export import stream
from tests.conftest import Tenant
from tests.integration.test_client_transport import scripted

pytestmark = pytest.mark.integration


def seed(url: str, key: str) -> str:
    agent = f"export-{uuid4().hex[:8]}"
    with Client(url, key) as pg:
        pg.create_memory("The boiler is serviced every March.", agent_id=agent)
        pg.put_directive(agent, "Be brief.")
    return agent


async def test_the_services_error_line_raises_after_the_lines_before_it(
        live_url: str, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = seed(live_url, tenant.key)
    real_query = stream.query  # type: ignore[attr-defined]
    # Every statement after the header fails (a statement timeout, a dropped connection would too).
    monkeypatch.setattr(stream, "query", lambda name: real_query(name) if name == "export.header"
                        else "SELECT (1 / 0)::text AS line")
    read: list[dict[str, Any]] = []
    with Client(live_url, tenant.key) as pg, pytest.raises(IncompleteExport) as failed:
        read.extend(pg.export(agent))
    assert [line["type"] for line in read] == ["export"]  # the header, then the failure
    assert failed.value.code == "export_failed" and failed.value.status is None
    assert failed.value.url is not None and failed.value.url.endswith(f"/v1/export?agent_id={agent}")
    async with AsyncClient(live_url, tenant.key) as apg:
        with pytest.raises(IncompleteExport) as afailed:
            [line async for line in apg.export(agent)]
    assert afailed.value.code == "export_failed"
    monkeypatch.undo()
    with Client(live_url, tenant.key) as pg:
        whole = list(pg.export(agent))
    kinds = [line["type"] for line in whole]
    assert kinds[0] == "export" and kinds[-1] == "end" and "memory" in kinds


def ndjson(*lines: dict[str, Any]) -> bytes:
    return b"".join(msgspec.json.encode(line) + b"\n" for line in lines)


HEADER = {"type": "export", "agent_id": "a"}
MEMORY = {"type": "memory", "id": "01a22ddc-3507-74bb-9886-f62081aacd52", "text": "x"}
END = {"type": "end", "counts": {"memory": 1}}
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.mark.parametrize(("body", "what"), [
    (ndjson(HEADER, MEMORY), "without its end line"),
    (ndjson(HEADER) + msgspec.json.encode(MEMORY)[:20], "is not JSON"),
    (ndjson(HEADER, END, MEMORY), "a line after the end line"),
], ids=["no end line", "cut in a line", "a line after the end"])
async def test_a_stream_that_ends_early_raises(body: bytes, what: str) -> None:
    with scripted((200, NDJSON, body)) as script:
        with Client(script.url, "k") as pg, pytest.raises(IncompleteExport) as cut:
            list(pg.export("a"))
        assert cut.value.code == "export_incomplete" and what in cut.value.message
        async with AsyncClient(script.url, "k") as apg:
            with pytest.raises(IncompleteExport):
                [line async for line in apg.export("a")]


async def test_a_connection_broken_part_way_is_a_transport_error_after_the_lines_before_it() -> None:
    body = ndjson(HEADER, MEMORY)
    with scripted((200, {**NDJSON, "Content-Length": str(len(body) + 100)}, body)) as script:
        read: list[dict[str, Any]] = []
        with Client(script.url, "k") as pg, pytest.raises(TransportError) as broken:
            read.extend(pg.export("a"))
        assert read == [HEADER, MEMORY] and broken.value.url is not None and "/v1/export" in broken.value.url
        async with AsyncClient(script.url, "k") as apg:
            with pytest.raises(TransportError):
                [line async for line in apg.export("a")]


SEPARATORS = "Line\u2028separator, paragraph\u2029separator, next line\u0085and\r\nnewline."


async def test_a_line_ends_only_at_a_newline(live_url: str, tenant: Tenant) -> None:
    """JSON leaves U+2028, U+2029 and U+0085 unescaped in strings: a line holding them is one line, whether
    the stream escapes them (the service) or not (served raw here, as JSON allows)."""
    raw = b'{"type":"memory","text":"' + SEPARATORS.replace("\r\n", "\\r\\n").encode() + b'"}\n'
    body = ndjson(HEADER) + raw + ndjson(END)
    with scripted((200, NDJSON, body)) as script:
        with Client(script.url, "k") as pg:
            assert [line.get("text") for line in pg.export("a")] == [None, SEPARATORS, None]
        async with AsyncClient(script.url, "k") as apg:
            assert [line.get("text") async for line in apg.export("a")] == [None, SEPARATORS, None]
    agent = f"export-{uuid4().hex[:8]}"
    with Client(live_url, tenant.key) as live:
        live.create_memory(SEPARATORS, agent_id=agent)
        assert [line["text"] for line in live.export(agent) if line["type"] == "memory"] == [SEPARATORS]


async def test_a_whole_stream_reads_through_its_end_line() -> None:
    with scripted((200, NDJSON, ndjson(HEADER, MEMORY, END) + b"\n")) as script, Client(script.url, "k") as pg:
        assert list(pg.export("a")) == [HEADER, MEMORY, END]
    no_last_newline = ndjson(HEADER, MEMORY) + msgspec.json.encode(END)
    with scripted((200, NDJSON, no_last_newline)) as script, Client(script.url, "k") as pg:
        assert list(pg.export("a")) == [HEADER, MEMORY, END]


def test_an_async_export_streams_on_one_event_loop_after_another(live_url: str, tenant: Tenant) -> None:
    agent = seed(live_url, tenant.key)
    pg = AsyncClient(live_url, tenant.key)

    async def export() -> list[str]:
        return [str(line["type"]) async for line in pg.export(agent)]

    first, second = asyncio.run(export()), asyncio.run(export())
    assert first == second and first[0] == "export" and first[-1] == "end" and "memory" in first
    asyncio.run(pg.aclose())

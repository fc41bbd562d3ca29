"""An export waits for its first line longer than the client's read timeout (the service may sort a
large org's lines for up to its statement limit before the first leaves); other calls keep the client's
timeout. Against a small real HTTP server that answers after a pause."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pgcontext_client import AsyncClient, Client, TransportError

PAUSE_S = 0.6
LINES = b'{"type": "export", "version": 1}\n{"type": "end", "lines": 2}\n'


@pytest.fixture
def slow_url() -> Iterator[str]:
    """A server whose answers start at once and send their body after ``PAUSE_S``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Content-Length", str(len(LINES)))
            self.end_headers()
            self.wfile.flush()
            time.sleep(PAUSE_S)
            self.wfile.write(LINES)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_export_outwaits_the_clients_read_timeout(slow_url: str) -> None:
    with Client(slow_url, "k", timeout=PAUSE_S / 3) as pg:
        assert [line["type"] for line in pg.export()] == ["export", "end"]
        with pytest.raises(TransportError):  # a plain read keeps the client's timeout
            pg.get_conversation("c")


async def test_the_async_clients_export_too(slow_url: str) -> None:
    async with AsyncClient(slow_url, "k", timeout=PAUSE_S / 3) as pg:
        assert [line["type"] async for line in pg.export("a")] == ["export", "end"]

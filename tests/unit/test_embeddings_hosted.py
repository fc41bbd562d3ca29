"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 that speaks the OpenAI embeddings API."""

from __future__ import annotations

import json
import socket
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from service.embeddings import EmbeddingError, OpenAIEmbedder, build_embedder
from service.settings import EmbeddingSettings

DIM = 8


def raw_vector(text: str, dim: int = DIM) -> npt.NDArray[np.float64]:
    """Deterministic, deliberately unnormalised, so the client's normalisation is tested too."""
    vector: npt.NDArray[np.float64] = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(dim)
    return vector * 3.0


def expected(texts: list[str]) -> npt.NDArray[np.float64]:
    vectors = np.stack([raw_vector(t) for t in texts])
    normalised: npt.NDArray[np.float64] = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return normalised


@dataclass
class Stub:
    """What the server does next, and what it has seen."""

    base: str
    mode: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            stub.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            texts: list[str] = body["input"]
            dim = DIM + 1 if stub.mode == "wrong_dim" else DIM
            data = [
                {"object": "embedding", "index": i, "embedding": raw_vector(t, dim).tolist()}
                for i, t in enumerate(texts)
            ]
            if stub.mode == "error":
                self._send(500, json.dumps({"error": {"message": "upstream exploded"}}).encode())
                return
            if stub.mode == "malformed":
                self._send(200, b'{"data": [')
                return
            if stub.mode == "no_data":
                self._send(200, b'{"object": "list"}')
                return
            if stub.mode == "slow":
                time.sleep(0.5)
            if stub.mode == "shuffled":
                data.reverse()
            self._send(200, json.dumps({"object": "list", "data": data, "model": body["model"]}).encode())

        def _send(self, status: int, payload: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def server() -> Iterator[Stub]:
    stub = Stub(base="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    stub.base = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield stub
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def stub(server: Stub) -> Stub:
    server.mode = "ok"
    server.requests.clear()
    return server


MakeEmbedder = Callable[..., OpenAIEmbedder]


@pytest.fixture
async def make_embedder(stub: Stub) -> AsyncIterator[MakeEmbedder]:
    created: list[OpenAIEmbedder] = []

    def make(**overrides: Any) -> OpenAIEmbedder:
        options: dict[str, Any] = {"model": "test-model", "dim": DIM, "api_key": "sk-test", **overrides}
        embedder = OpenAIEmbedder(options.pop("api_base", stub.base), **options)
        created.append(embedder)
        return embedder

    yield make
    for embedder in created:
        await embedder.aclose()


TEXTS = ["alpha", "beta", "gamma", "delta", "epsilon"]


async def test_embeds_and_normalises(stub: Stub, make_embedder: MakeEmbedder) -> None:
    embedder = make_embedder()
    out = await embedder.embed(TEXTS[:3])
    assert embedder.name == "openai:test-model"
    assert out.dtype == np.float32
    assert out.shape == (3, DIM)
    np.testing.assert_allclose(out, expected(TEXTS[:3]), atol=1e-6)
    assert stub.requests == [
        {"path": "/v1/embeddings", "body": {"model": "test-model", "input": TEXTS[:3]}, "auth": "Bearer sk-test"}
    ]


async def test_batches_requests(stub: Stub, make_embedder: MakeEmbedder) -> None:
    out = await make_embedder(batch_size=2).embed(TEXTS)
    assert [r["body"]["input"] for r in stub.requests] == [TEXTS[0:2], TEXTS[2:4], TEXTS[4:5]]
    np.testing.assert_allclose(out, expected(TEXTS), atol=1e-6)


async def test_reorders_by_index(stub: Stub, make_embedder: MakeEmbedder) -> None:
    stub.mode = "shuffled"
    out = await make_embedder(batch_size=3).embed(TEXTS)
    np.testing.assert_allclose(out, expected(TEXTS), atol=1e-6)


async def test_no_texts_no_request(stub: Stub, make_embedder: MakeEmbedder) -> None:
    out = await make_embedder().embed([])
    assert out.shape == (0, DIM)
    assert stub.requests == []


async def test_rejects_a_bare_string(stub: Stub, make_embedder: MakeEmbedder) -> None:
    with pytest.raises(TypeError, match="not a single str"):
        await make_embedder().embed("alpha")
    assert stub.requests == []


async def test_no_api_key_no_auth_header(stub: Stub, make_embedder: MakeEmbedder) -> None:
    await make_embedder(api_key=None).embed(["alpha"])
    assert stub.requests[0]["auth"] is None


@pytest.mark.parametrize(
    ("mode", "options", "message"),
    [
        ("error", {}, r"HTTP 500: upstream exploded"),
        ("slow", {"timeout_s": 0.1}, r"timed out after 0\.1s"),
        ("wrong_dim", {}, rf"dimension {DIM + 1}, expected {DIM}"),
        ("malformed", {}, r"malformed JSON"),
        ("no_data", {}, r"missing field 'data'"),
    ],
)
async def test_failures_become_embedding_errors(
    stub: Stub, make_embedder: MakeEmbedder, mode: str, options: dict[str, Any], message: str
) -> None:
    stub.mode = mode
    with pytest.raises(EmbeddingError, match=message):
        await make_embedder(**options).embed(TEXTS[:2])


async def test_unreachable_server_is_an_embedding_error(make_embedder: MakeEmbedder) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    embedder = make_embedder(api_base=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(EmbeddingError, match="request failed: ConnectError"):
        await embedder.embed(["alpha"])


async def test_build_embedder_openai(stub: Stub, tmp_path: Path) -> None:
    settings = EmbeddingSettings(provider="openai", api_base=stub.base + "/", model="m", dim=DIM, batch_size=2)
    embedder = build_embedder(settings, tmp_path)
    try:
        assert embedder.name == "openai:m"
        assert embedder.dim == DIM
        assert (await embedder.embed(TEXTS)).shape == (len(TEXTS), DIM)
        assert len(stub.requests) == 3
        assert stub.requests[0]["path"] == "/v1/embeddings"
    finally:
        await embedder.aclose()


def test_build_embedder_openai_needs_api_base(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PGCONTEXT_EMBEDDING_API_BASE"):
        build_embedder(EmbeddingSettings(provider="openai"), tmp_path)

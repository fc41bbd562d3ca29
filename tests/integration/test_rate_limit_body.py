"""A request's body is priced by the bytes the service reads, however they arrive: a chunked body
(``Transfer-Encoding: chunked``, no ``Content-Length``) costs what the same body with a length costs,
and one whose price passes what the org's bucket holds is refused while it is still arriving, with the
same 429, before the rest is read. Real HTTP against the app on a real port."""

from __future__ import annotations

import dataclasses
import json
import select
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx

from service.app import create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import RateLimitSettings, Settings
from tests.conftest import Tenant
from tests.integration.test_assembly_faults import served
from tests.integration.test_rate_limit import _tokens_left

SEARCH = "/v1/memories/search"
BYTES_PER_TOKEN = 16384


def padded_search(size: int) -> bytes:
    """A valid lexical search whose body is ``size`` bytes (JSON allows trailing whitespace)."""
    head = json.dumps({"query": "tea", "strategy": "lexical"}).encode()
    return head + b" " * (size - len(head))


def chunks(body: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start:start + size]


async def streamed(body: bytes) -> AsyncIterator[bytes]:
    for piece in chunks(body):
        yield piece


def limited(settings: Settings, **limits: Any) -> Settings:
    return dataclasses.replace(settings, rate_limit=RateLimitSettings(**{"timeout_ms": 1000, **limits}))


async def test_a_chunked_body_costs_what_the_same_body_with_a_length_costs(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, redis_url: str, tenant: Tenant) -> None:
    body = padded_search(640_000)
    price = 4 + len(body) // BYTES_PER_TOKEN  # heavy route + the body
    app = create_app(limited(settings, rps=0.001, burst=1000, heavy_cost=4, body_bytes_per_token=BYTES_PER_TOKEN),
                     endpoints, embedder=embedder)
    with served(app) as url:
        async with httpx.AsyncClient(base_url=url, headers={**tenant.headers, "Content-Type": "application/json"},
                                     timeout=60) as http:
            assert (await http.get("/v1/memories")).status_code == 200  # the bucket exists: 999 left
            drops = {}
            content: bytes | AsyncIterator[bytes]
            for how, content in (("length", body), ("chunked", streamed(body))):
                before = await _tokens_left(redis_url, tenant)
                r = await http.post(SEARCH, content=content)
                assert r.status_code == 200, r.text
                sent_chunked = "content-length" not in r.request.headers
                assert sent_chunked is (how == "chunked"), r.request.headers
                drops[how] = round(before - await _tokens_left(redis_url, tenant))
    assert drops == {"length": price, "chunked": price}, drops


def chunked_post(url: str, path: str, headers: dict[str, str], body: bytes,
                 chunk: int = 64 * 1024) -> tuple[int, dict[str, Any], int]:
    """POST ``body`` chunked over a raw socket, one chunk at a time, looking for an answer after each:
    (status, JSON body, bytes sent when the answer came)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=30) as sock:
        head = [f"POST {path} HTTP/1.1", f"Host: {parts.netloc}", "Transfer-Encoding: chunked",
                "Content-Type: application/json", *(f"{k}: {v}" for k, v in headers.items())]
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        sent = 0
        for piece in chunks(body, chunk):
            if select.select([sock], [], [], 0.05)[0]:
                break  # answered while the body is still arriving
            try:
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        else:
            sock.sendall(b"0\r\n\r\n")
        response = b""
        deadline = time.monotonic() + 30
        while b"\r\n\r\n" not in response or len(response.split(b"\r\n\r\n", 1)[1]) < _length(response):
            assert time.monotonic() < deadline, response[:500]
            data = sock.recv(65536)
            if not data:
                break
            response += data
    status_line, rest = response.split(b"\r\n", 1)
    payload = rest.split(b"\r\n\r\n", 1)[1]
    return int(status_line.split()[1]), json.loads(payload[:_length(response)]), sent


def _length(response: bytes) -> int:
    for line in response.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


async def test_a_chunked_body_past_the_bucket_is_refused_while_it_arrives(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    """~150 tokens left, a 6 MB chunked body (a full bucket's price): 429 with the route's error shape
    and Retry-After, answered once the bytes read passed what the bucket holds (~2.4 MB), not after
    the whole body; an org that can pay it is served."""
    app = create_app(limited(settings, rps=0.001, burst=300, heavy_cost=4, body_bytes_per_token=BYTES_PER_TOKEN),
                     endpoints, embedder=embedder)
    big = padded_search(6 * 1024 * 1024)
    with served(app) as url:
        async with httpx.AsyncClient(base_url=url, headers={**tenant.headers, "Content-Type": "application/json"},
                                     timeout=60) as http:
            spend = padded_search(146 * BYTES_PER_TOKEN)  # 4 + 146: 150 of 300 left
            assert (await http.post(SEARCH, content=spend)).status_code == 200
        status, error, sent = chunked_post(url, SEARCH, tenant.headers, big)
    assert status == 429, error
    assert set(error) == {"error"} and error["error"]["code"] == "rate_limited", error
    assert error["error"]["details"]["retry_after_s"] >= 1
    assert (150 - 4) * BYTES_PER_TOKEN <= sent < len(big) // 2, (sent, len(big))  # not before the price passed


async def test_a_body_over_the_size_limit_is_a_413_that_costs_nothing(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, redis_url: str, tenant: Tenant) -> None:
    """Priced by its length, a body over the limit would take the org's whole burst (a 429 for what is
    a 413, and 429s for the org's next requests): it is refused by size first, naming the limit, whether
    it announces its length or arrives chunked."""
    limit = 256 * 1024
    app = create_app(dataclasses.replace(limited(settings, rps=0.001, burst=40, heavy_cost=4,
                                                 body_bytes_per_token=BYTES_PER_TOKEN),
                                         limits=dataclasses.replace(settings.limits, max_request_bytes=limit)),
                     endpoints, embedder=embedder)
    body = padded_search(limit * 3)
    with served(app) as url:
        async with httpx.AsyncClient(base_url=url, headers={**tenant.headers, "Content-Type": "application/json"},
                                     timeout=60) as http:
            assert (await http.get("/v1/memories")).status_code == 200  # the bucket exists: 39 left
            before = await _tokens_left(redis_url, tenant)
            for _ in range(3):
                r = await http.post(SEARCH, content=body)
                assert r.status_code == 413, r.text
                error = r.json()["error"]
                assert error["code"] == "payload_too_large" and error["details"] == {"limit": limit}, error
                assert error["message"] == f"the body is {len(body):,} bytes; the limit is {limit:,} bytes"
            assert await _tokens_left(redis_url, tenant) == before
            r = await http.post(SEARCH, content=streamed(body))
            assert r.status_code == 413 and r.json()["error"]["details"] == {"limit": limit}, r.text
            assert (await http.post(SEARCH, content=padded_search(1000))).status_code == 200

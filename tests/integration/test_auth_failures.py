"""Failed authentications are limited per source address, in the process, before the key lookup: an
address that sent ``auth_failure_burst`` unknown keys gets 429 (``Retry-After``) without a database
round trip until its bucket refills at ``auth_failure_rate_per_s``; keys already resolved (cached, or
found within the last 15 minutes) still work from it, and other addresses are untouched. Real HTTP on a
real port, each client from its own loopback address."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.app import create_app
from service.auth.failures import FailedAuthLimiter
from service.embeddings import Embedder
from service.runtime import Endpoints, Services
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly_faults import served

BURST = 5


@pytest.fixture
def limited_service(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> Iterator[tuple[str, list[int]]]:
    """The app with a small failure budget (5 lookups, no refill to speak of) and a cache of resolved
    keys; yields its URL and the count of API-key lookups that reached Postgres."""
    server = dataclasses.replace(settings.server, auth_cache_ttl_s=60.0, auth_failure_burst=BURST,
                                 auth_failure_rate_per_s=0.001)
    app = create_app(dataclasses.replace(settings, server=server), endpoints, embedder=embedder)
    lookups = [0]
    with served(app) as url:
        services = app.state.services
        assert isinstance(services, Services)
        real = services.db.resolve_api_key

        async def counted(key_hash: bytes, timeout_s: float | None = None) -> Any:
            lookups[0] += 1  # one round trip to Postgres
            return await real(key_hash, timeout_s)

        services.db.resolve_api_key = counted  # type: ignore[method-assign]
        yield url, lookups


def from_address(url: str, address: str, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=30, transport=httpx.AsyncHTTPTransport(local_address=address),
                             **kwargs)


async def test_unknown_keys_from_one_address_stop_reaching_the_database(
        limited_service: tuple[str, list[int]], tenant: Tenant, other_tenant: Tenant) -> None:
    url, lookups = limited_service
    async with from_address(url, "127.0.0.2") as attacker, from_address(url, "127.0.0.3") as neighbour:
        assert (await attacker.get("/v1/memories", headers=tenant.headers)).status_code == 200  # now cached
        assert lookups == [1]
        statuses = []
        for _ in range(60):
            r = await attacker.get("/v1/memories", headers={"Authorization": f"Bearer pgc_{secrets.token_urlsafe(32)}"})
            statuses.append(r.status_code)
            if r.status_code == 429:
                body = r.json()
                assert set(body) == {"error"} and body["error"]["code"] == "auth_rate_limited", body
                assert int(r.headers["retry-after"]) >= 1
        assert statuses == [401] * BURST + [429] * (60 - BURST), statuses
        assert lookups == [1 + BURST]  # the refusals cost Postgres nothing

        # The address's resolved key still works (no lookup); another address is not limited.
        assert (await attacker.get("/v1/memories", headers=tenant.headers)).status_code == 200
        assert (await neighbour.get("/v1/memories", headers=other_tenant.headers)).status_code == 200
        r = await neighbour.get("/v1/memories", headers={"Authorization": "Bearer pgc_never-issued"})
        assert r.status_code == 401
        assert lookups == [1 + BURST + 2]
        # A request with no key at all is a 401 that needed no lookup: never limited, never counted.
        assert (await attacker.get("/v1/memories")).status_code == 401


async def test_concurrent_unknown_keys_are_bounded_too(limited_service: tuple[str, list[int]]) -> None:
    """The budget is taken before the lookup, not after its answer: a burst in parallel cannot slip
    more lookups through than the budget."""
    import asyncio

    url, lookups = limited_service
    async with from_address(url, "127.0.0.4") as attacker:
        responses = await asyncio.gather(*(
            attacker.get("/v1/memories", headers={"Authorization": f"Bearer pgc_{secrets.token_urlsafe(32)}"})
            for _ in range(40)))
    assert sorted(r.status_code for r in responses) == [401] * BURST + [429] * (40 - BURST)
    assert lookups == [BURST]


async def test_a_key_found_recently_keeps_working_from_a_flooded_address(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, other_tenant: Tenant) -> None:
    """Clients behind one proxy share an address: one of them sending unknown (revoked) keys must not lock
    the others out once their keys' cache entries end. A key found within the last 15 minutes is looked
    up again without a token; a key never seen from anywhere still waits for the address's budget."""
    import asyncio

    server = dataclasses.replace(settings.server, auth_cache_ttl_s=0.2, auth_failure_burst=BURST,
                                 auth_failure_rate_per_s=0.001)
    app = create_app(dataclasses.replace(settings, server=server), endpoints, embedder=embedder)
    with served(app) as url:
        async with from_address(url, "127.0.0.5") as shared:
            assert (await shared.get("/v1/memories", headers=tenant.headers)).status_code == 200
            flood = [(await shared.get("/v1/memories", headers={
                "Authorization": f"Bearer pgc_{secrets.token_urlsafe(32)}"})).status_code for _ in range(10)]
            assert flood == [401] * BURST + [429] * (10 - BURST)
            await asyncio.sleep(0.3)  # the key's cache entry has ended: it is looked up again
            for _ in range(3):
                assert (await shared.get("/v1/memories", headers=tenant.headers)).status_code == 200
                await asyncio.sleep(0.25)
            r = await shared.get("/v1/memories", headers=other_tenant.headers)  # never found: no exception
            assert r.status_code == 429 and r.json()["error"]["code"] == "auth_rate_limited", r.text


def test_the_addresses_remembered_are_bounded() -> None:
    limiter = FailedAuthLimiter(burst=2, rate_per_s=0.001, max_addresses=100)
    for i in range(10_000):
        address = f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"
        assert limiter.take(address) is None
    assert len(limiter) == 100
    # IPv6 addresses count by their /64: one host cannot spread over its subnet's addresses.
    for suffix in range(3):
        refusal = limiter.take(f"2001:db8:1:2::{suffix + 1:x}")
        assert (refusal is None) is (suffix < 2)

"""``/metrics`` behind ``PGCONTEXT_METRICS_TOKEN``: a bearer token or a 401 in the one error shape."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from litestar.testing import AsyncTestClient

from service.app import create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings, load_settings


def test_the_token_is_read_from_the_environment() -> None:
    assert load_settings({"PGCONTEXT_METRICS_TOKEN": "t0ken"}).server.metrics_token == "t0ken"
    assert load_settings({"PGCONTEXT_METRICS_TOKEN": ""}).server.metrics_token is None
    assert load_settings({}).server.metrics_token is None


async def test_metrics_need_the_token_when_one_is_set(settings: Settings, endpoints: Endpoints,
                                                       embedder: Embedder) -> None:
    token = "scrape-token-for-tests"
    guarded = dataclasses.replace(settings, server=dataclasses.replace(settings.server, metrics_token=token))
    async with AsyncTestClient(app=create_app(guarded, endpoints, embedder=embedder)) as http:
        for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": token},
                        {"Authorization": f"Basic {token}"}, {"Authorization": f"Bearer {token}x"}):
            r = await http.get("/metrics", headers=headers)
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["WWW-Authenticate"].startswith("Bearer "), r.headers
            error: dict[str, Any] = r.json()["error"]
            assert error["code"] == "unauthorized" and "metrics" in error["message"], error
            assert error["request_id"] == r.headers["x-request-id"]
            assert token not in r.text

        for scheme in ("Bearer", "bearer"):
            r = await http.get("/metrics", headers={"Authorization": f"{scheme} {token}"})
            assert r.status_code == 200, r.text
            # The five refused scrapes above are counted among the HTTP metrics.
            assert re.search(r'requests_total\{app_name="pgcontext",method="GET",path="/metrics",'
                             r'status_code="401"\} 5\.0', r.text), r.text
        # The other operational endpoints stay open: orchestrators probe them without credentials.
        assert (await http.get("/healthz")).status_code == 200
        assert (await http.get("/readyz")).status_code == 200


async def test_metrics_are_open_without_a_token(client: AsyncTestClient[Any]) -> None:
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert 'app_name="pgcontext"' in r.text

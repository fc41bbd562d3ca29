"""The worker factory used by ``pgcontext serve --workers N`` builds the app from the environment."""

from __future__ import annotations

import pytest
from litestar import Litestar

from service.app import app_from_env


def test_app_from_env_needs_every_server(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PGCONTEXT_DATABASE_URL", "PGCONTEXT_APP_DATABASE_URL", "PGCONTEXT_REDIS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGCONTEXT_DATABASE_URL", "postgresql://owner@db/pgcontext")
    with pytest.raises(RuntimeError, match="PGCONTEXT_APP_DATABASE_URL"):
        app_from_env()


def test_app_from_env_builds_the_app_without_connecting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCONTEXT_DATABASE_URL", "postgresql://owner@db/pgcontext")
    monkeypatch.setenv("PGCONTEXT_APP_DATABASE_URL", "postgresql://pgcontext_app@db/pgcontext")
    monkeypatch.setenv("PGCONTEXT_REDIS_URL", "redis://cache:6379/0")
    app = app_from_env()
    assert isinstance(app, Litestar)
    paths = {route.path for route in app.routes}
    assert {"/v1/memories", "/v1/context/assemble", "/v1/memories/search", "/v1/documents"} <= paths

"""``GET /explain`` and its two assets, read from the package once and served with strict headers."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Final

from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

_TYPES: Final = {"explain.js": "text/javascript", "explain.css": "text/css", "explain.html": "text/html"}
"""Litestar adds ``; charset=utf-8`` to a text type (given here too, it was sent twice)."""
# Everything comes from this origin; no inline script or style can run, so a memory's text rendered
# by the page can never execute, even if a rendering bug let markup through.
_HEADERS: Final = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                                "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
    "X-Frame-Options": "DENY",  # frame-ancestors 'none' for browsers that predate it
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@functools.cache
def _asset(name: str) -> bytes:
    return resources.files("service.explain").joinpath("static", name).read_bytes()


def _serve(name: str) -> Response[bytes]:
    return Response(_asset(name), media_type=_TYPES[name], headers=_HEADERS)


@get("/explain", include_in_schema=False, sync_to_thread=False)
def explain_page() -> Response[bytes]:
    return _serve("explain.html")


@get("/explain/explain.js", include_in_schema=False, sync_to_thread=False)
def explain_js() -> Response[bytes]:
    return _serve("explain.js")


@get("/explain/explain.css", include_in_schema=False, sync_to_thread=False)
def explain_css() -> Response[bytes]:
    return _serve("explain.css")


explain_routes: Final[list[HTTPRouteHandler]] = [explain_page, explain_js, explain_css]

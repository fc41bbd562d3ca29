"""Structured logging (structlog, JSON lines in production, console when attached to a terminal)."""

from __future__ import annotations

import logging
import sys

import msgspec
import structlog

_encoder = msgspec.json.Encoder(enc_hook=repr)  # anything msgspec cannot encode is logged as its repr


def _dumps(event: object, **_: object) -> str:
    return _encoder.encode(event).decode()


def configure(level: str = "info", *, json: bool | None = None) -> None:
    json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer(serializer=_dumps) if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )

"""Structured logging (structlog, JSON lines in production, console when attached to a terminal)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

_encoder = msgspec.json.Encoder(enc_hook=repr)  # anything msgspec cannot encode is logged as its repr


def _dumps(event: object, **_: object) -> bytes:
    return _encoder.encode(event)


class _OneLine(logging.Filter):
    """A library's warning about an expected outage (asyncpg failing to restore its pool's floor while
    Postgres is down) as one line naming the error, not a traceback on every retry."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            record.msg, record.args = f"{record.getMessage()}: {type(error).__name__}: {error}", None
            record.exc_info, record.exc_text = None, None
        return True


_ONE_LINE = _OneLine()


def configure(level: str = "info", *, json: bool | None = None) -> None:
    """JSON lines are written as bytes, each line (newline included) in one write: with several
    worker processes sharing stderr, lines never interleave (structlog's PrintLogger writes the
    newline separately)."""
    json = (not sys.stderr.isatty()) if json is None else json
    renderer: structlog.typing.Processor
    factory: Callable[..., Any]
    if json:
        renderer = structlog.processors.JSONRenderer(serializer=_dumps)
        factory = structlog.BytesLoggerFactory(sys.stderr.buffer)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.WriteLoggerFactory(sys.stderr)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # a JSON line carries the traceback of log.exception(...) as "exception" (the console prints it)
            *([structlog.processors.format_exc_info] if json else []),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    pool_log = logging.getLogger("asyncpg.pool")
    if _ONE_LINE not in pool_log.filters:
        pool_log.addFilter(_ONE_LINE)

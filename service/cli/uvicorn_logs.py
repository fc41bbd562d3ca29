"""uvicorn's logging under ``pgcontext serve``: its info lines about its own start and stop dropped.

uvicorn's worker processes (``--workers N``) configure their logging from this before they first
answer the parent's health check (5 s, else the worker is killed and replaced): this module imports
nothing but the standard library and uvicorn, which the worker has loaded already.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import uvicorn.config

_UVICORN_CHATTER = ("Started server process", "Waiting for application startup", "Application startup complete",
                    "Uvicorn running on", "Shutting down", "Waiting for application shutdown",
                    "Application shutdown complete", "Finished server process", "Started parent process",
                    "Stopping parent process", "Waiting for child process", "Terminated child process",
                    "Received SIGINT", "Received SIGTERM")


class UvicornChatter(logging.Filter):
    """uvicorn's info lines about its own start and stop (process started, waiting for start-up, running
    on ..., shutting down): ``serve`` prints its one line instead. Its other lines pass (e.g. a worker
    that died and was replaced), and every warning and error."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.getMessage().startswith(_UVICORN_CHATTER)


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging configuration, its start and stop lines dropped unless ``level`` is debug
    (given to the worker processes too, which configure their logging from it)."""
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    if level.lower() != "debug":
        config["filters"] = {"chatter": {"()": f"{__name__}.{UvicornChatter.__name__}"}}
        config["loggers"]["uvicorn.error"]["filters"] = ["chatter"]
    return config

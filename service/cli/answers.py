"""What the command line says about the service's answers: an error with the reason the service gives
(``details.errors[].message``, ``details.field``), which answers ask to be sent again, and the progress
bar ``restore`` draws (the columns ``pgcontext import`` draws)."""

from __future__ import annotations

from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

RETRY_STATUSES = frozenset({429, 503})
"""Answers that ask the caller to come back later (``Retry-After``): the same request is sent again."""


def reason(response: httpx.Response) -> str:
    """The reason in an error answer's ``details`` (``field: message`` per validation error, or the
    field the error names); empty when there is none or the body is not the service's error shape."""
    try:
        error = response.json()["error"]
        details, message = error.get("details") or {}, str(error.get("message", ""))
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""
    if not isinstance(details, dict):
        return ""
    parts: list[str] = []
    errors = details.get("errors")
    if isinstance(errors, list):
        for error in errors:
            if isinstance(error, dict) and error.get("message"):
                where = error.get("key") or error.get("field")
                parts.append(f"{where}: {error['message']}" if where else str(error["message"]))
    if not parts and isinstance(details.get("field"), str) and details["field"] not in message:
        parts.append(f"field {details['field']}")
    return "; ".join(parts)


def describe(response: httpx.Response) -> str:
    """``400 validation_error: <message>: <reason>`` (the status, the service's code and message, the reason)."""
    try:
        error: Any = response.json()["error"]
        text = f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        text = response.text[:300] or response.reason_phrase
    why = reason(response)
    if why and why not in text:
        text = f"{text}: {why}"
    return f"{response.status_code} {text}"


def progress_bar(verb: str, unit: str, *, console: Console, disable: bool = False) -> Progress:
    """``<verb> ━━━━━━╺━━━━  52% 1,560/3,000 <unit> 0:00:04``: the bar ``pgcontext import`` draws."""
    return Progress(TextColumn(f"[bold]{verb}"), BarColumn(), TaskProgressColumn(),
                    TextColumn(f"{{task.completed:,.0f}}/{{task.total:,.0f}} {unit}"), TimeElapsedColumn(),
                    console=console, disable=disable, transient=False)

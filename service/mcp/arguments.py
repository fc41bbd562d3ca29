"""Tool arguments as a model reads their errors: each wrong argument named, with the rule it broke.

The SDK answers arguments that fail a tool's input schema with pydantic's validation text (every
error's type, input and documentation link) and silently drops arguments the tool does not take, so
a misspelt optional argument (``max_tokens`` for ``max_context_tokens``) did nothing and said
nothing. :class:`ToolServer` rejects an unknown argument, naming the ones the tool takes, and words a
schema failure as one short line per argument: ```limit` must be at most 50 (got 80)``.
"""

from __future__ import annotations

from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from service.mcp import stdio

MAX_ERRORS = 5
"""Errors listed in one answer (the rest are counted)."""

MAX_SHOWN = 40
"""Characters of a rejected value repeated in the error (a longer one is left out)."""

KINDS = {"string": "a string", "int": "a whole number", "float": "a number", "bool": "true or false",
         "list": "a list", "dict": "a JSON object", "model": "a JSON object", "datetime": "an ISO 8601 date-time "
         "with a timezone (e.g. 2024-05-01T09:30:00Z)", "uuid": "an id (a UUID)"}


def where(loc: tuple[int | str, ...]) -> str:
    """``("messages", 0, "role")`` as ``messages[0].role``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def rule(error: ErrorDetails) -> str:
    """What ``error``'s argument must be, in a few words."""
    kind, ctx = error["type"], error.get("ctx") or {}
    bounds = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a field here"
    if kind in bounds:
        words, key = bounds[kind]
        bound = ctx.get(key)
        return f"must be {words} {bound:g}" if isinstance(bound, int | float) else f"must be {words} {bound}"
    if kind in ("too_short", "too_long"):
        count = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        unit = "item" if isinstance(error.get("input"), list | dict) else "character"
        plural = "" if count == 1 else "s"
        return f"must have {'at least' if kind == 'too_short' else 'at most'} {count} {unit}{plural}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind == "timezone_aware":
        return "needs a timezone (e.g. 2024-05-01T09:30:00Z or +02:00)"
    if kind == "int_from_float":
        return "must be a whole number"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    for prefix, words in KINDS.items():
        if kind.startswith(f"{prefix}_"):
            return f"must be {words}"
    return str(error["msg"])


def shown(value: object) -> str:
    """`` (got 80)`` for a short scalar the model sent; nothing for a long or structured one."""
    if isinstance(value, dict | list) or value is None:
        return ""
    text = repr(value) if isinstance(value, str) else str(value)
    return f" (got {text})" if len(text) <= MAX_SHOWN else ""


def concise(exc: ValidationError) -> str:
    """A validation error as a line per argument (at most :data:`MAX_ERRORS`)."""
    errors = exc.errors(include_url=False)
    lines = []
    for error in errors[:MAX_ERRORS]:
        got = "" if error["type"] in ("missing", "value_error") else shown(error.get("input"))
        name = where(error["loc"])
        sep = ": " if error["type"] == "value_error" else " "
        lines.append(f"`{name}`{sep}{rule(error)}{got}" if name else f"{rule(error)}{got}")
    more = f"; and {len(errors) - MAX_ERRORS} more" if len(errors) > MAX_ERRORS else ""
    return "invalid arguments: " + "; ".join(lines) + more


class ToolServer(MCPServer[Any]):
    """The SDK's server, with argument errors worded for the model (see the module's docstring), a
    deadline on every tool call, and over stdio an answer to every line (:mod:`service.mcp.stdio`)."""

    deadline_s: float = 50.0
    """How long a tool call may take before it is answered as a tool error (``McpConfig.tool_deadline_s``)."""

    _arguments: dict[str, frozenset[str]] | None = None
    _read_only: frozenset[str] = frozenset()

    async def arguments_of(self, name: str) -> frozenset[str] | None:
        """The argument names tool ``name`` takes (None: no such tool)."""
        if self._arguments is None:
            tools = await self.list_tools()
            self._read_only = frozenset(t.name for t in tools if t.annotations and t.annotations.read_only_hint)
            self._arguments = {tool.name: frozenset(tool.input_schema.get("properties", {})) for tool in tools}
        return self._arguments.get(name)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
                        ) -> CallToolResult | InputRequiredResult:
        known = await self.arguments_of(name)
        unknown = sorted(set(arguments) - known) if known is not None else []
        if known is not None and unknown:
            takes = ", ".join(f"`{a}`" for a in sorted(known)) or "no arguments"
            names = ", ".join(f"`{a}`" for a in unknown)
            raise ToolError(f"Error executing tool {name}: invalid arguments: {names} "
                            f"{'is not an argument' if len(unknown) == 1 else 'are not arguments'} "
                            f"of {name} (it takes {takes})")
        with anyio.move_on_after(self.deadline_s):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                    raise
                raise ToolError(f"Error executing tool {name}: {concise(cause)}") from cause
        # A service that takes connections but never answers held a call for 4 tries of 30 s, past the
        # 60 s after which MCP clients on the TypeScript SDK (Claude Desktop's) stop waiting for it.
        written = "" if name in self._read_only else (
            "; what it was writing may have been written all the same: check with `recall` before repeating it")
        raise ToolError(f"Error executing tool {name}: pgcontext did not answer within {self.deadline_s:g} s"
                        f"{written}")

    async def run_stdio_async(self) -> None:
        await stdio.serve(self._lowlevel_server)  # the SDK's own run_stdio_async, over stdio.Answering

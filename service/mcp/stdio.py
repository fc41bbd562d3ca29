"""``pgcontext mcp`` over stdio: the SDK's transport, with every line answered.

The SDK drops a line that is not a JSON-RPC message (logged at debug level, nothing written back), so a
client that sent a malformed request waited for its answer forever. JSON-RPC 2.0 answers one: a line
that is not JSON with a parse error (-32700), JSON that is not a message with an invalid request
(-32600), under the request's id when it has one, so the client's waiting call fails at once. A line
the SDK's decoder refuses but that has an id all the same (a lone surrogate escape) is answered under it.
"""

from __future__ import annotations

import contextvars
import json
from types import TracebackType
from typing import Any

import anyio
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp.types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError
from pydantic import ValidationError


def request_id(message: object) -> str | int | None:
    """The id of a request, when ``message`` is one that has an id that can be written back."""
    ident = message.get("id") if isinstance(message, dict) else None
    if isinstance(ident, str):
        try:
            ident.encode()
        except UnicodeEncodeError:  # a lone surrogate: no answer could be written under it
            return None
        return ident
    return ident if isinstance(ident, int) and not isinstance(ident, bool) else None


def unreadable(line: object) -> JSONRPCError:
    """The answer to a line the SDK's JSON decoder refused. Python's json module reads some of them (a
    string with a lone surrogate escape such as ``"\\ud83d"``, which JSON's grammar allows though it is
    no Unicode character): those are answered under their id, so their caller is not left waiting."""
    try:
        message = json.loads(line) if isinstance(line, str) else None
        json.dumps(message, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return JSONRPCError(jsonrpc="2.0", id=request_id(message), error=ErrorData(
            code=INVALID_REQUEST, message="Invalid Request: a string holds a lone surrogate escape (such as "
                                          "\\ud83d without its pair), which is not a Unicode character"))
    except (ValueError, RecursionError):
        message = None
    return JSONRPCError(jsonrpc="2.0", id=request_id(message), error=ErrorData(code=PARSE_ERROR,
                                                                               message="Parse error: not JSON"))


def rejection(exc: Exception) -> JSONRPCError:
    """The JSON-RPC error answering a line the transport could not read as a message."""
    if not isinstance(exc, ValidationError):
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=PARSE_ERROR, message="Parse error"))
    errors = exc.errors(include_url=False)
    if invalid := [e for e in errors if e["type"] == "json_invalid"]:
        return unreadable(invalid[0].get("input"))
    ident: Any = None
    for error in errors:  # the request's id, when the JSON has one, so its caller gets the answer
        if (ident := request_id(error.get("input"))) is not None:
            break
    return JSONRPCError(jsonrpc="2.0", id=ident, error=ErrorData(
        code=INVALID_REQUEST, message="Invalid Request: not a JSON-RPC 2.0 request, notification or response"))


class Answering:
    """The stdio read stream, answering (on the write stream) each line that is not a message instead of
    passing the error on to be dropped; messages go through unchanged, with their sender's context."""

    def __init__(self, read: Any, write: Any) -> None:
        self.read = read
        self.write = write

    @property
    def last_context(self) -> contextvars.Context | None:
        return getattr(self.read, "last_context", None)

    async def receive(self) -> SessionMessage:
        while True:
            item = await self.read.receive()
            if not isinstance(item, Exception):
                return item  # type: ignore[no-any-return]
            await self.write.send(SessionMessage(rejection(item)))

    def __aiter__(self) -> Answering:
        return self

    async def __anext__(self) -> SessionMessage:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.read.aclose()

    async def __aenter__(self) -> Answering:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


async def serve(lowlevel: Any) -> None:
    """What ``MCPServer.run_stdio_async`` does, over :class:`Answering`."""
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(Answering(read_stream, write_stream), write_stream,
                           lowlevel.create_initialization_options())

"""The MCP server's copies of the service's rules (``service.mcp`` reaches the service only over HTTP, so
it may not import them) and its answers to stdio lines that are not messages."""

from __future__ import annotations

import json

import mcp_types
import pytest
from pydantic import ValidationError

from service.assembly.feedback import MAX_FEEDBACK_ITEMS
from service.mcp.stdio import rejection
from service.mcp.tools import CONVERSATION_ID_PATTERN, MAX_FEEDBACK_IDS
from service.retrieval.types import CONVERSATION_ID_MAX_LENGTH
from service.retrieval.types import CONVERSATION_ID_PATTERN as SERVICE_CONVERSATION_ID_PATTERN


def test_the_service_rules_are_the_services() -> None:
    assert CONVERSATION_ID_PATTERN == SERVICE_CONVERSATION_ID_PATTERN and CONVERSATION_ID_MAX_LENGTH == 200
    assert MAX_FEEDBACK_IDS == MAX_FEEDBACK_ITEMS


SURROGATE = ("Invalid Request: a string holds a lone surrogate escape (such as \\ud83d without its pair), which is "
             "not a Unicode character")


@pytest.mark.parametrize(("line", "answer"), [
    ('{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"arguments":{"text":"I love \\ud83c"}}}',
     {"id": 2, "error": {"code": -32600, "message": SURROGATE}}),
    ('{"jsonrpc":"2.0","id":"r-9","method":"tools/call","params":{"text":"' + "x" * 50_000 + '\\ude00"}}',
     {"id": "r-9", "error": {"code": -32600, "message": SURROGATE}}),
    # no id to answer under: one that could not be written back, a notification
    ('{"jsonrpc":"2.0","id":"\\ud83c","method":"ping"}', {"id": None, "error": {"code": -32600, "message": SURROGATE}}),
    ('{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\\udc00"}}',
     {"id": None, "error": {"code": -32600, "message": SURROGATE}}),
    ('{"jsonrpc":"2.0","id":4,"method":', {"id": None, "error": {"code": -32700, "message": "Parse error: not JSON"}}),
    ("[" * 100_000, {"id": None, "error": {"code": -32700, "message": "Parse error: not JSON"}}),
    ('{"jsonrpc":"2.0","id":7,"method":5}', {"id": 7, "error": {
        "code": -32600, "message": "Invalid Request: not a JSON-RPC 2.0 request, notification or response"}}),
    ('{"jsonrpc":"2.0","id":true,"method":5}', {"id": None, "error": {
        "code": -32600, "message": "Invalid Request: not a JSON-RPC 2.0 request, notification or response"}}),
])
def test_a_line_that_is_not_a_message_is_answered_under_its_id(line: str, answer: dict[str, object]) -> None:
    with pytest.raises(ValidationError) as refused:
        mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)  # as the SDK's stdio reads a line
    written = rejection(refused.value).model_dump_json(by_alias=True, exclude_unset=True)
    assert json.loads(written) == {"jsonrpc": "2.0", **answer}

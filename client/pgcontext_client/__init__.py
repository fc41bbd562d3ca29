"""Typed Python client for pgcontext: ``Client`` and ``AsyncClient``, request/response Structs, typed errors."""

from pgcontext_client import types
from pgcontext_client._http import Call, RetryPolicy
from pgcontext_client.client import AsyncClient, Client, __version__
from pgcontext_client.errors import (
    BadRequest,
    Conflict,
    DeadlineExceeded,
    Forbidden,
    IncompleteExport,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    PgcontextError,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    TransportError,
    Unauthorized,
    Unprocessable,
    ValidationError,
)
from pgcontext_client.types import (
    AssembledContext,
    AssembleFilters,
    Directive,
    FeedbackItem,
    FileIn,
    Memory,
    MemoryIn,
    Message,
    MessageIn,
    RetrievalOptions,
    SearchFilters,
    SearchTuning,
)

__all__ = [
    "AssembleFilters", "AssembledContext", "AsyncClient", "BadRequest", "Call", "Client", "Conflict",
    "DeadlineExceeded", "Directive", "FeedbackItem", "FileIn", "Forbidden", "IncompleteExport", "Memory",
    "MemoryIn", "Message", "MessageIn", "NotFound", "Overloaded",
    "PayloadTooLarge", "PgcontextError", "RateLimited", "RetrievalOptions", "RetryPolicy", "SearchFilters",
    "SearchTuning", "ServerError", "ServiceUnavailable", "TransportError", "Unauthorized", "Unprocessable",
    "ValidationError", "__version__", "types",
]

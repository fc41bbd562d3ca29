"""One retrieval step under its deadline: any failure becomes :class:`BranchFailed`, a fallback decision."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from service.errors import ServiceUnavailable, forget_tracebacks
from service.retrieval.types import RetrievalReason

log = structlog.get_logger(__name__)
T = TypeVar("T")


class BranchFailed(Exception):
    """A branch (embedding, lexical, semantic) failed or missed its deadline; the message says which."""

    def __init__(self, message: str, *, timed_out: bool = False, embedding: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out
        """It ran out of time (its own deadline, or the search's budget), rather than failing."""
        self.embedding = embedding
        """The query's embedding failed (rather than a database query)."""

    @property
    def reason(self) -> RetrievalReason:
        """The response's ``retrieval.reason`` for a fallback caused by this failure."""
        if self.embedding:
            return "embedder_timeout" if self.timed_out else "embedder_error"
        return "branch_timeout" if self.timed_out else "branch_error"


async def guard(what: str, timeout_ms: int, work: Callable[[], Awaitable[T]], *, grace_ms: int = 0) -> T:
    """Run one step under its deadline (+ ``grace_ms``); any failure becomes BranchFailed (a fallback decision)."""
    try:
        async with asyncio.timeout((timeout_ms + grace_ms) / 1000):
            return await work()
    except TimeoutError as exc:
        forget_tracebacks(exc)  # the cause stays named; its frames (and their rows) go now
        raise BranchFailed(f"{what} timed out after {timeout_ms} ms", timed_out=True,
                           embedding=what == "embedding") from exc
    except BranchFailed as exc:
        forget_tracebacks(exc.__cause__)
        raise
    except Exception as exc:  # every failure of a branch is a reason to fall back, not to fail
        log.warning("retrieval_branch_failed", branch=what, error=repr(exc)[:300])
        forget_tracebacks(exc)
        raise BranchFailed(f"{what} failed: {type(exc).__name__}: {str(exc)[:200]}",
                           embedding=what == "embedding") from exc


def unavailable(lexical: BranchFailed, semantic: BranchFailed) -> ServiceUnavailable:
    """503; ``details.timed_out`` is true when both branches ran out of time rather than failed."""
    forget_tracebacks(lexical)  # their frames hold them (the callers' locals): no cycles
    forget_tracebacks(semantic)
    return ServiceUnavailable("search is unavailable: both the lexical and the semantic branch failed",
                              code="search_unavailable",
                              details={"lexical": str(lexical), "semantic": str(semantic),
                                       "timed_out": lexical.timed_out and semantic.timed_out})

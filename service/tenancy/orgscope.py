"""The org the current work is for, and caches of text whose entries are that org's alone.

A cache keyed by text alone is shared between orgs: a hit is faster than a miss, and assembly
responses report their stage times to the microsecond (``metrics.budget_calculation_ms``,
``ranking_ms``, ...), so one org could time whether a text it sends or stores was recently seen in
another org's request. The in-process caches of pure functions of text (token counts, content
terms, similarity features, a query's phrases) therefore key their entries by org as well, like the
query-embedding cache (``service.retrieval.query_cache``): another org's entry is never a hit. Their
bounds stay one per cache for all orgs, so memory is fixed however many orgs there are; an org
flooding distinct texts can only push entries out, which everyone then recomputes.

The org is the running task's: :func:`org_scope` sets it for a block (context assembly, a document
import), tasks started inside inherit it, and so does ``asyncio.to_thread``; a plain
``run_in_executor`` does not: use :func:`in_thread`. Work outside any org's scope (start-up, offline
tools) uses scope 0, shared by all such work.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, cast
from uuid import UUID

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_SCOPE: ContextVar[int] = ContextVar("pgcontext_org_scope", default=0)


@contextlib.contextmanager
def org_scope(org_id: UUID) -> Iterator[None]:
    """Within the block, :func:`current_scope` (and every :class:`OrgMemo`) is ``org_id``'s."""
    token = _SCOPE.set(org_id.int)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def in_thread(executor: Executor, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``loop.run_in_executor(executor, fn, *args)`` in the caller's org scope (a plain
    ``run_in_executor`` runs ``fn`` outside it, where the caches of text are shared)."""
    return asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, fn, *args)


def current_scope() -> int:
    """The org of the running task as an int (its UUID's 128 bits); 0 outside any org's work."""
    return _SCOPE.get()


class OrgMemo(Protocol[T_co]):
    """``fn(text)`` behind an LRU whose entries are keyed by (the current org, text): :func:`org_memo`."""

    def __call__(self, text: str, /) -> T_co: ...

    def cache_info(self) -> functools._CacheInfo: ...


def org_memo(maxsize: int) -> Callable[[Callable[[str], T]], OrgMemo[T]]:
    """Decorator: ``fn(text)`` cached per org, at most ``maxsize`` entries for all orgs together.

    A hit costs ~10-60 ns more than a plain ``functools.lru_cache`` hit (a class with ``__call__``:
    ~200 ns more; an assembly makes hundreds of these calls)."""

    def wrap(fn: Callable[[str], T]) -> OrgMemo[T]:
        @functools.lru_cache(maxsize=maxsize)
        def by_org(scope: int, text: str) -> T:  # ``scope`` is part of the key only
            return fn(text)

        def call(text: str, _scope: Callable[[], int] = _SCOPE.get,
                 _cached: Callable[[int, str], T] = by_org) -> T:
            return _cached(_scope(), text)

        functools.update_wrapper(call, fn)
        memo = cast(Any, call)
        memo.cache_info = by_org.cache_info
        return cast(OrgMemo[T], memo)

    return wrap

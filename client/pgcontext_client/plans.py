"""Code written once for both clients: a plan is a generator that yields the calls it needs (built with
``pgcontext_client.endpoints``) and is sent each answer; ``run`` drives it on a ``Client``, ``arun`` on an
``AsyncClient``. An error answer is raised inside the plan, where it may be handled. The framework
adapters use it so their sync and async methods share one body."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pgcontext_client import endpoints
from pgcontext_client._http import Call
from pgcontext_client.errors import PayloadTooLarge, PgcontextError
from pgcontext_client.types import MessageIn

if TYPE_CHECKING:
    from pgcontext_client.client import AsyncClient, Client

T = TypeVar("T")
Plan = Generator[Call[Any], Any, T]
"""Yields calls, is sent each call's answer, returns the result."""


def run(client: Client, plan: Plan[T]) -> T:
    try:
        call = next(plan)
        while True:
            try:
                answer = client.execute(call)
            except PgcontextError as exc:  # the plan may handle it (e.g. NotFound)
                call = plan.throw(exc)
            else:
                call = plan.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def arun(client: AsyncClient, plan: Plan[T]) -> T:
    try:
        call = next(plan)
        while True:
            try:
                answer = await client.execute(call)
            except PgcontextError as exc:
                call = plan.throw(exc)
            else:
                call = plan.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def append_all(conversation_id: str, messages: Sequence[MessageIn], *, agent_id: str | None = None) -> Plan[None]:
    """Append ``messages`` in order: in one call, or in several when they are more than the service takes at
    once (its 413 ``batch_too_large`` names how many). ``agent_id`` None: whoever owns the conversation (a
    new one: the whole org)."""
    agent = endpoints.UNSET if agent_id is None else agent_id
    size, start = len(messages), 0
    while start < len(messages):
        try:
            yield endpoints.append_messages(conversation_id, messages[start:start + size], agent_id=agent)
        except PayloadTooLarge as exc:
            most = exc.details.get("limit") if exc.code == "batch_too_large" else None
            if not isinstance(most, int) or not 0 < most < size:
                raise
            size = most
        else:
            start += size

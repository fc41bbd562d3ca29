"""Code written once for both clients: a plan is a generator that yields the calls it needs (built with
``pgcontext_client.endpoints``) and is sent each answer; ``run`` drives it on a ``Client``, ``arun`` on an
``AsyncClient``. An error answer is raised inside the plan, where it may be handled. The framework
adapters use it so their sync and async methods share one body."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, TypeVar

from pgcontext_client._http import Call
from pgcontext_client.errors import PgcontextError

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

"""Org-scoped caches of text: another org's entry is never a hit, whatever path the work takes."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from uuid import uuid4

from service.assembly.terms import content_term_count
from service.tenancy.orgscope import OrgMemo, current_scope, in_thread, org_memo, org_scope


def counting_memo() -> tuple[OrgMemo[int], list[str]]:
    computed: list[str] = []

    @org_memo(16)
    def length(text: str) -> int:
        computed.append(text)
        return len(text)

    return length, computed


def test_entries_are_kept_per_org() -> None:
    length, computed = counting_memo()
    org_a, org_b = uuid4(), uuid4()
    with org_scope(org_a):
        assert length("shared text") == length("shared text") == 11  # the second call is org A's hit
    with org_scope(org_b):
        assert length("shared text") == 11  # org B never hits org A's entry
    assert length("shared text") == 11  # nor does work outside any org's scope
    assert computed == ["shared text"] * 3
    with org_scope(org_a):
        length("shared text")
    assert computed == ["shared text"] * 3  # org A's entry is still there: one bound, three entries
    assert length.cache_info().currsize == 3 and length.cache_info().hits == 2


def test_scopes_nest_and_end() -> None:
    org_a, org_b = uuid4(), uuid4()
    assert current_scope() == 0
    with org_scope(org_a):
        with org_scope(org_b):
            assert current_scope() == org_b.int
        assert current_scope() == org_a.int
    assert current_scope() == 0


async def scope_in_a_task() -> int:
    await asyncio.sleep(0)
    return current_scope()


async def test_tasks_and_threads_started_inside_work_in_the_scope() -> None:
    org = uuid4()
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1) as pool:
        with org_scope(org):
            in_task = await asyncio.create_task(scope_in_a_task())
            in_to_thread = await asyncio.to_thread(current_scope)
            in_copied = await in_thread(pool, current_scope)
            in_plain = await loop.run_in_executor(pool, current_scope)  # plain executors lose it: see orgscope
        assert (in_task, in_to_thread, in_copied, in_plain) == (org.int, org.int, org.int, 0)


def test_the_assembly_term_caches_are_org_scoped() -> None:
    text = f"distinct content words of one org {uuid4()}"
    org_a, org_b = uuid4(), uuid4()
    with org_scope(org_a):
        first = content_term_count(text)
        hits = content_term_count.cache_info().hits
        assert content_term_count(text) == first and content_term_count.cache_info().hits == hits + 1
    with org_scope(org_b):
        misses = content_term_count.cache_info().misses
        assert content_term_count(text) == first and content_term_count.cache_info().misses == misses + 1

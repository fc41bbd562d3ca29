"""``pgcontext_langgraph.PgcontextStore`` against a live service: LangGraph's store interface (get, put, delete,
search with query/filter/offset, list_namespaces with prefix/suffix/wildcards/depth, TTL, batches), sync and
async, racing writers of one item, tenant isolation, a StateGraph that stores and recalls through it, and the
README example."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypedDict
from uuid import uuid4

import pytest
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from pgcontext_client import Client
from pgcontext_langgraph import PgcontextStore

from tests.conftest import Tenant
from tests.integration.adapters import ROOT, run_readme

pytestmark = pytest.mark.integration


@pytest.fixture
def store(live_url: str, tenant: Tenant) -> Iterator[PgcontextStore]:
    with PgcontextStore(live_url, tenant.key, index={"fields": ["text"]}) as s:
        yield s


def agent() -> str:
    return f"lg-{uuid4().hex[:8]}"


def test_put_get_update_delete(store: PgcontextStore) -> None:
    ns = (agent(), "user-1", "prefs")
    assert store.get(ns, "drink") is None
    store.put(ns, "drink", {"text": "Prefers green tea.", "n": 1})
    first = store.get(ns, "drink")
    assert first is not None and first.value == {"text": "Prefers green tea.", "n": 1}
    assert first.namespace == ns and first.key == "drink" and first.created_at == first.updated_at
    store.put(ns, "drink", {"text": "Prefers black coffee.", "n": 2})
    second = store.get(ns, "drink")
    assert second is not None and second.value["n"] == 2
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    store.put(ns, "food", {"text": "Prefers green tea."})  # the same text under another key: its own item
    assert store.get(ns, "food") is not None and store.get(ns, "drink") is not None
    assert store.get(ns[:2], "drink") is None and store.get((*ns, "x"), "drink") is None  # exact namespace only
    store.delete(ns, "drink")
    assert store.get(ns, "drink") is None and store.get(ns, "food") is not None
    store.batch([PutOp(ns, "food", None)])  # a put of None deletes too
    assert store.get(ns, "food") is None
    store.delete(ns, "never-there")


def test_any_key_and_value_are_stored_a_blank_key_and_no_indexed_field_included(store: PgcontextStore) -> None:
    """As LangGraph's own stores do: a memory needs some text, and with neither the indexed field nor a
    key to read it reads as the value's JSON (it was refused: "text must not be empty")."""
    ns = (agent(), "odd")
    for key, value in (("", {"other": 1}), ("  ", {"text": ""}), (" ", {}), ("named", {"other": 2})):
        store.put(ns, key, value)
        found = store.get(ns, key)
        assert found is not None and (found.key, found.value) == (key, value)
    assert {(i.key, i.value["other"]) for i in store.search(ns, query="other") if "other" in i.value} == \
        {("", 1), ("named", 2)}


def test_search_by_query_filter_prefix_and_page(store: PgcontextStore) -> None:
    root = agent()
    items = {
        ("alice", "coffee"): {"text": "Alice drinks dark roast coffee every morning.", "year": 2021, "tag": "drink"},
        ("alice", "city"): {"text": "Alice moved to Lisbon last spring.", "year": 2023, "tag": "home"},
        ("alice", "pet"): {"text": "Alice has a grey cat called Miso.", "year": 2019, "tag": "home"},
        ("bob", "coffee"): {"text": "Bob only drinks decaf coffee.", "year": 2022, "tag": "drink"},
    }
    for (user, key), value in items.items():
        store.put((root, user), key, value)
    store.put((root, "alice"), "hidden", {"text": "Alice's coffee grinder is hidden."}, index=False)

    hits = store.search((root, "alice"), query="what coffee does she drink?", limit=3)
    assert hits[0].key == "coffee" and hits[0].namespace == (root, "alice")
    assert all(h.namespace == (root, "alice") for h in hits) and "hidden" not in {h.key for h in hits}
    assert all(h.score is not None and 0.0 <= h.score <= 1.0 for h in hits)
    assert hits[0].score == max(h.score or 0.0 for h in hits) and (hits[0].score or 0) > 0.3
    everyone = store.search((root,), query="coffee", limit=10)
    assert {(h.namespace[1], h.key) for h in everyone} >= {("alice", "coffee"), ("bob", "coffee")}

    assert {h.key for h in store.search((root, "alice"), filter={"tag": "home"})} == {"city", "pet"}
    assert {h.key for h in store.search((root,), filter={"year": {"$gte": 2022}})} == {"city", "coffee"}
    assert {(h.namespace[1], h.key) for h in store.search((root,), filter={"tag": "drink", "year": {"$lt": 2022}})
            } == {("alice", "coffee")}
    assert {h.key for h in store.search((root, "alice"), filter={"tag": {"$ne": "home"}})} == {"coffee", "hidden"}
    ranked = store.search((root, "alice"), query="Lisbon cat coffee", filter={"tag": "home"}, limit=5)
    assert {h.key for h in ranked} == {"city", "pet"}
    listed = store.search((root, "alice"))  # no query: every item, newest first, no score
    assert [h.key for h in listed] == ["hidden", "pet", "city", "coffee"] and {h.score for h in listed} == {None}
    page = store.search((root, "alice"), limit=2, offset=1)
    assert [h.key for h in page] == ["pet", "city"]
    assert store.search((root, "carol"), query="coffee") == []
    with pytest.raises(ValueError, match="unsupported filter operator"):
        store.search((root,), filter={"year": {"$in": [2021]}})


def test_list_namespaces(store: PgcontextStore) -> None:
    root = agent()
    for ns in [(root, "a", "x"), (root, "a", "y", "v1"), (root, "b", "y", "v1"), (root, "b", "z"), (root, "c")]:
        store.put(ns, "k", {"text": f"item in {'/'.join(ns)}"})
    assert store.list_namespaces(prefix=(root,)) == [
        (root, "a", "x"), (root, "a", "y", "v1"), (root, "b", "y", "v1"), (root, "b", "z"), (root, "c")]
    assert store.list_namespaces(prefix=(root, "a")) == [(root, "a", "x"), (root, "a", "y", "v1")]
    assert store.list_namespaces(prefix=(root, "*", "y")) == [(root, "a", "y", "v1"), (root, "b", "y", "v1")]
    assert store.list_namespaces(prefix=(root,), suffix=("v1",)) == [(root, "a", "y", "v1"), (root, "b", "y", "v1")]
    assert store.list_namespaces(prefix=(root,), suffix=("*", "z")) == [(root, "b", "z")]
    assert store.list_namespaces(prefix=(root,), max_depth=2) == [(root, "a"), (root, "b"), (root, "c")]
    assert store.list_namespaces(prefix=(root,), limit=2, offset=1) == [(root, "a", "y", "v1"), (root, "b", "y", "v1")]
    assert (root, "c") in store.list_namespaces()  # every agent's
    assert store.list_namespaces(prefix=("no such agent",)) == []


def test_ttl_is_the_memorys_expiry_and_reads_restart_it(store: PgcontextStore, live_url: str,
                                                        tenant: Tenant) -> None:
    ns = (agent(), "session")
    store.put(ns, "short", {"text": "A note that should not last."}, ttl=0.02)  # 1.2 seconds
    store.put(ns, "day", {"text": "A note for today."}, ttl=24 * 60)
    with Client(live_url, tenant.key) as pg:
        expires = {m.metadata["langgraph"]["key"]: m.expires_at for m in pg.list_memories(agent_id=ns[0]).items}
    day = expires["day"]
    assert day is not None and abs(day - (datetime.now(UTC) + timedelta(days=1))) < timedelta(minutes=1)
    before = expires["short"]
    time.sleep(0.3)
    assert store.get(ns, "short") is not None  # restarts the TTL ...
    with Client(live_url, tenant.key) as pg:
        after = {m.metadata["langgraph"]["key"]: m.expires_at for m in pg.list_memories(agent_id=ns[0]).items}
    assert before is not None and after["short"] is not None and after["short"] > before
    assert store.get(ns, "day", refresh_ttl=False) is not None
    time.sleep(1.5)
    assert store.get(ns, "short") is None and [h.key for h in store.search(ns)] == ["day"]  # ... until it expires
    assert store.supports_ttl


def test_batch_runs_in_order_and_returns_one_result_per_op(store: PgcontextStore) -> None:
    ns = (agent(), "batch")
    results = store.batch([
        PutOp(ns, "a", {"text": "first"}), GetOp(ns, "a"), PutOp(ns, "a", {"text": "second"}), GetOp(ns, "a"),
        SearchOp(ns), ListNamespacesOp(), PutOp(ns, "a", None), GetOp(ns, "a")])
    assert results[0] is None and results[1].value == {"text": "first"}  # type: ignore[union-attr]
    assert results[3].value == {"text": "second"}  # type: ignore[union-attr]
    assert [i.key for i in results[4]] == ["a"] and ns in results[5]  # type: ignore[union-attr,operator]
    assert results[7] is None


async def test_the_async_api(live_url: str, tenant: Tenant) -> None:
    ns = (agent(), "async")
    async with PgcontextStore(live_url, tenant.key) as store:  # no index fields: the value's JSON is searched
        await store.aput(ns, "m1", {"note": "The quarterly report is due on Friday.", "prio": 2})
        await store.aput(ns, "m2", {"note": "The team lunch is on Thursday.", "prio": 1})
        got = await store.aget(ns, "m1")
        assert got is not None and got.value["prio"] == 2
        hits = await store.asearch(ns, query="when is the report due?", limit=2)
        assert hits[0].key == "m1" and hits[0].score is not None
        assert [h.key for h in await store.asearch(ns, filter={"prio": {"$gt": 1}})] == ["m1"]
        assert await store.alist_namespaces(prefix=(ns[0],)) == [ns]
        await store.adelete(ns, "m1")
        assert await store.aget(ns, "m1") is None
        assert [i.key for i in (await store.abatch([SearchOp(ns)]))[0]] == ["m2"]  # type: ignore[union-attr]


def test_namespaces_that_name_no_agent_are_refused(store: PgcontextStore) -> None:
    with pytest.raises(InvalidNamespaceError, match="agent id"):
        store.put(("not an agent id",), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"text": "x"})  # LangGraph's own rule: no periods in labels
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("ok", ""), "k")])


def test_another_org_sees_nothing(live_url: str, tenant: Tenant, other_tenant: Tenant) -> None:
    ns = (agent(), "private")
    with PgcontextStore(live_url, tenant.key) as mine, PgcontextStore(live_url, other_tenant.key) as theirs:
        mine.put(ns, "secret", {"text": "The vault code is 1234."})
        assert theirs.get(ns, "secret") is None
        assert theirs.search(ns, query="vault code") == [] and theirs.search(ns) == []
        assert theirs.list_namespaces(prefix=(ns[0],)) == []
        theirs.delete(ns, "secret")
        assert mine.get(ns, "secret") is not None


class Turn(TypedDict):
    user: str
    message: str
    reply: str


def test_a_state_graph_stores_and_recalls_through_the_store(store: PgcontextStore) -> None:
    root = agent()

    def remember_or_recall(state: Turn, *, store: BaseStore) -> dict[str, str]:
        ns = (root, state["user"], "facts")
        if state["message"].startswith("remember: "):
            fact = state["message"].removeprefix("remember: ")
            store.put(ns, f"fact-{len(store.search(ns, limit=100))}", {"text": fact})
            return {"reply": "noted"}
        hits = store.search(ns, query=state["message"], limit=1)
        return {"reply": hits[0].value["text"] if hits else "nothing remembered"}

    graph = StateGraph(Turn).add_node(remember_or_recall).add_edge(START, "remember_or_recall").compile(store=store)
    for fact in ("The user's sister is called Ines.", "The user is training for a marathon in May."):
        assert graph.invoke({"user": "u1", "message": f"remember: {fact}", "reply": ""})["reply"] == "noted"
    recalled = graph.invoke({"user": "u1", "message": "when is the marathon?", "reply": ""})["reply"]
    assert recalled == "The user is training for a marathon in May."
    assert graph.invoke({"user": "u2", "message": "when is the marathon?", "reply": ""})["reply"] == \
        "nothing remembered"  # another user's namespace


def test_the_readme_example_runs(live_url: str, tenant: Tenant, tmp_path: Path) -> None:
    out = run_readme(ROOT / "clients" / "langgraph" / "README.md", live_url, tenant.key, tmp_path)
    lines = out.splitlines()
    assert lines[0].startswith("coffee The user drinks dark roast coffee. ")
    assert lines[1] == "['city']" and lines[2] == "[('assistant', 'user-42', 'memories')]"
    assert lines[3] == "The user lives in Lisbon."


def test_puts_racing_to_create_one_item_leave_one(live_url: str, tenant: Tenant) -> None:
    ns = (agent(), "race")
    stores = [PgcontextStore(live_url, tenant.key, index={"fields": ["text"]}) for _ in range(4)]
    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            list(pool.map(lambda i: stores[i].put(ns, "k", {"text": f"value {i}"}), range(len(stores))))
        items = stores[0].search(ns)
        assert [i.key for i in items] == ["k"] and stores[0].get(ns, "k") == items[0]
        stores[0].delete(ns, "k")
        assert stores[0].get(ns, "k") is None and stores[0].search(ns) == []  # nothing left to resurface
    finally:
        for s in stores:
            s.close()


async def test_async_puts_racing_to_create_one_item_leave_one(live_url: str, tenant: Tenant) -> None:
    ns = (agent(), "race")
    async with PgcontextStore(live_url, tenant.key) as store:
        await asyncio.gather(*(store.aput(ns, "k", {"n": i}) for i in range(4)))
        assert [i.key for i in await store.asearch(ns)] == ["k"]
        await asyncio.gather(store.adelete(ns, "k"), store.adelete(ns, "k"))  # racing deletes: no error
        assert await store.aget(ns, "k") is None


def test_a_query_with_a_filter_the_service_cannot_run_still_fills_the_page(store: PgcontextStore) -> None:
    ns = (agent(), "notes")
    for i in range(30):
        store.put(ns, f"k{i}", {"text": f"A note about apples, number {i}.", "weight": 0.5 if i % 10 == 0 else 1.5,
                                "tags": ["even"] if i % 2 == 0 else ["odd"]})
    assert {h.key for h in store.search(ns, query="apples", filter={"weight": 0.5}, limit=5)} == {"k0", "k10", "k20"}
    assert len(store.search(ns, query="apples", filter={"tags": ["odd"]}, limit=5)) == 5
    assert len(store.search(ns, query="apples", limit=500)) == 30  # more than one search returns: the best 200

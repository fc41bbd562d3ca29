"""Sources the caller chooses, on real Postgres and Redis: ``filters.sources`` (memories, messages,
documents), ``filters.collections`` and ``filters.conversations`` in search (every strategy and the
modes search) and in assembly, where org-wide documents enter a context only from the collections the
request names.
"""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.test_assembly import GENEROUS, assembly_client

AGENT = "barista"
HANDBOOK = "# Grinding\n\nGrind the espresso beans fine, just before brewing.\n"
CODE = "def grind(self, size):\n    return size  # grind the espresso beans to this size\n"
OWN = "# Barista notes\n\nThis barista grinds espresso beans coarser on rainy days.\n"


async def seed(client: AsyncTestClient[Any], tenant: Tenant) -> dict[str, str]:
    """Two org-wide collections, one of the agent's own, a fact and a conversation turn; their ids."""
    h = tenant.headers
    for collection, path, content, agent in (("handbook", "grinding.md", HANDBOOK, None),
                                             ("code", "grinder.py", CODE, None),
                                             ("notes", "barista.md", OWN, AGENT)):
        body: dict[str, Any] = {"collection": collection, "files": [{"path": path, "content": content}]}
        if agent is not None:
            body["agent_id"] = agent
        r = await client.post("/v1/documents", json=body, headers=h)
        assert r.status_code == 200, r.text
    r = await client.post("/v1/memories", headers=h, json={
        "text": "The guest likes espresso beans ground fine.", "agent_id": AGENT, "kind": "fact"})
    assert r.status_code == 201, r.text
    fact = r.json()["ids"][0]
    r = await client.post("/v1/conversations/espresso/messages", headers=h, json={"agent_id": AGENT, "messages": [
        {"role": "user", "content": "could you grind the espresso beans a little finer?"}]})
    assert r.status_code == 201, r.text
    return {"fact": fact, "message": r.json()["messages"][0]["id"]}


async def found(client: AsyncTestClient[Any], tenant: Tenant, **body: Any) -> list[dict[str, Any]]:
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "grind espresso beans", "limit": 50, **body})
    assert r.status_code == 200, r.text
    results: list[dict[str, Any]] = r.json()["results"]
    return results


def collections_of(results: list[dict[str, Any]]) -> set[str]:
    return {r["metadata"]["collection"] for r in results if r["kind"] == "document_chunk"}


async def test_search_filters_by_source_and_collection_in_every_strategy(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)
        everything = await found(client, tenant)
        assert collections_of(everything) == {"handbook", "code", "notes"}  # a search sees every collection
        assert {ids["fact"], ids["message"]} <= {r["id"] for r in everything}
        for strategy in ("lexical", "semantic", "hybrid", "lexical_first"):
            only = await found(client, tenant, strategy=strategy, filters={"collections": ["handbook", "notes"]})
            assert collections_of(only) == {"handbook", "notes"}, (strategy, only)
            assert ids["fact"] in {r["id"] for r in only}  # other sources are not affected
            docs = await found(client, tenant, strategy=strategy, filters={"sources": ["documents"]})
            assert docs and {r["kind"] for r in docs} == {"document_chunk"}, strategy
            turns = await found(client, tenant, strategy=strategy, filters={"sources": ["messages"]})
            assert [r["id"] for r in turns] == [ids["message"]], strategy
            facts = await found(client, tenant, strategy=strategy, filters={"sources": ["memories"]})
            assert [r["id"] for r in facts] == [ids["fact"]], strategy
        # the modes search too: one collection is pushed down to the lookups, more are post-filtered
        for named in (["code"], ["code", "handbook"]):
            modes = await found(client, tenant, modes="all", filters={"collections": named})
            assert modes and collections_of(modes) == set(named), (named, modes)
        assert await found(client, tenant, modes=["exact", "path"], filters={"sources": ["memories"]}) == []


async def test_an_assembly_takes_org_wide_documents_only_from_the_collections_it_names(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async def packed(**retrieval: Any) -> tuple[set[str], set[str]]:
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": AGENT, "query": "how should I grind the espresso beans?", "model": "gpt-4o",
            "max_context_tokens": 4000, "retrieval": retrieval})
        assert r.status_code == 200, r.text
        body = r.json()
        texts = {m["text"] for m in body["memories_used"]}
        return texts, {m["id"] for m in body["memories_used"]}

    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)
        texts, used = await packed()
        context = " ".join(texts)
        assert "rainy days" in context  # the agent's own document
        assert "def grind" not in context and "just before brewing" not in context  # no org-wide collection
        assert ids["fact"] in used and ids["message"] in used
        texts, _ = await packed(filters={"collections": ["handbook"]})
        context = " ".join(texts)
        assert "just before brewing" in context and "def grind" not in context
        texts, used = await packed(filters={"sources": ["memories"]}, use_hot=True)
        assert used == {ids["fact"]}, texts  # neither turns nor documents, from the hot set either
        texts, used = await packed(filters={"sources": ["messages", "documents"], "collections": ["code"]})
        assert ids["fact"] not in used and ids["message"] in used and "def grind" in " ".join(texts)


async def test_messages_only_from_the_conversations_named(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant, other_tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        ids = await seed(client, tenant)
        decaf = {"agent_id": AGENT, "messages": [{"role": "user", "content": "grind the decaf espresso beans coarser"}]}
        r = await client.post("/v1/conversations/decaf/messages", headers=tenant.headers, json=decaf)
        assert r.status_code == 201, r.text
        other = r.json()["messages"][0]["id"]
        # another org's conversation of the same id is not this org's
        r = await client.post("/v1/conversations/espresso/messages", headers=other_tenant.headers, json=decaf)
        assert r.status_code == 201, r.text
        theirs = r.json()["messages"][0]["id"]
        for strategy in ("lexical", "semantic", "hybrid", "lexical_first", "auto"):
            only = {r["id"] for r in await found(client, tenant, strategy=strategy,
                                                 filters={"conversations": ["espresso"]})}
            assert ids["message"] in only and other not in only and theirs not in only, strategy
            assert ids["fact"] in only, strategy  # other sources are not affected
            turns = await found(client, tenant, strategy=strategy,
                                filters={"sources": ["messages"], "conversations": ["decaf", "espresso"]})
            assert {r["id"] for r in turns} == {ids["message"], other}, strategy
        r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
            "agent_id": AGENT, "query": "how should I grind the espresso beans?", "model": "gpt-4o",
            "max_context_tokens": 4000, "retrieval": {"filters": {"conversations": ["decaf"]}}})
        assert r.status_code == 200, r.text
        used = {m["id"] for m in r.json()["memories_used"]}
        assert other in used and ids["message"] not in used and ids["fact"] in used


async def test_bad_sources_and_collections_are_400(
        settings: Settings, endpoints: Endpoints, embedder: Embedder, tenant: Tenant) -> None:
    async with assembly_client(settings, endpoints, embedder, **GENEROUS) as client:
        bad: list[dict[str, Any]] = [{"sources": []}, {"sources": ["files"]}, {"collections": []},
                                     {"collections": ["no spaces allowed"]}, {"collections": ["x"] * 51},
                                     {"conversations": []}, {"conversations": ["no spaces allowed"]},
                                     {"conversations": ["x" * 201]}, {"conversations": ["x"] * 51}]
        for filters in bad:
            r = await client.post("/v1/memories/search", headers=tenant.headers,
                                  json={"query": "espresso", "filters": filters})
            assert r.status_code == 400, (filters, r.text)
            r = await client.post("/v1/context/assemble", headers=tenant.headers, json={
                "agent_id": AGENT, "query": "espresso", "model": "gpt-4o", "max_context_tokens": 2000,
                "retrieval": {"filters": filters}})
            assert r.status_code == 400, (filters, r.text)

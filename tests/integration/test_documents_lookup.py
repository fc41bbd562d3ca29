"""Exact, path and symbol lookup over ingested documents, and the two acceptance smoke tests:
semantic retrieval finds a concept exact-name search misses, and exact/symbol search finds an
identifier semantic search ranks poorly."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from service.db import Database, TenantTx
from service.documents import lookup
from service.documents.globs import compile_path
from service.documents.lookup import LookupFilters, applicable_modes
from service.embeddings import Embedder
from tests.conftest import Tenant

SPHERE = '''import math

R = 6371.0


def haversine(phi1: float, lam1: float, phi2: float, lam2: float) -> float:
    dphi = math.radians(phi2 - phi1)
    dlam = math.radians(lam2 - lam1)
    h = math.sin(dphi / 2) ** 2 + math.cos(math.radians(phi1)) * math.cos(math.radians(phi2)) * math.sin(dlam / 2) ** 2
    return 2 * R * math.asin(math.sqrt(h))
'''
SLUG = '''import re


def slugify(title: str) -> str:
    """Lower-case a title and join its words with hyphens for use in a URL."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def slugify_unique(title: str, taken: set[str]) -> str:
    base = slugify(title)
    n = 2
    candidate = base
    while candidate in taken:
        candidate = f"{base}-{n}"
        n += 1
    return candidate
'''
RETRY = '''import time


def retry_with_backoff(fn, attempts: int = 5, base_delay: float = 0.1):
    """Call fn until it succeeds, sleeping twice as long after each failure."""
    for attempt in range(attempts):
        try:
            return fn()
        except ConnectionError:
            time.sleep(base_delay * 2 ** attempt)
    raise TimeoutError("gave up")
'''
CACHE = '''from collections import OrderedDict


class LRUCache:
    """Keep the most recently used entries, evicting the oldest when full."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[str, object] = OrderedDict()

    def get(self, key: str) -> object | None:
        if key not in self.items:
            return None
        self.items.move_to_end(key)
        return self.items[key]

    def put(self, key: str, value: object) -> None:
        self.items[key] = value
        self.items.move_to_end(key)
        if len(self.items) > self.capacity:
            self.items.popitem(last=False)
'''
LEDGER = '''"""Bookkeeping for customer invoices and payments."""

from decimal import Decimal

RETRY_CACHE_SLUG = "billing-v2"


class Ledger:
    """Invoices and payments of one customer account, with a running balance."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, Decimal]] = []
        self.tags: list[str] = []

    def record_invoice(self, amount: Decimal, customer: str, due_days: int = 30) -> None:
        """Add an invoice: the customer owes more, plus the late fee rate when it is overdue."""
        if amount <= 0:
            raise ValueError("an invoice amount must be positive")
        if due_days < 0:
            raise ValueError("an invoice cannot be due in the past")
        fee = Decimal(0) if due_days else amount / 100
        self.tags.append(RETRY_CACHE_SLUG)
        self.entries.append(("invoice", amount + fee))

    def record_payment(self, amount: Decimal) -> None:
        """Add a payment received from the customer."""
        self.entries.append(("payment", -amount))

    def balance(self) -> Decimal:
        """What the customer still owes."""
        return sum((a for _, a in self.entries), Decimal(0))
'''
README = '''# Billing service

Invoices, payments and customer balances.

## Setup

Install the dependencies and run the migrations (50% faster with `make fast_setup`).

## Usage

Record invoices with `Ledger.record_invoice` and payments with `Ledger.record_payment`.
'''
FILES = {"geo/sphere.py": SPHERE, "text/slug.py": SLUG, "net/retry.py": RETRY, "util/cache.py": CACHE,
         "billing/ledger.py": LEDGER, "README.md": README}




@pytest.fixture(scope="module")
async def corpus(client: AsyncTestClient[Any], make_tenant: Any) -> Tenant:
    tenant: Tenant = await make_tenant("lookup")
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": p, "content": c} for p, c in FILES.items()]})
    assert r.status_code == 200, r.text
    return tenant


def line_of(content: str, needle: str) -> int:
    return next(i for i, line in enumerate(content.splitlines(), start=1) if needle in line)


async def test_exact_finds_substrings_with_line_anchored_excerpts(db: Database, corpus: Tenant) -> None:
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        hits = await lookup.exact(tx, "move_to_end")
        assert [h.path for h in hits] == ["util/cache.py"]  # one L2 hit; the L1s and L0 it covers are dropped
        (hit,) = hits
        assert hit.level == 2 and hit.mode == "exact" and hit.rank == 1
        assert hit.matched_lines == tuple(i for i, line in enumerate(CACHE.splitlines(), 1) if "move_to_end" in line)
        assert "move_to_end" in hit.excerpt
        assert hit.excerpt_line_start <= hit.matched_lines[0] <= hit.excerpt_line_end
        lines = CACHE.splitlines(keepends=True)
        assert hit.excerpt == "".join(lines[hit.excerpt_line_start - 1 : hit.excerpt_line_end])
        # case sensitivity
        assert await lookup.exact(tx, "LRUCACHE", case_sensitive=True) == []
        assert [h.path for h in await lookup.exact(tx, "LRUCACHE")] == ["util/cache.py"]
        # % and _ are literal, not wildcards
        assert [h.path for h in await lookup.exact(tx, "50%")] == ["README.md"]
        assert await lookup.exact(tx, "5_%") == []
        assert [h.path for h in await lookup.exact(tx, "fast_setup")] == ["README.md"]
        # whole-word matches and more occurrences rank first
        ranked = await lookup.exact(tx, "slugify")
        assert ranked[0].path == "text/slug.py"
        # filters
        assert await lookup.exact(tx, "import", filters=LookupFilters(path_prefix="geo/")) != []
        assert all(h.path.startswith("geo/") for h in
                   await lookup.exact(tx, "import", filters=LookupFilters(path_prefix="geo/")))
        assert await lookup.exact(tx, "import", filters=LookupFilters(collections=("nope",))) == []
        assert await lookup.exact(tx, "import", filters=LookupFilters(agent_id="someone")) == []


async def test_path_globs_and_prefixes(db: Database, corpus: Tenant) -> None:
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        async def paths(pattern: str) -> list[str]:
            return [h.path for h in await lookup.path(tx, pattern)]

        assert await paths("*.py") == ["net/retry.py", "text/slug.py", "geo/sphere.py", "util/cache.py",
                                       "billing/ledger.py"]
        assert await paths("**/*.md") == ["README.md"]
        assert await paths("geo/**") == ["geo/sphere.py"]
        assert await paths("billing/") == ["billing/ledger.py"]
        assert await paths("util/c?che.py") == ["util/cache.py"]
        assert await paths("[gn]*/*.py") == ["net/retry.py", "geo/sphere.py"]
        assert await paths("[!gn]*/*.py") == ["text/slug.py", "util/cache.py", "billing/ledger.py"]
        assert await paths("sphere.py") == ["geo/sphere.py"]  # a file name at any depth
        assert await paths("geo/sphere.py") == ["geo/sphere.py"]
        assert await paths("util") == ["util/cache.py"]  # a directory name
        assert await paths("nothing/*") == []
        exact_first = await lookup.path(tx, "README.md")
        assert exact_first[0].score == 1.0 and exact_first[0].level == 0
        sections = await lookup.path(tx, "README.md", filters=LookupFilters(levels=(1,)))
        assert {h.section_title for h in sections} == {"Billing service", "Setup", "Usage"}


async def test_symbol_lookup_ranks_exact_above_prefix_and_substring(db: Database, corpus: Tenant) -> None:
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        hits = await lookup.symbol(tx, "slugify")
        assert [(h.symbol, h.score) for h in hits] == [("slugify", 1.0), ("slugify_unique", 0.7)]
        assert hits[0].line_start == line_of(SLUG, "def slugify(") and hits[0].level == 1
        assert hits[0].matched_lines == (line_of(SLUG, "def slugify("),)
        assert [h.symbol for h in await lookup.symbol(tx, "def record_invoice()")] == ["Ledger.record_invoice"]
        assert [h.symbol for h in await lookup.symbol(tx, "Ledger.balance")] == ["Ledger.balance"]
        assert next((h.symbol, h.score) for h in await lookup.symbol(tx, "lrucache")) == ("LRUCache", 0.9)
        substring = await lookup.symbol(tx, "record_")
        assert {h.symbol for h in substring} == {"Ledger.record_invoice", "Ledger.record_payment"}
        assert [h.section_title for h in await lookup.symbol(tx, "Setup")] == ["Setup"]  # prose headings too
        assert await lookup.symbol(tx, "nonexistent_symbol") == []


async def test_run_mode_and_applicable_modes(db: Database, corpus: Tenant) -> None:
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        for mode in lookup.LOOKUP_MODES:
            assert await lookup.run_mode(tx, mode, "slugify") or mode == "path"
        with pytest.raises(ValueError):
            await lookup.run_mode(tx, "fuzzy", "x")  # type: ignore[arg-type]
    assert applicable_modes("retry_with_backoff") == ("exact", "symbol")
    assert applicable_modes("service/**/*.py") == ("exact", "path")
    assert applicable_modes("cache.py") == ("exact", "symbol", "path")
    assert applicable_modes("how do we retry failed calls") == ("exact",)
    assert compile_path("") is None


async def semantic_rank(tx: TenantTx, embedder: Embedder, query: str, path: str, limit: int = 50) -> int | None:
    vector = (await embedder.embed([query]))[0]
    hits = await lookup.nearest(tx, vector, limit=limit)
    return next((h.rank for h in hits if h.path == path), None)


async def test_semantic_finds_a_concept_exact_name_search_misses(
        db: Database, corpus: Tenant, embedder: Embedder) -> None:
    query = "great-circle distance between two coordinates on earth"
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        # the function's name and text share no word with the query: exact and symbol find nothing
        for word in ("great-circle", "distance", "coordinates", "earth", query):
            assert not [h for h in await lookup.exact(tx, word) if h.path == "geo/sphere.py"], word
            assert not [h for h in await lookup.symbol(tx, word) if h.path == "geo/sphere.py"], word
        rank = await semantic_rank(tx, embedder, query, "geo/sphere.py")
        assert rank is not None and rank <= 2, rank


async def test_exact_finds_an_identifier_semantic_ranks_poorly(
        db: Database, corpus: Tenant, embedder: Embedder) -> None:
    # An identifier made of words that mean other things in this code base (retry, cache, slug):
    # semantic search follows the words to retry.py, cache.py and slug.py; exact search finds the identifier.
    identifier = "RETRY_CACHE_SLUG"
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        exact_hits = await lookup.exact(tx, identifier, case_sensitive=True)
        nearest = await lookup.nearest(tx, (await embedder.embed([identifier]))[0], limit=50)
    uses = {i for i, line in enumerate(LEDGER.splitlines(), 1) if identifier in line}
    assert exact_hits[0].path == "billing/ledger.py" and exact_hits[0].rank == 1
    assert set(exact_hits[0].matched_lines) == uses
    containing = [h.rank for h in nearest if identifier in h.text]
    assert containing and min(containing) > 5, [(h.rank, h.path, h.level) for h in nearest[:8]]
    # symbol lookup finds a defined name exactly where semantic search only has the words to go on
    assert [h.symbol for h in (await _symbol(db, corpus, "Ledger.record_invoice"))] == ["Ledger.record_invoice"]


async def _symbol(db: Database, corpus: Tenant, name: str) -> list[lookup.LookupHit]:
    async with db.tenant(corpus.org_id, readonly=True) as tx:
        return await lookup.symbol(tx, name)


async def test_a_file_named_with_glob_characters_is_found_by_its_own_path(
        client: AsyncTestClient[Any], db: Database, tenant: Tenant) -> None:
    """Route files of Next.js and SvelteKit are named `[id].tsx`: a path lookup of their own path read
    `[id]` as a character class and answered with `i.tsx` (or nothing), never with them."""
    files = {"app/[slug]/page.tsx": "export default function Page() {}\n", "app/s/page.tsx": "x\n",
             "pages/[id].tsx": "y\n", "pages/i.tsx": "z\n"}
    r = await client.post("/v1/documents", headers=tenant.headers,
                          json={"files": [{"path": p, "content": c} for p, c in files.items()]})
    assert r.status_code == 200, r.text
    async with db.tenant(tenant.org_id, readonly=True) as tx:
        hits = await lookup.path(tx, "app/[slug]/page.tsx")
        assert [(h.path, h.score) for h in hits] == [("app/[slug]/page.tsx", 1.0), ("app/s/page.tsx", 0.8)]
        assert [(h.path, h.score) for h in await lookup.path(tx, "[id].tsx")] == [
            ("pages/[id].tsx", 0.9), ("pages/i.tsx", 0.8)]
    r = await client.post("/v1/memories/search", headers=tenant.headers,
                          json={"query": "pages/[id].tsx", "modes": ["path"], "filters": {"sources": ["documents"]}})
    assert r.status_code == 200, r.text
    assert [x["path"] for x in r.json()["results"]][:1] == ["pages/[id].tsx"]

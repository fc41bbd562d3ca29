"""The explain page in a real headless browser (Debian's chromium driven by Playwright) against a live
service: enter the key, run an assembly over seeded memories, check what is rendered against what the
API returned, search and check the ranks; a screenshot is saved as an artifact.

Set ``PGCONTEXT_UPDATE_SCREENSHOT=1`` to also write ``docs/explain.png`` (the picture in docs/clients.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from litestar.testing import AsyncTestClient

from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.conftest import LiveService, serving
from tests.integration.test_cli import ROOT

pytestmark = pytest.mark.slow

AGENT = "explain-barista"
MEMORIES = [
    ("Dana orders a double espresso every morning before the stand-up.", True),
    ("Dana is allergic to oat milk; use whole milk in her drinks.", False),
    ("The espresso machine on the third floor was descaled on Monday.", False),
    ("Dana prefers her espresso without sugar.", False),
    ("Dana prefers her espresso with no sugar.", False),  # near-duplicate: dropped as a duplicate
    ("The office plants are watered on Fridays by the facilities team.", False),
    ("Sam from accounting takes green tea with honey in the afternoon.", False),
]
INSTALL = "apt-get update && apt-get install -y chromium"


def chromium_executable() -> str:
    """Debian's chromium: installed here when missing and we can (root with apt-get), otherwise the test
    fails with the command to run. Never skipped."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        done = subprocess.run(["sh", "-c", INSTALL], env=env, capture_output=True, text=True, timeout=1200)
        found = shutil.which("chromium")
        if found:
            return found
        pytest.fail(f"installing chromium failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    pytest.fail(f"the explain page test needs Debian's chromium; run as root: {INSTALL}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the explain page test needs playwright (a dev dependency): run `make install`")
    executable = chromium_executable()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def seeded(live_service: LiveService, live_tenant: Tenant) -> Tenant:
    memories = [{"text": text, "agent_id": AGENT, "pinned": pinned, "importance": 0.6} for text, pinned in MEMORIES]
    r = httpx.post(f"{live_service.base}/v1/memories", json={"memories": memories}, headers=live_tenant.headers,
                   timeout=60)
    assert r.status_code == 201, r.text
    r = httpx.put(f"{live_service.base}/v1/agents/{AGENT}/directive", headers=live_tenant.headers, timeout=30,
                  json={"content": "You are the office barista. Keep answers short."})
    assert r.status_code in (200, 201), r.text
    return live_tenant


async def test_the_page_is_static_open_and_outside_the_api_schema(client: AsyncTestClient[Any]) -> None:
    """Served without a key (it holds no data), under a CSP that lets no inline or foreign code run."""
    for path, media in (("/explain", "text/html"), ("/explain/explain.js", "text/javascript"),
                        ("/explain/explain.css", "text/css")):
        r = await client.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == f"{media}; charset=utf-8", (path, r.headers)
        assert r.headers["content-security-policy"].startswith("default-src 'none'; script-src 'self';")
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]  # never framed (clickjacking)
        assert r.headers["x-frame-options"] == "DENY"
    page = (await client.get("/explain")).text
    assert "http://" not in page and "https://" not in page  # no CDN: every asset from this origin
    assert "<script>" not in page and " style=" not in page
    script = (await client.get("/explain/explain.js")).text
    assert "innerHTML" not in script and "sessionStorage" in script and "localStorage" not in script
    schema = (await client.get("/schema/openapi.json")).json()
    assert not [p for p in schema["paths"] if p.startswith("/explain")]


def cell_texts(page: Any, selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_inner_texts()]


def fmt(value: float) -> str:
    """As the page writes a score: three decimals."""
    return f"{value:.3f}"


def open_page(browser: Any) -> tuple[Any, Any, list[str]]:
    """A fresh browser context and page, and the list the page's own errors land in."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # The browser logs every 4xx fetch ("Failed to load resource"); the page's own errors are what count.
    page.on("console", lambda msg: errors.append(msg.text)
            if msg.type == "error" and "Failed to load resource" not in msg.text else None)
    return context, page, errors


def until(page: Any, done: Callable[[], Any], what: str, timeout_s: float = 30) -> None:
    """Let the page run until ``done()`` holds (a check from outside the page, which its CSP does not limit)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        page.wait_for_timeout(20)


def sign_in(page: Any, live_service: LiveService, key: str) -> None:
    """Open the page and give it ``key``."""
    page.goto(f"{live_service.base}/explain")
    page.get_by_test_id("api-key").fill(key)
    page.get_by_test_id("use-key").click()


def test_explain_page_renders_an_assembly_and_a_search(browser: Any, live_service: LiveService, seeded: Tenant,
                                                       tmp_path: Path) -> None:
    context, page, errors = open_page(browser)
    try:
        response = page.goto(f"{live_service.base}/explain")
        assert response is not None and response.status == 200
        assert "script-src 'self'" in response.headers["content-security-policy"]

        page.get_by_test_id("api-key").fill(seeded.key)
        page.get_by_test_id("use-key").click()
        assert "Key set for this tab" in page.get_by_test_id("key-state").inner_text()
        # The key lives in this tab's sessionStorage only: not in localStorage, not in the input.
        assert page.evaluate("sessionStorage.getItem('pgcontext.explain.key')") == seeded.key
        assert page.evaluate("Object.keys(localStorage).length") == 0
        assert page.get_by_test_id("api-key").input_value() == ""
        # The agent list is filled from the org's memories.
        # (Locator waits, not wait_for_function: its string predicates are eval'd, which the page's CSP forbids.)
        page.wait_for_selector(f'#agents option[value="{AGENT}"]', state="attached")

        page.get_by_test_id("agent").fill(AGENT)
        page.get_by_test_id("query").fill("What espresso does Dana drink, and with what milk?")
        page.get_by_test_id("max-tokens").fill("200")
        page.get_by_test_id("reserve-tokens").fill("120")
        with page.expect_response("**/v1/context/assemble") as answered:
            page.get_by_test_id("run-assemble").click()
        assert answered.value.status == 200
        sent = answered.value.request.post_data_json
        assert sent["explain"] is True and sent["max_context_tokens"] == 200 and sent["agent_id"] == AGENT
        body = answered.value.json()
        page.get_by_test_id("assemble-result").wait_for(state="visible")

        # What the page shows is what the API answered.
        assert page.get_by_test_id("level").inner_text() == body["degradation_level"] == "L0"
        used = body["memories_used"]
        assert used and cell_texts(page, "#used tbody td[data-field=text]") == [m["text"] for m in used]
        assert MEMORIES[0][0] in [m["text"] for m in used]  # the pinned memory
        assert cell_texts(page, "#used tbody td[data-score=composite]") == [fmt(m["scores"]["composite"]) for m in used]
        assert cell_texts(page, "#used tbody td[data-score=relevance]") == [fmt(m["scores"]["relevance"]) for m in used]
        assert cell_texts(page, "#used tbody td[data-field=justification]") == [m["justification"] for m in used]
        dropped = body["dropped"]
        assert dropped, "the near-duplicate and the tight budget leave candidates out"
        assert cell_texts(page, "#dropped tbody td[data-field=text]") == [d["text"] for d in dropped]
        assert cell_texts(page, "#dropped tbody [data-field=reason]") == [d["reason"] for d in dropped]
        assert {"duplicate", "over_budget"} & {d["reason"] for d in dropped}
        budget_rows = dict(zip(cell_texts(page, "#budget th"), cell_texts(page, "#budget td"), strict=True))
        assert budget_rows["memories_budget_tokens"] == str(body["budget"]["memories_budget_tokens"])
        assert budget_rows["context_tokens"] == str(body["budget"]["context_tokens"])
        assert budget_rows["encoding"] == "o200k_base"
        b = body["budget"]
        room = (b["max_context_tokens"] - b["directive_tokens"] - b["history_tokens"] - b["reserve_tokens"]
                - b["overhead_tokens"])
        assert f"= {room} tokens for memories" in page.get_by_test_id("reasons").inner_text()
        branch_outcomes = cell_texts(page, "#branches tbody tr td:nth-child(2)")
        assert branch_outcomes == [body["branches"][b]["outcome"] for b in ("directive", "hot", "cold")]
        assert page.get_by_test_id("context").inner_text().strip() == body["context"].strip()
        assert "You are the office barista" in page.get_by_test_id("context").inner_text()
        page.screenshot(path=str(tmp_path / "explain.png"), full_page=True)
        if os.environ.get("PGCONTEXT_UPDATE_SCREENSHOT") == "1":
            page.screenshot(path=str(ROOT / "docs" / "explain.png"), full_page=True)

        # Selective mode: the budget's reasoning is listed.
        page.get_by_test_id("mode-selective").check()
        with page.expect_response("**/v1/context/assemble") as answered:
            page.get_by_test_id("run-assemble").click()
        selective = answered.value.json()
        assert "max_context_tokens" not in answered.value.request.post_data_json
        page.wait_for_selector("#budget tr[data-key=mode] td:text-is('selective')", state="attached")
        shown_reasons = cell_texts(page, "#reasons li")
        assert selective["budget"]["reasons"] and shown_reasons[:len(selective["budget"]["reasons"])] == \
            selective["budget"]["reasons"]

        # An error is shown in the page, with its code.
        page.get_by_test_id("model").fill("no-such-model")
        page.get_by_test_id("run-assemble").click()
        page.get_by_test_id("assemble-error").wait_for(state="visible")
        assert "400 unknown_model" in page.get_by_test_id("assemble-error").inner_text()

        # The search view: each result's lexical and semantic ranks.
        page.get_by_test_id("tab-search").click()
        page.get_by_test_id("search-agent").fill(AGENT)
        page.get_by_test_id("search-query").fill("espresso Dana")
        with page.expect_response("**/v1/memories/search") as answered:
            page.get_by_test_id("run-search").click()
        found = answered.value.json()
        page.get_by_test_id("search-result").wait_for(state="visible")
        assert found["results"] and cell_texts(page, "#results td[data-field=text]") == [h["text"] for h in
                                                                                        found["results"]]
        ranks = [(str(h["lexical_rank"] if h["lexical_rank"] is not None else "—"),
                  str(h["semantic_rank"] if h["semantic_rank"] is not None else "—")) for h in found["results"]]
        assert list(zip(cell_texts(page, "#results td[data-field=lexical_rank]"),
                        cell_texts(page, "#results td[data-field=semantic_rank]"), strict=True)) == ranks
        assert any(h["lexical_rank"] is not None and h["semantic_rank"] is not None for h in found["results"])
        page.screenshot(path=str(tmp_path / "explain-search.png"), full_page=True)

        # Forgetting the key empties the tab's storage, and clears what the key's org showed; a new tab
        # (context) never had it.
        page.get_by_test_id("forget-key").click()
        assert page.evaluate("sessionStorage.length") == 0
        assert page.get_by_test_id("search-result").is_hidden() and page.locator("td[data-field=text]").count() == 0
        assert page.locator("#agents option").count() == 0
        page.get_by_test_id("tab-assemble").click()
        assert page.get_by_test_id("assemble-result").is_hidden() and page.get_by_test_id("context").inner_text() == ""
        assert errors == [], errors
    finally:
        context.close()
    fresh = browser.new_context()
    try:
        other = fresh.new_page()
        other.goto(f"{live_service.base}/explain")
        assert other.evaluate("sessionStorage.length") == 0
        assert "No key yet" in other.get_by_test_id("key-state").inner_text()
    finally:
        fresh.close()
    assert (tmp_path / "explain.png").stat().st_size > 10_000


FACTS_AGENT = "explain-concierge"


def write_facts(live_service: LiveService, tenant: Tenant, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{live_service.base}/v1/memories", json=body, headers=tenant.headers, timeout=60)
    assert r.status_code == 201, r.text
    item: dict[str, Any] = r.json()["items"][0]
    return item


def test_explain_page_shows_each_memorys_lifecycle_and_history(browser: Any, live_service: LiveService,
                                                               seeded: Tenant) -> None:
    """Valid time, the current/superseded marker, the key and how often a memory was seen, beside every
    search result and assembly candidate, as the memory's record says; a row's history opens in the page."""
    paris = write_facts(live_service, seeded, {"text": "The guest's home city is Paris.", "agent_id": FACTS_AGENT,
                                               "key": "guest.city", "occurred_at": "2023-01-10T09:00:00Z"})
    lisbon = write_facts(live_service, seeded, {"text": "The guest's home city is Lisbon.", "agent_id": FACTS_AGENT,
                                                "key": "guest.city", "occurred_at": "2024-03-01T09:00:00Z"})
    tea = write_facts(live_service, seeded, {"text": "The guest drinks jasmine tea at breakfast.",
                                             "agent_id": FACTS_AGENT, "occurred_at": "2024-01-02T07:00:00Z"})
    again = write_facts(live_service, seeded, {"text": "the guest drinks jasmine tea at breakfast",
                                               "agent_id": FACTS_AGENT})
    assert lisbon["status"] == "superseded" and again == {**again, "status": "merged", "id": tea["id"]}
    records = {}
    for item in (paris, lisbon, tea):
        r = httpx.get(f"{live_service.base}/v1/memories/{item['id']}", headers=seeded.headers, timeout=30)
        assert r.status_code == 200, r.text
        records[item["id"]] = r.json()

    context, page, errors = open_page(browser)
    try:
        sign_in(page, live_service, seeded.key)

        # Search with retired memories included: every row says what its record says.
        page.get_by_test_id("tab-search").click()
        page.get_by_test_id("search-agent").fill(FACTS_AGENT)
        page.get_by_test_id("search-query").fill("guest home city tea")
        page.get_by_test_id("search-include-superseded").check()
        with page.expect_response("**/v1/memories/search") as answered:
            page.get_by_test_id("run-search").click()
        assert answered.value.request.post_data_json["filters"] == {"agent_id": FACTS_AGENT,
                                                                    "include_superseded": True}
        found = answered.value.json()["results"]
        assert {h["id"] for h in found} == set(records)
        page.wait_for_selector("#results[data-facts-loaded=true]", state="attached")

        def fact(row_id: str, part: str) -> str:
            return str(page.locator(f'#results tr[data-id="{row_id}"] [data-fact={part}]').inner_text()).strip()

        assert fact(paris["id"], "status") == f"superseded by {lisbon['id'][-8:]}"
        assert fact(paris["id"], "valid") == "valid 2023-01-10 → 2024-03-01"
        assert records[paris["id"]]["valid_until"].startswith("2024-03-01") and not records[paris["id"]]["current"]
        assert fact(lisbon["id"], "status") == "current" and fact(lisbon["id"], "valid") == "valid 2024-03-01 → now"
        assert fact(paris["id"], "key") == fact(lisbon["id"], "key") == "key guest.city"
        assert page.locator(f'#results tr[data-id="{tea["id"]}"] [data-fact=key]').count() == 0
        for memory_id, record in records.items():
            assert fact(memory_id, "seen") == f"seen {record['seen_count']}×"
        assert records[tea["id"]]["seen_count"] == 2

        # A row's history: the events the API lists, in order.
        page.locator(f'#results tr[data-id="{tea["id"]}"] [data-action=history]').click()
        page.get_by_test_id("history").wait_for(state="visible")
        r = httpx.get(f"{live_service.base}/v1/memories/{tea['id']}/history", headers=seeded.headers, timeout=30)
        events = [e["event"] for e in r.json()["items"]]
        assert events == ["created", "merged"]
        page.wait_for_selector("#history-events tbody tr[data-event=merged]", state="attached")
        assert page.get_by_test_id("history-id").inner_text() == tea["id"]
        assert cell_texts(page, "#history-events td [data-field=event]") == events
        assert "the guest drinks jasmine tea at breakfast" in page.locator(
            "#history-events tr[data-event=merged] [data-field=detail]").inner_text()
        page.get_by_test_id("history-close").click()
        assert page.get_by_test_id("history").is_hidden()

        # As of a past moment: the value current then.
        page.get_by_test_id("search-include-superseded").uncheck()
        page.get_by_test_id("search-as-of").fill("2023-06-01T00:00:00Z")
        with page.expect_response("**/v1/memories/search") as answered:
            page.get_by_test_id("run-search").click()
        assert answered.value.request.post_data_json["filters"]["as_of"] == "2023-06-01T00:00:00Z"
        assert [h["id"] for h in answered.value.json()["results"]] == [paris["id"]]
        page.wait_for_selector(f'#results[data-facts-loaded=true] tr[data-id="{paris["id"]}"]', state="attached")

        # An assembly's packed and dropped candidates carry the same cells (current memories only).
        page.get_by_test_id("tab-assemble").click()
        page.get_by_test_id("agent").fill(FACTS_AGENT)
        page.get_by_test_id("query").fill("Where is the guest's home city?")
        page.get_by_test_id("mode-fixed").check()
        page.get_by_test_id("max-tokens").fill("2000")
        with page.expect_response("**/v1/context/assemble") as answered:
            page.get_by_test_id("run-assemble").click()
        used = answered.value.json()["memories_used"]
        assert lisbon["id"] in {m["id"] for m in used} <= {lisbon["id"], tea["id"]}
        page.wait_for_selector("#used[data-facts-loaded=true]", state="attached")
        assert cell_texts(page, "#used tbody [data-fact=status]") == ["current"] * len(used)
        assert cell_texts(page, "#used tbody [data-fact=seen]") == [f"seen {records[m['id']]['seen_count']}×"
                                                                      for m in used]
        assert errors == [], errors
    finally:
        context.close()


CHAT = [{"speaker": "Dana", "content": "Could the barista start my double espresso at 8:45 tomorrow?",
         "session_id": "monday", "message_id": "d1"},
        {"role": "assistant", "content": "Sure, a double espresso with whole milk at 8:45.", "session_id": "monday",
         "message_id": "a1"}]


def test_explain_page_shows_messages_and_filters_sources(browser: Any, live_service: LiveService,
                                                         seeded: Tenant) -> None:
    r = httpx.post(f"{live_service.base}/v1/conversations/dana-chat/messages", headers=seeded.headers, timeout=60,
                   json={"agent_id": AGENT, "messages": CHAT})
    assert r.status_code == 201, r.text
    ids = [m["id"] for m in r.json()["messages"]]
    r = httpx.post(f"{live_service.base}/v1/documents", headers=seeded.headers, timeout=60, json={
        "agent_id": AGENT, "collection": "bar", "files": [
            {"path": "bar/espresso.md", "content": "# Espresso\n\nA double espresso is pulled for 28 seconds.\n"}]})
    assert r.status_code == 200, r.text
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        sign_in(page, live_service, seeded.key)
        page.get_by_test_id("agent").fill(AGENT)
        page.get_by_test_id("query").fill("When does Dana want her double espresso?")
        page.get_by_test_id("max-tokens").fill("1000")
        page.get_by_test_id("messages").fill(f"user: {CHAT[0]['content']}")
        page.get_by_test_id("conversation").fill("dana-chat")
        with page.expect_response("**/v1/context/assemble") as answered:
            page.get_by_test_id("run-assemble").click()
        assert answered.value.request.post_data_json["conversation_id"] == "dana-chat"
        body = answered.value.json()
        page.get_by_test_id("assemble-result").wait_for(state="visible")
        # Dana's own turn is in the history: dropped as in_history; the reply is packed, with who said it.
        in_history = [d for d in body["dropped"] if d["reason"] == "in_history"]
        assert [d["id"] for d in in_history] == [ids[0]]
        packed = {m["id"]: m for m in body["memories_used"]}
        assert ids[1] in packed and packed[ids[1]]["text"] == f"assistant: {CHAT[1]['content']}"
        said = dict(zip([page.locator(f'#used tr[data-id="{m["id"]}"] td[data-field=said]').inner_text()
                         for m in body["memories_used"]], [m["id"] for m in body["memories_used"]], strict=True))
        assert said["assistant · session monday · #2 of dana-chat"] == ids[1]
        assert page.locator(f'#dropped tr[data-id="{ids[0]}"] td[data-field=said]').inner_text() == \
            "Dana · session monday · #1 of dana-chat"
        # Left out before ranking, it has no scores: none shown, not a composite of 0.
        assert page.locator(f'#dropped tr[data-id="{ids[0]}"] td[data-score=composite]').inner_text() == "—"
        # A document chunk says its file and lines, and is a document, not a memory.
        chunks = [m for m in body["memories_used"] if m["path"] == "bar/espresso.md"]
        assert chunks, body["memories_used"]
        for chunk in chunks:
            row = page.locator(f'#used tr[data-id="{chunk["id"]}"]')
            assert row.get_attribute("data-source") == "document"
            assert row.locator("td[data-field=said]").inner_text() == \
                f"bar/espresso.md:{chunk['line_start']}-{chunk['line_end']}"
        # Sources: hiding messages hides exactly the message rows.
        page.locator("#assemble-result .sources input[value=message]").uncheck()
        assert not page.locator(f'#used tr[data-id="{ids[1]}"]').is_visible()
        used_ids = [m["id"] for m in body["memories_used"]]
        visible = [i for i in used_ids if page.locator(f'#used tr[data-id="{i}"]').is_visible()]
        assert visible == [m["id"] for m in body["memories_used"] if m["message"] is None]

        page.get_by_test_id("tab-search").click()
        page.get_by_test_id("search-agent").fill(AGENT)
        page.get_by_test_id("search-query").fill("double espresso")
        with page.expect_response("**/v1/memories/search") as answered:
            page.get_by_test_id("run-search").click()
        found = answered.value.json()["results"]
        page.get_by_test_id("search-result").wait_for(state="visible")
        kinds = {h["id"]: "message" if h["message"] else "document" if h["kind"] == "document_chunk" else "memory"
                 for h in found}
        assert set(kinds.values()) == {"message", "document", "memory"}, found
        page.locator("#search-result .sources input[value=memory]").uncheck()
        shown = [i for i in kinds if page.locator(f'#results tr[data-id="{i}"]').is_visible()]
        assert shown == [i for i, kind in kinds.items() if kind != "memory"]
        assert errors == [], errors
    finally:
        context.close()


HOSTILE_AGENT = "hostile." + "a" * 192  # 200 characters: the longest agent id the API takes
HOSTILE_TEXTS = [
    '<img src=x onerror="window.pwned=1"> Hana orders a flat white.',
    '"><script>window.pwned=2</script> Hana pays with javascript:alert(1) links.',
    "هانا تحب القهوة العربية مع الهيل ☕🇯🇴 Hana likes Arabic coffee with cardamom.",
    "Hana's receipt token: " + "Q" * 3000,
]
HOSTILE_CONVERSATION = "c" * 200


def test_explain_page_renders_hostile_and_huge_data_as_text_within_the_page(
        browser: Any, live_service: LiveService, seeded: Tenant) -> None:
    """Markup in memories, speakers and the directive stays text; a 3,000-character word, a 200-character
    conversation id and RTL text wrap inside the page; the longest agent id is sent whole; a recent
    message with a colon in it is the user's, not said by a role named after its first words."""
    r = httpx.post(f"{live_service.base}/v1/memories", headers=seeded.headers, timeout=60, json={
        "memories": [{"text": text, "agent_id": HOSTILE_AGENT} for text in HOSTILE_TEXTS]})
    assert r.status_code == 201, r.text
    r = httpx.put(f"{live_service.base}/v1/agents/{HOSTILE_AGENT}/directive", headers=seeded.headers, timeout=30,
                  json={"content": "<script>window.pwned=3</script> Serve Hana politely."})
    assert r.status_code in (200, 201), r.text
    r = httpx.post(f"{live_service.base}/v1/conversations/{HOSTILE_CONVERSATION}/messages", headers=seeded.headers,
                   timeout=60, json={"agent_id": HOSTILE_AGENT, "messages": [
                       {"speaker": '<img src=x onerror="window.pwned=4">', "content": "Hana wants a flat white."}]})
    assert r.status_code == 201, r.text
    context, page, errors = open_page(browser)
    dialogs: list[str] = []

    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url))
    console_errors: list[str] = []  # what the browser fetched on its own too (an icon) and failed
    page.on("console", lambda msg: console_errors.append(msg.location["url"]) if msg.type == "error" else None)
    try:
        sign_in(page, live_service, seeded.key)
        page.get_by_test_id("agent").fill(HOSTILE_AGENT)
        page.get_by_test_id("query").fill("What coffee does Hana drink, and the receipt token?")
        page.get_by_test_id("max-tokens").fill("4000")
        page.get_by_test_id("messages").fill("Is the 10:30 tasting with Hana still on?")
        with page.expect_response("**/v1/context/assemble") as answered:
            page.get_by_test_id("run-assemble").click()
        sent = answered.value.request.post_data_json
        assert sent["agent_id"] == HOSTILE_AGENT
        assert sent["recent_messages"] == [{"role": "user", "content": "Is the 10:30 tasting with Hana still on?"}]
        assert answered.value.status == 200, answered.value.text()
        body = answered.value.json()
        page.wait_for_selector("#used[data-facts-loaded=true]", state="attached")
        texts = {m["text"] for m in body["memories_used"]} | {d["text"] for d in body["dropped"]}
        assert set(HOSTILE_TEXTS) <= texts, texts
        shown = cell_texts(page, "#used td[data-field=text]") + cell_texts(page, "#dropped td[data-field=text]")
        assert set(HOSTILE_TEXTS) <= set(shown)
        assert "<script>window.pwned=3</script>" in page.get_by_test_id("context").inner_text()
        said = cell_texts(page, "#used td[data-field=said]") + cell_texts(page, "#dropped td[data-field=said]")
        assert f'<img src=x onerror="window.pwned=4"> · #1 of {HOSTILE_CONVERSATION}' in said
        assert page.locator("#assemble-result img, #assemble-result script").count() == 0
        assert page.evaluate("window.pwned === undefined") and dialogs == []
        # Every request stays on this origin, and the browser asks for no icon the service does not have.
        assert all(url.startswith(f"{live_service.base}/") for url in fetched), fetched
        assert not [url for url in console_errors if url.endswith("/favicon.ico")], console_errors
        # Nothing pushes the page wider than the window, and each memory's text keeps a readable width,
        # in a narrower window too (a table wider than it scrolls inside its panel).
        for width in (1400, 900):
            page.set_viewport_size({"width": width, "height": 1000})
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), page.evaluate(
                "[document.documentElement.scrollWidth, window.innerWidth]")
            widths = [box["width"] for box in (cell.bounding_box() for cell in
                                               page.locator("#used td[data-field=text]").all()) if box]
            assert widths and min(widths) >= 250, (width, widths)
        assert errors == [], errors
    finally:
        context.close()


def test_a_rejected_key_is_said_at_once_and_an_empty_org_packs_nothing(
        browser: Any, live_service: LiveService, make_tenant: Callable[[str], Awaitable[Tenant]]) -> None:
    """A key the service rejects is said so when it is entered, and not kept; an org with no memories
    and no directive gets an assembly whose tables say nothing was packed or dropped."""
    async def new_org() -> Tenant:
        return await make_tenant("explain-empty")

    with ThreadPoolExecutor(1) as pool:  # outside Playwright's event loop
        empty = pool.submit(asyncio.run, new_org()).result()
    context, page, errors = open_page(browser)
    try:
        page.goto(f"{live_service.base}/explain")
        page.get_by_test_id("api-key").fill("pgc_not-a-key-of-this-service")
        with page.expect_response("**/v1/memories?limit=200") as answered:
            page.get_by_test_id("use-key").click()
        assert answered.value.status == 401
        page.wait_for_selector("[data-testid=key-state]:has-text('rejected')")
        assert "invalid or revoked API key" in page.get_by_test_id("key-state").inner_text()
        assert page.evaluate("sessionStorage.length") == 0

        page.get_by_test_id("api-key").fill(empty.key)
        with page.expect_response("**/v1/memories?limit=200") as answered:
            page.get_by_test_id("use-key").click()
        assert answered.value.status == 200
        assert "Key set for this tab" in page.get_by_test_id("key-state").inner_text()
        page.get_by_test_id("agent").fill("explain-nobody")
        page.get_by_test_id("query").fill("What does the guest drink?")
        with page.expect_response("**/v1/context/assemble") as answered:
            page.get_by_test_id("run-assemble").click()
        body = answered.value.json()
        assert body["memories_used"] == body["dropped"] == [] and body["degradation_reasons"] == [], body
        page.get_by_test_id("assemble-result").wait_for(state="visible")
        assert cell_texts(page, "#used th") == ["nothing was packed"]
        assert cell_texts(page, "#dropped th") == ["nothing was dropped"]
        assert page.get_by_test_id("degradation").is_hidden()
        # Another key: what the first one showed is cleared.
        page.get_by_test_id("api-key").fill("pgc_another-key-of-no-org")
        page.get_by_test_id("use-key").click()
        assert page.get_by_test_id("assemble-result").is_hidden() and page.locator("#used th").count() == 0
        assert errors == [], errors
    finally:
        context.close()


LOCKED_CONVERSATION = "explain-locked"


def test_explain_page_says_what_an_assembly_lacks_and_shows_only_the_latest_answer(
        browser: Any, live_service: LiveService, seeded: Tenant, owner_dsn: str) -> None:
    """While the conversations table is locked, an assembly with ``history_turns`` cannot read the
    conversation's length: its answer comes at the wall, says ``history_turns_unread``, and the page says
    it too. An earlier assembly that answers after a later one does not replace the later one's answer."""
    r = httpx.post(f"{live_service.base}/v1/conversations/{LOCKED_CONVERSATION}/messages", headers=seeded.headers,
                   timeout=60, json={"agent_id": AGENT, "messages": [
                       {"role": "user", "content": "Dana asked for her double espresso at 9:15 on Thursday."}]})
    assert r.status_code == 201, r.text
    context, page, errors = open_page(browser)
    answers: list[Any] = []
    page.on("response", lambda response: answers.append(response) if "/v1/context/assemble" in response.url
            else None)
    try:
        sign_in(page, live_service, seeded.key)
        page.get_by_test_id("agent").fill(AGENT)
        page.get_by_test_id("max-tokens").fill("2000")
        with psycopg.connect(owner_dsn) as holder:
            holder.execute("LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE")  # the length read waits
            # The first assembly waits for the conversation's length; a second one, without a conversation,
            # is sent and answered meanwhile.
            page.get_by_test_id("query").fill("When does Dana want her espresso on Thursday?")
            page.get_by_test_id("conversation").fill(LOCKED_CONVERSATION)
            page.get_by_test_id("history-turns").fill("1")
            page.get_by_test_id("run-assemble").click()
            page.get_by_test_id("query").fill("Who takes green tea in the afternoon?")
            page.get_by_test_id("conversation").fill("")
            page.get_by_test_id("history-turns").fill("")
            with page.expect_response("**/v1/context/assemble") as answered:
                page.get_by_test_id("run-assemble").click()
            later = answered.value.json()
            assert answered.value.request.post_data_json["query"].startswith("Who takes green tea")
            assert later["degradation_reasons"] == []
            # The first answers at the wall, while the table is still locked.
            deadline = time.monotonic() + 30
            while len(answers) < 2 and time.monotonic() < deadline:
                page.wait_for_timeout(100)
            holder.rollback()
        assert len(answers) == 2, answers
        earlier = answers[1].json()
        assert answers[1].request.post_data_json["history_turns"] == 1
        assert earlier["degradation_reasons"] == ["history_turns_unread"], earlier["degradation_reasons"]
        page.wait_for_timeout(300)  # time for the earlier answer to be rendered, were it to be
        assert cell_texts(page, "#used td[data-field=text]") == [m["text"].strip() for m in later["memories_used"]]
        assert page.get_by_test_id("degradation").is_hidden()
        assert page.get_by_test_id("context").inner_text().strip() == later["context"].strip()

        # Alone, the same assembly's answer is shown, and what it lacks is said beside its level.
        page.get_by_test_id("query").fill("When does Dana want her espresso on Thursday?")
        page.get_by_test_id("conversation").fill(LOCKED_CONVERSATION)
        page.get_by_test_id("history-turns").fill("1")
        with psycopg.connect(owner_dsn) as holder:
            holder.execute("LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE")
            with page.expect_response("**/v1/context/assemble", timeout=30_000) as answered:
                page.get_by_test_id("run-assemble").click()
            holder.rollback()
        body = answered.value.json()
        assert body["degradation_reasons"] == ["history_turns_unread"]
        page.get_by_test_id("degradation").wait_for(state="visible")
        assert page.get_by_test_id("level").inner_text() == body["degradation_level"]
        reasons = page.locator("#degradation li")
        assert [reasons.nth(i).get_attribute("data-reason") for i in range(reasons.count())] == \
            ["history_turns_unread"]
        assert "may be packed again" in reasons.first.inner_text()
        assert errors == [], errors
    finally:
        context.close()


def test_explain_page_says_while_a_request_runs(browser: Any, live_service: LiveService, seeded: Tenant) -> None:
    """While an assembly or a search runs, its form says so beside its button (the assembly with the deadline
    it asked for); its answer or its error clears that. The button stays usable: a newer request replaces
    one in flight, and the status stays until the newest one is answered. Requests are held in the browser
    (``page.route``) so each state can be seen."""
    context, page, errors = open_page(browser)
    held: list[Any] = []
    try:
        sign_in(page, live_service, seeded.key)
        for path in ("**/v1/context/assemble", "**/v1/memories/search"):
            page.route(path, lambda route: held.append(route))
        status = page.get_by_test_id("assemble-status")
        assert status.is_hidden()
        page.get_by_test_id("agent").fill(AGENT)
        page.get_by_test_id("query").fill("What espresso does Dana drink?")
        page.get_by_test_id("run-assemble").click()
        status.wait_for(state="visible")
        assert status.inner_text() == "Assembling… (the service's deadline)"
        assert page.locator("#assemble-form[aria-busy=true]").count() == 1
        page.get_by_test_id("deadline").fill("3000")
        page.get_by_test_id("run-assemble").click()  # not disabled: a newer request replaces the first
        page.wait_for_selector("#assemble-status:text-is('Assembling… (deadline 3000 ms)')")
        until(page, lambda: len(held) == 2, "both assemblies to be sent")
        first, second = held
        with page.expect_response("**/v1/context/assemble"):
            first.continue_()
        page.wait_for_timeout(200)  # time for the earlier answer to be rendered, were it to be
        assert status.inner_text() == "Assembling… (deadline 3000 ms)"  # the newer one still runs
        assert page.get_by_test_id("assemble-result").is_hidden()  # and the earlier answer is not shown
        with page.expect_response("**/v1/context/assemble") as answered:
            second.continue_()
        assert answered.value.status == 200
        page.get_by_test_id("assemble-result").wait_for(state="visible")
        status.wait_for(state="hidden")
        assert page.locator("#assemble-form[aria-busy=false]").count() == 1

        # An error clears it too.
        held.clear()
        page.get_by_test_id("model").fill("no-such-model")
        page.get_by_test_id("run-assemble").click()
        status.wait_for(state="visible")
        until(page, lambda: held, "the request to be sent")
        held[0].continue_()
        page.get_by_test_id("assemble-error").wait_for(state="visible")
        assert "400 unknown_model" in page.get_by_test_id("assemble-error").inner_text()
        status.wait_for(state="hidden")

        # The search view's own.
        held.clear()
        page.get_by_test_id("tab-search").click()
        page.get_by_test_id("search-query").fill("espresso")
        page.get_by_test_id("run-search").click()
        page.wait_for_selector("#search-status:text-is('Searching…')")
        until(page, lambda: held, "the request to be sent")
        held[0].continue_()
        page.get_by_test_id("search-result").wait_for(state="visible")
        page.get_by_test_id("search-status").wait_for(state="hidden")
        assert errors == [], errors
    finally:
        context.close()


def test_explain_page_sends_the_deadline_given(browser: Any, live_service: LiveService, seeded: Tenant) -> None:
    """The deadline field is the request's ``timeout_ms``: the assembly runs under it (``metrics.deadline_ms``,
    shown with the timings); empty, the service's own applies (5 s for these tests); a value the API would
    refuse (an integer from 1 to 3,600,000) is not sent."""
    context, page, errors = open_page(browser)
    sent: list[Any] = []
    page.on("request", lambda request: sent.append(request) if "/v1/context/assemble" in request.url else None)
    try:
        sign_in(page, live_service, seeded.key)
        page.get_by_test_id("agent").fill(AGENT)
        page.get_by_test_id("query").fill("What espresso does Dana drink?")
        for refused in ("0", "-5", "2.5", "3600001"):
            page.get_by_test_id("deadline").fill(refused)
            page.get_by_test_id("run-assemble").click()
            assert page.locator("#deadline:invalid").count() == 1, refused
        page.wait_for_timeout(300)
        assert sent == [] and page.get_by_test_id("assemble-status").is_hidden()

        for given in ("3000", "3600000", ""):
            page.get_by_test_id("deadline").fill(given)
            with page.expect_response("**/v1/context/assemble") as answered:
                page.get_by_test_id("run-assemble").click()
            assert answered.value.status == 200, answered.value.text()
            body = answered.value.json()
            deadline_ms = body["metrics"]["deadline_ms"]
            if given:
                assert answered.value.request.post_data_json["timeout_ms"] == int(given)
            else:
                assert "timeout_ms" not in answered.value.request.post_data_json
            # Up to the service's maximum; the service's own deadline here is 5 s.
            assert (2000 < deadline_ms <= 3000) if given == "3000" else deadline_ms > 4000, (given, deadline_ms)
            shown = str(int(deadline_ms)) if float(deadline_ms).is_integer() else fmt(deadline_ms)
            page.wait_for_selector(f"#timings tr[data-key=deadline_ms] td:text-is('{shown}')", state="attached")
        assert errors == [], errors
    finally:
        context.close()


FACTS_MANY_AGENT = "explain-grinder"


def test_each_rows_fact_is_read_within_the_orgs_requests_in_flight(
        browser: Any, seeded: Tenant, live_service: LiveService, tmp_path: Path, settings: Settings, app_dsn: str,
        redis_url: str) -> None:
    """On a one-core instance an org may have 4 requests in flight: the page's lookups of 110 search
    results' records stay within it (none refused and shown as a memory that is gone); rows past the
    first 100 are not read, say so, and still open their history."""
    memories = [{"text": f"Grinder note {i}: bean lot {i * 7} grinds at setting {i % 9 + 2}.",
                 "agent_id": FACTS_MANY_AGENT} for i in range(110)]
    r = httpx.post(f"{live_service.base}/v1/memories", json={"memories": memories}, headers=seeded.headers,
                   timeout=120)
    assert r.status_code == 201, r.text
    with serving(tmp_path / "one-core", settings, app_dsn, redis_url,
                 env={"PGCONTEXT_RATE_LIMIT_MAX_IN_FLIGHT": "4"}) as one_core:
        context, page, errors = open_page(browser)
        refused: list[str] = []
        page.on("response", lambda response: refused.append(response.url) if response.status == 429 else None)
        try:
            page.goto(f"{one_core.base}/explain")
            page.get_by_test_id("api-key").fill(seeded.key)
            page.get_by_test_id("use-key").click()
            page.get_by_test_id("tab-search").click()
            page.get_by_test_id("search-agent").fill(FACTS_MANY_AGENT)
            page.get_by_test_id("search-query").fill("grinder bean lot setting")
            page.get_by_test_id("search-strategy").select_option("lexical")
            page.get_by_test_id("search-limit").fill("110")
            with page.expect_response("**/v1/memories/search") as answered:
                page.get_by_test_id("run-search").click()
            found = answered.value.json()["results"]
            assert len(found) == 110, len(found)
            page.wait_for_selector("#results[data-facts-loaded=true]", state="attached", timeout=60_000)
            statuses = cell_texts(page, "#results tbody [data-fact=status]")
            assert statuses[:100] == ["current"] * 100, [s for s in statuses if s != "current"]
            assert statuses[100:] == ["not read: past the first 100 rows"] * 10
            assert refused == [], refused
            # Searching again: the table says its facts are loaded only once this rendering's are.
            page.evaluate("""() => {
                const results = document.getElementById("results");
                window.loadedWhenRendered = [];
                new MutationObserver(() => window.loadedWhenRendered.push(results.dataset.factsLoaded ?? null))
                    .observe(results, { childList: true });
            }""")
            with page.expect_response("**/v1/memories/search"):
                page.get_by_test_id("run-search").click()
            # The answer is rendered a moment after it arrives: until then the flag is the earlier rendering's.
            until(page, lambda: page.evaluate("window.loadedWhenRendered.length"), "the new answer's rendering")
            page.wait_for_selector("#results[data-facts-loaded=true]", state="attached", timeout=60_000)
            assert page.evaluate("window.loadedWhenRendered") == [None]
            assert cell_texts(page, "#results tbody [data-fact=status]")[:100] == ["current"] * 100
            last = found[-1]["id"]
            page.locator(f'#results tr[data-id="{last}"] [data-action=history]').click()
            page.wait_for_selector("#history-events tbody tr[data-event=created]", state="attached")
            assert page.get_by_test_id("history-id").inner_text() == last
            assert errors == [], errors
        finally:
            context.close()

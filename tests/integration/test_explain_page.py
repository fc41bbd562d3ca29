"""The explain page in a real headless browser (Debian's chromium driven by Playwright) against a live
service: enter the key, run an assembly over seeded memories, check what is rendered against what the
API returned, search and check the ranks; a screenshot is saved as an artifact.

Set ``PGCONTEXT_UPDATE_SCREENSHOT=1`` to also write ``docs/explain.png`` (the picture in docs/clients.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from tests.conftest import Tenant
from tests.integration.conftest import LiveService
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

        # Forgetting the key empties the tab's storage; a new tab (context) never had it.
        page.get_by_test_id("forget-key").click()
        assert page.evaluate("sessionStorage.length") == 0
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
        page.goto(f"{live_service.base}/explain")
        page.get_by_test_id("api-key").fill(seeded.key)
        page.get_by_test_id("use-key").click()

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
        page.goto(f"{live_service.base}/explain")
        page.get_by_test_id("api-key").fill(seeded.key)
        page.get_by_test_id("use-key").click()
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

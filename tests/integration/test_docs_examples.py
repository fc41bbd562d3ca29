"""Docs that run: every request example in README.md and docs/*.md is executed against a live service
(``pgcontext serve`` on a real port, real Postgres and Redis), read from the Markdown at test time, so
an edited example is retested.

What counts as an example:

* a ``curl`` command in a ```bash block (continuation lines joined), run by bash with the real
  curl; ``localhost:8080`` becomes the live service's address and ``$KEY`` an API key of a fresh org;
* a ```json block whose first line is ``METHOD /path`` (the rest is the body), sent as is;
* a ```python block that uses ``pgcontext_client``, run with ``PGCONTEXT_URL`` and
  ``PGCONTEXT_API_KEY`` set (```json blocks holding ``mcpServers`` are the client's own test's).

``<id>`` in an example stands for the id the latest example returned (``ids[0]`` or ``id``). Each must
answer 2xx, or the status its line names with a trailing comment ``# answers 404`` (JSON blocks:
``POST /v1/... answers 404`` on the first line). Examples of one file run in order.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
import pytest

from tests.conftest import Tenant
from tests.integration.conftest import LiveService
from tests.integration.test_cli import ROOT

pytestmark = pytest.mark.slow

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOC_HOSTS = ("http://localhost:8080", "http://127.0.0.1:8080", "localhost:8080", "127.0.0.1:8080")
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)[ \t]*$")
REQUEST_LINE = re.compile(
    r"^(?P<method>GET|POST|PUT|PATCH|DELETE)\s+(?P<path>/\S*)(?:\s+answers\s+(?P<status>\d{3}))?$")
EXPECTED = re.compile(r"\s#\s*answers\s+(\d{3})\b[^'\"]*$")
STATUS_MARK = "__pgcontext_docs_status__"


@dataclass(frozen=True)
class Example:
    doc: str
    line: int
    kind: Literal["curl", "http", "python"]
    source: str
    expected: int | None = None
    """A status the doc names; None: any 2xx."""

    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def code_blocks(text: str) -> list[tuple[str, int, str]]:
    """(language, first line number, body) of every fenced block, indentation (list items) removed."""
    blocks: list[tuple[str, int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, lang, start = opened["indent"], opened["lang"].lower(), i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i].removeprefix(indent))
            i += 1
        blocks.append((lang, start + 1, "\n".join(body)))
        i += 1
    return blocks


def extract(doc: str, text: str) -> list[Example]:
    examples: list[Example] = []
    for lang, first, body in code_blocks(text):
        if lang in ("bash", "sh", "shell", "console"):
            logical, start = "", first
            for offset, raw in enumerate(body.splitlines()):
                if not logical:
                    start = first + offset
                line = raw.removeprefix("$ ").rstrip()
                if line.endswith("\\"):
                    logical += line[:-1] + " "
                    continue
                logical += line
                if logical.lstrip().startswith("curl "):
                    expected = EXPECTED.search(logical)
                    examples.append(Example(doc, start, "curl", logical.strip(),
                                            int(expected.group(1)) if expected else None))
                logical = ""
        elif lang == "json" and "mcpServers" not in body:
            head = body.strip().partition("\n")
            request = REQUEST_LINE.match(head[0].strip())
            if request:
                examples.append(Example(doc, first, "http", body.strip(),
                                        int(request["status"]) if request["status"] else None))
        elif lang in ("python", "py") and "pgcontext_client" in body:
            examples.append(Example(doc, first, "python", body))
    return examples


def doc_examples(path: Path) -> list[Example]:
    return extract(path.relative_to(ROOT).as_posix(), path.read_text())


@dataclass
class Outcome:
    status: int
    body: str


class Runner:
    """Runs one document's examples in order against the live service."""

    def __init__(self, live: LiveService, key: str, workdir: Path) -> None:
        self.base, self.key, self.workdir = live.base, key, workdir
        self.last_id: str | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        # Every curl reads this file (CURL_HOME): it reports the status on stderr, whatever the
        # example does with stdout (an example may redirect the body to a file).
        (workdir / ".curlrc").write_text(f'write-out = "%{{stderr}}{STATUS_MARK} %{{http_code}}\\n"\n')

    def substitute(self, text: str) -> str:
        for host in DOC_HOSTS:
            text = text.replace(host, self.base if host.startswith("http") else self.base.removeprefix("http://"))
        if "<id>" in text:
            assert self.last_id is not None, "the example uses <id> but no earlier example returned an id"
            text = text.replace("<id>", self.last_id)
        return text

    def remember_id(self, body: str) -> None:
        try:
            payload = json.loads(body)
        except ValueError:
            return
        if isinstance(payload, dict):
            ids = payload.get("ids")
            if isinstance(ids, list) and ids:
                self.last_id = str(ids[0])
            elif isinstance(payload.get("id"), str):
                self.last_id = payload["id"]

    def run(self, example: Example) -> Outcome:
        if example.kind == "curl":
            return self._curl(example)
        if example.kind == "http":
            return self._http(example)
        return self._python(example)

    def _curl(self, example: Example) -> Outcome:
        env = {**os.environ, "KEY": self.key, "CURL_HOME": str(self.workdir), "HOME": str(self.workdir)}
        done = subprocess.run(["bash", "-c", self.substitute(example.source)], env=env, cwd=self.workdir,
                              capture_output=True, text=True, timeout=120)
        found = re.findall(rf"{STATUS_MARK} (\d{{3}})", done.stderr)
        assert found, f"curl reported no status (exit {done.returncode}): {done.stderr[-500:]}"
        return Outcome(int(found[-1]), done.stdout)

    def _http(self, example: Example) -> Outcome:
        head, _, body = self.substitute(example.source).partition("\n")
        request = REQUEST_LINE.match(head.strip())
        assert request is not None
        payload = json.loads(body) if body.strip() else None
        r = httpx.request(request["method"], self.base + request["path"], json=payload, timeout=60,
                          headers={"Authorization": f"Bearer {self.key}"})
        return Outcome(r.status_code, r.text)

    def _python(self, example: Example) -> Outcome:
        script = self.workdir / f"example_{example.line}.py"
        script.write_text(self.substitute(example.source))
        env = {**os.environ, "PGCONTEXT_URL": self.base, "PGCONTEXT_API_KEY": self.key}
        done = subprocess.run([sys.executable, str(script)], env=env, cwd=self.workdir, capture_output=True,
                              text=True, timeout=120)
        if "No module named 'pgcontext_client'" in done.stderr:
            pytest.fail(f"{example.where()} needs the Python client: pip install -e client/ (then rerun)")
        # A script has no HTTP status of its own: it passes when it exits 0.
        return Outcome(200 if done.returncode == 0 else 599, done.stdout + done.stderr)


def test_the_extractor_reads_every_kind_of_example() -> None:
    """Fences inside list items, continuation lines, a named status, and what is left alone."""
    text = "\n".join([
        "Intro.", "", "```bash", "make run   # not a request", "KEY=pgc_...",
        "curl -s -X POST localhost:8080/v1/memories -H \"Authorization: Bearer $KEY\" \\",
        "     -d '{\"text\": \"# not a comment\"}'",
        "curl -s localhost:8080/v1/memories/<id> -H \"Authorization: Bearer $KEY\"   # answers 404", "```",
        "* a list item:", "", "  ```bash", "  curl -sf \"localhost:8080/v1/export?agent_id=a\" > a.ndjson", "  ```",
        "```json", "POST /v1/context/assemble", "{\"agent_id\": \"a\"}", "```",
        "```json", "{\"error\": {\"code\": \"x\"}}", "```",
        "```json", "{\"mcpServers\": {}}", "```",
        "```python", "from pgcontext_client import Client", "```",
        "```python", "print('not the client')", "```",
    ])
    found = extract("doc.md", text)
    assert [(e.kind, e.line, e.expected) for e in found] == [
        ("curl", 6, None), ("curl", 8, 404), ("curl", 13, None), ("http", 16, None), ("python", 26, None)]
    assert found[0].source.endswith("-d '{\"text\": \"# not a comment\"}'")
    assert found[2].source == "curl -sf \"localhost:8080/v1/export?agent_id=a\" > a.ndjson"


def test_the_docs_hold_the_examples_users_copy() -> None:
    """The harness below would pass vacuously if extraction found nothing: pin what it must find."""
    readme = doc_examples(ROOT / "README.md")
    first = " ".join(e.source for e in readme if e.kind == "curl")
    for needed in ("/v1/memories ", "/v1/agents/", "/v1/context/assemble"):  # the README's first example
        assert needed in first, needed
    api = doc_examples(ROOT / "docs" / "api.md")
    curls = " ".join(e.source for e in api if e.kind == "curl")
    for needed in ("/v1/memories ", "/v1/agents/", "/v1/context/assemble", '"selective": true',
                   "/v1/memories/feedback", "/v1/documents?collection=", "-X DELETE", "/v1/conversations/",
                   '"conversation_id"'):
        assert needed in curls, needed
    assert {e.source.partition("\n")[0] for e in api if e.kind == "http"} >= {
        "POST /v1/context/assemble", "POST /v1/memories/search"}
    assert any("/v1/export" in e.source for e in doc_examples(ROOT / "docs" / "operations.md"))
    conversations = doc_examples(ROOT / "docs" / "conversations.md")
    assert {e.kind for e in conversations} == {"curl", "http", "python"}


@pytest.mark.parametrize("doc", [d for d in DOCS if doc_examples(d)], ids=lambda d: d.name)
def test_every_example_answers_as_documented(doc: Path, live_service: LiveService,
                                             make_tenant: Callable[[str], Awaitable[Tenant]], tmp_path: Path) -> None:
    tenant: Tenant = asyncio.run(make_tenant("docs"))  # type: ignore[arg-type]
    runner = Runner(live_service, tenant.key, tmp_path / "work")
    failures: list[str] = []
    for example in doc_examples(doc):  # read now: an edited example is what runs
        outcome = runner.run(example)
        ok = outcome.status == example.expected if example.expected else 200 <= outcome.status < 300
        if ok:
            runner.remember_id(outcome.body)
        else:
            failures.append(f"{example.where()} ({example.kind}) answered {outcome.status}, expected "
                            f"{example.expected or '2xx'}:\n  {example.source}\n  -> {outcome.body[:600]}")
    assert not failures, "\n".join(failures)

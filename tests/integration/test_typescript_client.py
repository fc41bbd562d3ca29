"""The TypeScript client (``clients/typescript``, npm package ``pgcontext``) against live services.

Node runs the package's vitest suite with the services' addresses and two orgs' API keys in its
environment: every client method end to end, the typed errors, idempotency keys kept across retries of
the service's own 503, exports cut short, ids as path segments, the Vercel AI SDK tools (directly and in
a ``generateText`` loop) and the README's examples. Every test must pass and none may be skipped. The
package's generated types must also equal what openapi-typescript makes of the schema the live service
serves. Node and npm are required: without them these tests fail (``make install`` installs them); the
package's dependencies are installed with ``npm ci`` from its lockfile when missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import Tenant
from tests.integration.live import live_service
from tests.integration.test_cli import clean_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
SUITES = {
    "test/client.test.ts": {"memories", "directives, assembly, documents, health", "conversations", "export",
                            "export completeness", "path segments", "configuration"},
    "test/coverage.test.ts": {"coverage of the OpenAPI schema"},
    "test/errors.test.ts": {"error answers", "transport"},
    "test/retry.test.ts": {"idempotency", "retries"},
    "test/ai.test.ts": {"pgcontextTools executed directly", "pgcontextTools cancelled",
                        "pgcontextTools in a generateText loop"},
    "test/readme.test.ts": {"README"},
    "test/package.test.ts": {"the built package"},
}


def node_tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "Node.js and npm are required for the TypeScript client (`make install` installs them)"
    return node, npm


@pytest.fixture(scope="module")
def node() -> str:
    """Node, with the package's dependencies installed from its lockfile (``npm ci``) when missing or stale."""
    node, npm = node_tools()
    installed = PACKAGE / "node_modules" / ".package-lock.json"
    lock = PACKAGE / "package-lock.json"
    if not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime:
        run = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PACKAGE, capture_output=True, text=True,
                             timeout=900)
        assert run.returncode == 0, f"npm ci failed:\n{run.stdout}\n{run.stderr}"
    return node


@pytest.fixture(scope="module")
def slow_url(settings: Settings, endpoints: Endpoints, embedder: Embedder) -> Iterator[str]:
    """One assembly at a time, no queue, each slowed by 600 ms: a concurrent second one answers 503
    ``overloaded`` with ``Retry-After: 1`` (what the client's retries are tested against)."""
    with live_service(settings, endpoints, embedder, retrieval={"branch_delay_ms": 600},
                      assembly={"max_in_flight": 1, "max_queued": 0}) as url:
        yield url


def test_the_typescript_suite_passes_against_a_live_service(node: str, live_url: str, slow_url: str, tenant: Tenant,
                                                           other_tenant: Tenant, tmp_path: Path) -> None:
    report = tmp_path / "vitest.json"
    env = clean_env(PGCONTEXT_URL=live_url, PGCONTEXT_API_KEY=tenant.key, PGCONTEXT_SLOW_URL=slow_url,
                    PGCONTEXT_OTHER_API_KEY=other_tenant.key, CI="true", NO_COLOR="1")
    env.pop("NODE_OPTIONS", None)
    run = subprocess.run(
        [node, str(PACKAGE / "node_modules" / "vitest" / "vitest.mjs"), "run", "--reporter=default",
         "--reporter=json", f"--outputFile.json={report}"],
        cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=900)
    output = f"{run.stdout}\n{run.stderr}"
    assert run.returncode == 0, output
    result = json.loads(report.read_text())
    assert result["numFailedTests"] == 0 and result["numPendingTests"] == 0 and result["numTodoTests"] == 0, output
    assert result["numPassedTests"] == result["numTotalTests"] >= 30, output
    ran: dict[str, set[str]] = {}
    for suite in result["testResults"]:
        name = os.path.relpath(suite["name"], PACKAGE)
        for test in suite["assertionResults"]:
            assert test["status"] == "passed", (name, test["fullName"])
            ran.setdefault(name, set()).update(test["ancestorTitles"][:1])
    for suite, groups in SUITES.items():
        found = ran.get(suite, set())
        assert groups <= found, f"{suite}: ran {sorted(found)}, expected {sorted(groups)}"


def test_the_generated_types_match_the_served_schema(node: str, live_url: str) -> None:
    """``src/schema.ts`` is what openapi-typescript makes of the schema the live service serves."""
    run = subprocess.run([node, "scripts/generate.mjs", "--check", "--url", live_url], cwd=PACKAGE,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr}"
    assert "matches the service's OpenAPI schema" in run.stdout

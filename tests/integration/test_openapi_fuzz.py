"""Schemathesis, every check, against the live /schema/openapi.json of a real running service.

The app runs on a real uvicorn server (real PostgreSQL and Redis from tests/servers.py) and the
fuzzer authenticates with a real API key of a fresh org. Any failure fails the test: a 5xx, a status,
header, content type or body the schema does not document, schema-valid input rejected or
schema-invalid input accepted. ``make test`` runs a few examples per operation with a fixed seed;
``make fuzz`` (``PGCONTEXT_FUZZ_EXAMPLES=100``, every phase, random seed) runs the long version.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from service.app import create_app
from service.embeddings import Embedder
from service.runtime import Endpoints
from service.settings import Settings
from tests.conftest import ROOT, Tenant
from tests.integration.test_assembly_faults import served

EXAMPLES = int(os.environ.get("PGCONTEXT_FUZZ_EXAMPLES", "4"))
SEED = os.environ.get("PGCONTEXT_FUZZ_SEED", "20261130")
"""Fixed for ``make test`` (reproducible); ``make fuzz`` sets ``random``."""
PHASES = os.environ.get("PGCONTEXT_FUZZ_PHASES", "examples,fuzzing")
"""``make test`` leaves out the coverage phase, whose boundary cases (~2,300 here) do not follow
``--max-examples``; ``make fuzz`` adds it. The stateful phase is off in both: the links it infers
(``GET /v1/memories`` -> ``DELETE /v1/memories``) carry a null ``agent_id`` into a required parameter
and then report the 400 as schema-valid data rejected (seen with seed 20261130)."""
CONFIG = Path(__file__).with_name("schemathesis.toml")


def summary(output: str) -> str:
    """Schemathesis' closing lines: the test-case count and the verdict."""
    cases = re.search(r"Test cases:\s*\n\s*(.+)", output)
    verdict = output.strip().splitlines()[-1] if output.strip() else ""
    return f"{cases.group(1).strip() if cases else '?'} | {verdict.strip('= ')}"


def counts(output: str) -> tuple[int, int]:
    """(generated, passed) from ``Test cases: N generated, N passed, ...``."""
    found = re.search(r"(\d+) generated, (\d+) passed", output)
    return (int(found.group(1)), int(found.group(2))) if found else (0, -1)


def summary_errors(output: str) -> dict[str, int]:
    """The SUMMARY's ``Errors:`` block, e.g. ``{"Failed Health Check": 1}`` (empty when there is none)."""
    block = re.search(r"^[ \t]*Errors:\n((?:[ \t]+\S.*\n)+)", output.split("= SUMMARY =")[-1], re.MULTILINE)
    if block is None:
        return {}
    found = (re.search(r"(\w[\w ]*\w): (\d+)\s*$", line) for line in block.group(1).splitlines())
    return {m.group(1): int(m.group(2)) for m in found if m}


@pytest.mark.slow
async def test_schemathesis_all_checks_against_the_live_schema(
        settings: Settings, endpoints: Endpoints, embedder: Embedder,
        make_tenant: Callable[[str], Awaitable[Tenant]], tmp_path: Path) -> None:
    tenant = await make_tenant("fuzz")
    command = [str(Path(sys.executable).with_name("st")), "--config-file", str(CONFIG), "run",
               "--checks", "all", "--max-examples", str(EXAMPLES), "--phases", PHASES, "--workers", "1",
               "--header", f"Authorization: Bearer {tenant.key}", "--report-dir", str(tmp_path / "report"),
               "--suppress-health-check", "too_slow,data_too_large,large_base_example"]
    # The suppressed health checks are Hypothesis' complaints about its own data generation (slow or
    # large drawings from 384-number embeddings and long patterned texts), not checks of the API.
    if SEED != "random":
        command += ["--seed", SEED]
    with served(create_app(settings, endpoints, embedder=embedder)) as url:
        process = await asyncio.create_subprocess_exec(
            *command, f"{url}/schema/openapi.json", cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"})
        raw, _ = await process.communicate()
    output = raw.decode(errors="replace")
    print(f"\nschemathesis, {EXAMPLES} examples per operation: {summary(output)}")
    errors = summary_errors(output)
    if errors and set(errors) == {"Failed Health Check"}:
        # schemathesis 4.x can raise a suppressed health check anyway (schemathesis/schemathesis#4391: the flag
        # "has no effect ... operation still errors"); here Hypothesis' large_base_example on the
        # directive PUT. It judges the generator, not the API: every generated case must still pass
        # below, and the operation's examples and coverage cases ran. Reported, not failed.
        print(f"schemathesis raised a suppressed health check (not an API failure): {errors}")
    else:
        assert process.returncode == 0, output[-20_000:]
    generated, passed = counts(output)
    assert generated > 0 and passed == generated, output[-5000:]  # every generated case passed every check
    assert "failure" not in output.splitlines()[-1], output[-5000:]

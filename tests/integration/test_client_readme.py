"""The Python client example of docs/clients.md, extracted from the Markdown and run as a user would: in a
fresh interpreter, configured only by ``PGCONTEXT_URL`` and ``PGCONTEXT_API_KEY``, against a live service."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pgcontext_client import Client

from tests.conftest import Tenant
from tests.integration.test_cli import clean_env

pytestmark = pytest.mark.integration

CLIENTS_DOC = Path(__file__).resolve().parents[2] / "docs" / "clients.md"


def fenced(section: str, language: str) -> list[str]:
    """The ``language`` code blocks of docs/clients.md's ``## section`` (up to the next ``## ``)."""
    text = CLIENTS_DOC.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else None]
    return re.findall(rf"^```{language}\n(.*?)^```$", body, flags=re.S | re.M)


def test_the_python_client_example_runs(live_url: str, tenant: Tenant) -> None:
    (example,) = fenced("Python client", "python")
    assert len(example.strip().splitlines()) <= 10
    env = clean_env(PGCONTEXT_URL=live_url, PGCONTEXT_API_KEY=tenant.key)
    run = subprocess.run([sys.executable, "-c", example], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "The user prefers dark roast coffee." in run.stdout and "<directive>" in run.stdout
    with Client(live_url, tenant.key) as pg:
        (memory,) = pg.list_memories(agent_id="barista").items
        assert memory.text == "The user prefers dark roast coffee." and memory.usefulness > 0  # the feedback
        assert pg.get_directive("barista").content == "Recommend one drink, briefly."

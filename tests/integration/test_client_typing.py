"""The Python client as a type checker sees it from a user's code (mypy --strict over the package's
``py.typed`` sources): methods typed with their results, ``AsyncClient`` methods giving coroutines (so
``asyncio.run`` and ``asyncio.create_task`` take them), ``iterate`` typed with the listing's items."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CLIENT = Path(__file__).resolve().parents[2] / "client"

USER_CODE = '''
import asyncio
from pgcontext_client import AsyncClient, Client
from pgcontext_client.types import Directive, Memory, SearchResponse


async def main(pg: AsyncClient) -> None:
    task: asyncio.Task[SearchResponse] = asyncio.create_task(pg.search("q"))
    reveal_type(await task)
    reveal_type([m async for m in pg.iterate(pg.list_memories, agent_id="a")])


def sync(pg: Client, apg: AsyncClient) -> None:
    directive: Directive = asyncio.run(apg.get_directive("a"))
    reveal_type(pg.get_memory("x"))
    reveal_type(list(pg.iterate(pg.list_messages, "chat", limit=10)))
    print(directive)
'''


def test_a_users_code_type_checks_with_the_clients_types(tmp_path: Path) -> None:
    (tmp_path / "user.py").write_text(USER_CODE)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "", "--cache-dir", str(tmp_path / "cache"),
         "user.py"], cwd=tmp_path, env={"MYPYPATH": str(CLIENT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300)
    revealed = [line.split("Revealed type is ")[1].replace("builtins.", "") for line in run.stdout.splitlines()
                if "Revealed type" in line]
    assert revealed == ['"pgcontext_client.types.search.SearchResponse"',
                        '"list[pgcontext_client.types.memories.Memory]"',
                        '"pgcontext_client.types.memories.Memory"',
                        '"list[pgcontext_client.types.conversations.ConversationMessage]"'], run.stdout
    assert " error: " not in run.stdout, run.stdout

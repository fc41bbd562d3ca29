"""The client stays a light distribution of its own: httpx and msgspec, and nothing from the service."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "client"


def test_it_depends_on_httpx_and_msgspec_only() -> None:
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    names = {re.split(r"[<>=!~ ;\[]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}
    assert names == {"httpx", "msgspec"}


def test_it_imports_nothing_but_the_standard_library_httpx_msgspec_and_itself() -> None:
    allowed = {"httpx", "msgspec", "pgcontext_client", "__future__"}
    stdlib = {"asyncio", "collections", "dataclasses", "datetime", "functools", "json", "os", "random", "time",
              "types", "typing", "urllib", "uuid"}
    for path in (CLIENT / "pgcontext_client").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for module in modules:
                assert module.split(".")[0] in allowed | stdlib, f"{path.name} imports {module}"

"""The architecture holds: no import cycle among the service's modules nor among the benchmarks', and
the layers and boundaries of pyproject.toml's ``[tool.importlinter]`` contracts are kept.

Imports made only for type checking (``if TYPE_CHECKING:``) count: they tie two modules' fates too.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def import_cycles(graph: grimp.ImportGraph, modules: Iterable[str]) -> list[list[str]]:
    """The import cycles among ``modules``: every strongly connected component of more than one module
    (and every module that imports itself), each sorted (Tarjan's algorithm, iteratively)."""
    members = set(modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m) & members) for m in sorted(members)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for step, nxt in enumerate(edges[node][position:], start=position):
                if nxt not in index:
                    work.append((node, step + 1))
                    work.append((nxt, 0))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in edges[node]:
                        found.append(sorted(component))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return sorted(found)


def package_graph(package: str) -> grimp.ImportGraph:
    return grimp.build_graph(package, cache_dir=None)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = grimp.ImportGraph()
    for a, b in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.d"),
                 ("p.f", "p.f"), ("p.g", "p.a")]:
        graph.add_import(importer=a, imported=b)
    assert import_cycles(graph, graph.modules) == [["p.a", "p.b", "p.c"], ["p.d", "p.e"], ["p.f"]]
    assert import_cycles(graph, ["p.a", "p.b", "p.g"]) == []  # only the given modules' imports


@pytest.mark.parametrize("package", ["service", "benchmarks"])
def test_no_import_cycles(package: str) -> None:
    graph = package_graph(package)
    assert len(graph.modules) > 10
    assert import_cycles(graph, graph.modules) == []


def test_type_checking_imports_are_in_the_graph() -> None:
    # service.runtime imports the services it holds only for type checking.
    graph = package_graph("service")
    assert {"service.db", "service.settings"} <= graph.find_modules_directly_imported_by("service.runtime")


def test_every_http_module_has_a_layer() -> None:
    """The layers contract checks that every package of ``service`` has a layer, but names the HTTP
    edge's modules one by one: a new one must be placed too."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["id"] == "layers"]
    named = {part.strip() for layer in layers for part in layer.replace(":", "|").split("|")}
    http = {m.removeprefix("service.") for m in package_graph("service").find_children("service.http")}
    assert http and http <= named, sorted(http - named)


def test_the_import_contracts_are_kept() -> None:
    """``lint-imports`` as ``make lint`` runs it: the service's layers, the assembly pipeline's, the MCP
    server over the client only, the client apart from the service, and the benchmarks outside it."""
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0

"""No two modules import each other, directly or round a longer loop: each pair of rooms
(docs/architecture.md) and each pair of modules in a room has one direction. Every import
statement counts, a deferred one in a function or one under ``TYPE_CHECKING`` too (they are
how a circle hides); a module importing its own package (``from rdu_sim.engine import
shared_steps`` inside ``rdu_sim.engine.engine``) does not, that is Python's package rule."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rdu_sim", "benchmarks")


def _modules() -> dict[str, Path]:
    """Every module of the packages by dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported(name: str, path: Path) -> set[str]:
    """The dotted names ``path`` (module ``name``) imports, as written."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports (a name resolved to the longest
    module it names; its own ancestors left out)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for target in _imported(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):
                edges.add(target)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    assert circles(import_graph()) == []


def test_the_check_sees_a_circle_and_a_deferred_import() -> None:
    graph = import_graph()
    # the checker reads imports inside functions (benchmarks.cases imports its cluster cases
    # when one runs) and under TYPE_CHECKING
    assert "benchmarks.cluster_cases" in graph["benchmarks.cases"]
    assert "rdu_sim.engine.step_run" in graph["rdu_sim.engine.timing"]
    graph["benchmarks.work"] = graph["benchmarks.work"] | {"benchmarks.cases"}
    assert circles(graph) == [
        ["benchmarks.cases", "benchmarks.cluster_cases", "benchmarks.sweep_eval", "benchmarks.work"]
    ]

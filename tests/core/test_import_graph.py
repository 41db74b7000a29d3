"""The layering, checked on the source with the standard-library `ast` (nothing is imported).

The bugs this catches: an import cycle between two modules (a design knot, whatever lazy import
hides it at run time), shared training code that names a drafter family (`jetflow_bench.training`
must find families through the registry, never import `drafters`), and the decoding core
(`jetflow_bench.engine`) reaching up into the layers that measure or drive it.

Imports inside functions count; imports under ``if TYPE_CHECKING:`` count for the layer rules
(they still tie the code to the other package) but not for cycles (they never execute).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jetflow_bench", "drafters", "suites")
# Packages the decoding core may not import: everything that sits above it.
ABOVE_ENGINE = (
    "jetflow_bench.sweep", "jetflow_bench.report", "jetflow_bench.projection", "jetflow_bench.training",
    "jetflow_bench.integrations", "jetflow_bench.cli", "jetflow_bench.toy", "jetflow_bench.metrics", "suites",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_checking: bool = False):
    """(import node, under TYPE_CHECKING?) for every import statement in ``tree``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_checking
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_checking)
        else:
            yield from _imports(node, type_checking)


def import_graph(runtime_only: bool) -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from pkg import name` is an import of
    ``pkg.name`` when that is a module, else of ``pkg``)."""
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node, type_checking in _imports(ast.parse(path.read_text(), filename=str(path))):
            if type_checking and runtime_only:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1 steps
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
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
            v, children = work[-1]
            w = next(children, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    component = []
                    while True:
                        u = stack.pop()
                        on_stack.discard(u)
                        component.append(u)
                        if u == v:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(sorted(graph[w]))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return found


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _arrows(graph: dict[str, set[str]], source: tuple[str, ...], target: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, edges in graph.items() if _within(m, source)
                  for t in edges if _within(t, target))


def test_cycle_finder_finds_a_planted_cycle():
    """Guards the checker itself: a three-module loop and a two-module loop are both reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}, "f": {"a"}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d", "e"]]


def test_graph_sees_lazy_and_relative_imports():
    """Guards the walker: imports inside functions are edges (else a lazy import hides a cycle)."""
    graph = import_graph(runtime_only=True)
    assert "jetflow_bench.heads.masks" in graph["jetflow_bench.training.config"]  # imported inside __post_init__
    assert "drafters.base" in graph["drafters"]


def test_no_import_cycles():
    assert cycles(import_graph(runtime_only=True)) == []


def test_training_names_no_drafter_family():
    """Families import the training contract (`training.objective`); training finds them by name."""
    assert _arrows(import_graph(runtime_only=False), ("jetflow_bench.training",), ("drafters",)) == []


def test_engine_imports_nothing_above_it():
    assert _arrows(import_graph(runtime_only=False), ("jetflow_bench.engine",), ABOVE_ENGINE) == []

"""The layering, checked on the source with the standard-library `ast` (nothing is imported).

The bugs this catches: an import cycle between two modules (a design knot, whatever lazy import
or ``if TYPE_CHECKING:`` hides it at run time), a module importing from a layer above its own
(`LAYERS`: shared training code naming a drafter family, the decoding core reaching up into the
drafters that plug into it or the layers that measure or drive it), and a module no layer names.

Every import counts: inside functions and under ``if TYPE_CHECKING:`` alike (a type-only import
still ties the code to the other module, and a cycle through one is a knot all the same).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("jetflow_bench", "drafters", "suites")
ROOT_PACKAGE = "jetflow_bench"  # its __init__ (the version string) is a utility; each of its modules names its own layer
# The layers, lowest first: a module may import its own layer and those below it, never one above.
# A module belongs to the layer naming its longest prefix (`training.recipe`, the declarations a
# family makes, sits below the training loop that reads them).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("utilities", (ROOT_PACKAGE, "jetflow_bench.core", "jetflow_bench.measure", "jetflow_bench.kernels")),
    ("targets and suites", ("jetflow_bench.toy", "jetflow_bench.targets", "suites")),
    ("engine", ("jetflow_bench.engine",)),
    ("heads", ("jetflow_bench.heads",)),
    ("plug-in declarations", ("jetflow_bench.training.recipe", "jetflow_bench.plugins")),
    ("training", ("jetflow_bench.training",)),
    ("drafters", ("drafters",)),
    ("harnesses", (
        "jetflow_bench.sweep", "jetflow_bench.bench", "jetflow_bench.report", "jetflow_bench.projection",
        "jetflow_bench.integrations",
    )),
    ("cli", ("jetflow_bench.cli",)),
)
# What the decoding core may never import, named outright (the layer rule implies it).
ABOVE_ENGINE = (
    "drafters", "jetflow_bench.training", "jetflow_bench.sweep", "jetflow_bench.cli", "jetflow_bench.report",
    "jetflow_bench.projection", "jetflow_bench.integrations", "jetflow_bench.measure",
)
# The package root holds its version string alone: every other module sits in the package of its layer.
MAX_FLAT_MODULES = 6


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


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (`from pkg import name` is an import of
    ``pkg.name`` when that is a module, else of ``pkg``)."""
    modules = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node, _type_checking in _imports(ast.parse(path.read_text(), filename=str(path))):
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


def layer_of(module: str) -> int | None:
    """Index in `LAYERS` of the layer naming ``module``'s longest prefix; None: no layer names it."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or (p != ROOT_PACKAGE and _within(module, (p,)))) and (best is None or len(p) > best[0]):
                best = (len(p), rank)
    return None if best is None else best[1]


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module in a higher layer, as "a (layer) -> b (layer)"."""
    name = {rank: label for rank, (label, _) in enumerate(LAYERS)}
    return sorted(f"{m} ({name[layer_of(m)]}) -> {t} ({name[layer_of(t)]})" for m, edges in graph.items()
                  for t in edges if layer_of(t) > layer_of(m))


def _arrows(graph: dict[str, set[str]], source: tuple[str, ...], target: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, edges in graph.items() if _within(m, source)
                  for t in edges if _within(t, target))


def test_cycle_finder_finds_a_planted_cycle():
    """Guards the checker itself: a three-module loop and a two-module loop are both reported."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d", "a"}, "f": {"a"}}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d", "e"]]


def test_graph_sees_lazy_and_type_only_imports():
    """Guards the walker: imports inside functions and under TYPE_CHECKING are edges (else a lazy
    or a type-only import hides a cycle)."""
    graph = import_graph()
    assert "jetflow_bench.heads.masks" in graph["jetflow_bench.training.config"]  # imported inside __post_init__
    assert "jetflow_bench.training.config" in graph["jetflow_bench.training.objective"]  # DEEP_TARGET
    assert "jetflow_bench.training.teacher" in graph["jetflow_bench.training.objective"]  # under TYPE_CHECKING only
    assert "jetflow_bench.engine.drafter" in graph["drafters"]  # inside a module __getattr__


def test_layer_finder_reads_the_longest_prefix():
    """Guards `layer_of`: the declarations module sits below its package, and an unknown module has no layer."""
    assert layer_of("jetflow_bench.training.recipe") < layer_of("jetflow_bench.training.loop")
    assert layer_of("jetflow_bench.engine.loop") < layer_of("drafters.eagle.drafter")
    assert layer_of("elsewhere.module") is None
    assert layer_of("jetflow_bench.new_module") is None  # the root package names no module but its own __init__


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_no_module_imports_a_layer_above_its_own():
    assert upward(import_graph()) == []


def test_engine_imports_nothing_above_it():
    assert _arrows(import_graph(), ("jetflow_bench.engine",), ABOVE_ENGINE) == []


def test_heads_import_no_drafter():
    """The draft-head model sits below the families that drive it."""
    assert _arrows(import_graph(), ("jetflow_bench.heads",), ("drafters",)) == []


def documented_layers() -> list[tuple[str, tuple[str, ...]]]:
    """The layer table of docs/architecture.md as `LAYERS` spells it: (label, module prefixes) per row."""
    rows = re.findall(r"^\| ([a-z -]+) \| (`.*`) \|", (ROOT / "docs" / "architecture.md").read_text(), re.M)
    return [(label, tuple(path.removesuffix("/__init__.py").removesuffix(".py").strip("/").replace("/", ".")
                          for path in re.findall(r"`([^`]+)`", paths))) for label, paths in rows]


def test_architecture_doc_states_the_layers():
    """docs/architecture.md's table is `LAYERS`: a layer added, moved or renamed here is redrawn there."""
    assert documented_layers() == list(LAYERS)


def test_few_modules_flat_under_the_package_root():
    flat = sorted(p.name for p in (ROOT / ROOT_PACKAGE).glob("*.py"))
    assert len(flat) <= MAX_FLAT_MODULES, flat

"""No import cycles and no upward imports (docs/architecture.md "Layout").

Every module of `nodes/`, `analysis/`, `testbed/` and `bench/` is parsed with `ast` (nothing is
imported); each import statement -- at module level, inside a function (a lazy import is
still a dependency: it only moves the cycle to run time) or under `if TYPE_CHECKING:` -- is an
edge to the module it names (`from a.b import c` names `a.b.c` when that is a module, else
`a.b`). The graph must have no cycle, and no edge may go up the layering
bench -> testbed -> analysis -> nodes.
"""

from __future__ import annotations

import ast
from pathlib import Path

from analysis.elle import strongly_connected

ROOT = Path(__file__).resolve().parents[1]
# lower layers first: a module may import its own layer and those below it
LAYERS = ("nodes", "analysis", "testbed", "bench")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source, for every module of the four packages."""
    out: dict[str, Path] = {}
    for pkg in LAYERS:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _target(name: str, mods: dict[str, Path]) -> str | None:
    """The module of ours that `name` (a module, or a name inside one) refers to."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {imported module of ours: line of the first such import}."""
    mods = modules(root)
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                if node.level:
                    parts = package.split(".")
                    parent = ".".join(parts[:len(parts) - node.level + 1])
                    base = f"{parent}.{node.module}" if node.module else parent
                else:
                    base = node.module or ""
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                         for a in node.names]
            for name in names:
                target = _target(name, mods)
                if target is not None and target != mod:
                    graph[mod].setdefault(target, node.lineno)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module, sorted."""
    return sorted(strongly_connected(graph))


def _describe(comp: list[str], graph: dict[str, dict[str, int]], mods: dict[str, Path]) -> str:
    inside = set(comp)
    edges = [f"{mods[a].relative_to(ROOT)}:{line} -> {b}"
             for a in comp for b, line in sorted(graph[a].items()) if b in inside]
    return " | ".join(edges)


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    """Imports that go up the layering, as `module:line -> module`."""
    rank = {layer: k for k, layer in enumerate(LAYERS)}
    return [f"{a}:{line} -> {b}" for a, targets in sorted(graph.items())
            for b, line in sorted(targets.items())
            if rank[b.split(".")[0]] > rank[a.split(".")[0]]]


# Cycles allowed: none. (The protocols that host other protocols by name -- `primary` and
# `switching` -- get the catalogue's lookup from the catalogue's factory, nodes/protocols/
# catalogue.py `_hosting`, and the edge gate gets its rules from whoever builds it.)
KNOWN: set[frozenset[str]] = set()


def test_no_import_cycles() -> None:
    graph, mods = import_graph(), modules()
    every = cycles(graph)
    found = [c for c in every if frozenset(c) not in KNOWN]
    assert not found, "import cycles:\n" + "\n".join(_describe(c, graph, mods) for c in found)
    gone = KNOWN - {frozenset(c) for c in every}
    assert not gone, f"a known cycle is gone, remove it from KNOWN: {sorted(map(sorted, gone))}"


def test_no_upward_imports() -> None:
    assert upward(import_graph()) == []


def test_the_walk_sees_cycles_and_upward_imports(tmp_path: Path) -> None:
    """The checker itself: a tree with a lazy cycle, a relative-import cycle, a cycle through
    `from pkg import module` and an upward import is flagged; the same tree without them
    is clean."""
    def tree(files: dict[str, str]) -> Path:
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return tmp_path

    clean = {"nodes/__init__.py": "", "nodes/a.py": "from nodes import b\n",
             "nodes/b.py": "import os\n", "nodes/p/__init__.py": "",
             "nodes/p/x.py": "from . import y\n", "nodes/p/y.py": "",
             "analysis/__init__.py": "", "analysis/m.py": "from nodes.a import thing\n",
             "testbed/__init__.py": "", "bench/__init__.py": ""}
    root = tree(clean)
    assert cycles(import_graph(root)) == [] and upward(import_graph(root)) == []
    tree({"nodes/b.py": "def f():\n    from nodes.a import g\n",  # lazy: still a cycle
          "nodes/p/y.py": "from .x import z\n",
          "nodes/c.py": "from analysis import m\n"})
    graph = import_graph(root)
    assert cycles(graph) == [["nodes.a", "nodes.b"], ["nodes.p.x", "nodes.p.y"]]
    assert upward(graph) == ["nodes.c:1 -> analysis.m"]

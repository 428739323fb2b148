"""The shape of the package: no import cycles, counting the imports inside functions (they are
dependencies too) and leaving out those only type checkers see."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "perfsuite"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node but the bodies of `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in [child, *_runtime_nodes(child)])
            continue
        yield node
        yield from _runtime_nodes(node)


def import_graph() -> dict[str, set[str]]:
    """perfsuite module -> the perfsuite modules it imports when it runs."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                found = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            graph[name].update(m for m in found if m in modules and m != name)
    return graph


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "perfsuite.report" in graph["perfsuite.runner"]  # imported inside `finish`
    assert "perfsuite.scenario" not in graph["perfsuite.draft.spec"]  # for type checkers only


def test_no_import_cycles():
    graph = import_graph()
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None

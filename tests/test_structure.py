"""The shape of the package: no import cycles, and every import points down the layers below. The graph
counts every import: those inside functions (they are dependencies too) and those only type checkers see
(`if TYPE_CHECKING:`; a cycle there is a cycle in the design)."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "perfsuite"

# The layers, lowest first: each is a folder of the package (or a top-level module), and a module imports
# from its own layer and the layers below it, never from one above. A run reads from input to page: the
# shared vocabulary, the simulated GPU, the selectors and their kernels, measuring, correctness, the
# scenario, the result rows, the case kinds, then comparing, the report, the tools built on cases, the
# sweep and the front ends.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the console, the host's facts, the settings and dtype names, the case-kind registry (data)
    ("core", ("perfsuite.core",)),
    # the package's __init__ installs the simulated GPU before anything asks torch.cuda
    ("simulated_gpu", ("perfsuite.simulated_gpu", "perfsuite.__init__")),
    ("kernels", ("perfsuite.kernels",)),
    ("variants", ("perfsuite.variants",)),
    ("measure", ("perfsuite.measure",)),
    ("correctness", ("perfsuite.correctness",)),
    ("scenario", ("perfsuite.scenario",)),
    ("results", ("perfsuite.results",)),
    ("cases", ("perfsuite.cases",)),
    ("compare", ("perfsuite.compare",)),
    ("report", ("perfsuite.report",)),
    ("tools", ("perfsuite.tools",)),
    ("sweep", ("perfsuite.sweep",)),
    ("commands", ("perfsuite.commands",)),
    ("front ends", ("perfsuite.cli", "perfsuite.pytest_plugin", "perfsuite.__main__")),
)

MAX_TOP_LEVEL_MODULES = 10


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(lines: bool = False) -> dict[str, set[str]] | dict[str, dict[str, int]]:
    """perfsuite module -> the perfsuite modules it imports, anywhere in it (with `lines`: -> the line of
    the first such import)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
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
            for m in found:
                if m in modules and m != name:
                    graph[name].setdefault(m, node.lineno)
    if lines:
        return graph
    return {name: set(edges) for name, edges in graph.items()}


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest entry naming `module` (the root package as perfsuite.__init__)."""
    key = "perfsuite.__init__" if module == "perfsuite" else module
    best: tuple[int, int] | None = None  # (entry length, layer)
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if (key == entry or key.startswith(entry + ".")) and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_structure.py")
    return best[1]


def test_the_graph_sees_lazy_imports():
    graph = import_graph()
    assert "perfsuite.report" in graph["perfsuite.sweep"]  # imported inside `finish`
    # the draft tables name the scenario by a Protocol, not by the loader's type: no cycle to hide
    assert "perfsuite.scenario.load" not in graph["perfsuite.cases.draft.draft_table"]


def test_the_graph_sees_type_checking_imports():
    graph = import_graph()
    assert "perfsuite.scenario.load" in graph["perfsuite.tools.counters"]  # for type checkers only
    assert "perfsuite.kernels.topk_softmax" in graph["perfsuite.kernels.resources"]


def test_no_import_cycles():
    graph = import_graph()
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


def test_every_module_has_a_layer():
    for module in import_graph():
        layer_of(module)


def test_imports_point_down_the_layers():
    upward = [
        f"{module} (line {line}, layer {LAYERS[layer_of(module)][0]}) imports {target} "
        f"(layer {LAYERS[layer_of(target)][0]})"
        for module, edges in sorted(import_graph(lines=True).items())
        for target, line in sorted(edges.items())
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_layer_check_names_an_upward_import():
    assert layer_of("perfsuite.measure.timing") < layer_of("perfsuite.sweep")
    assert layer_of("perfsuite.tools.tuning") > layer_of("perfsuite.kernels.plan")  # longest entry wins
    assert layer_of("perfsuite") < layer_of("perfsuite.measure")  # the root __init__, not every module


def test_few_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} top-level modules: {', '.join(top)}"


# Modules under SMALL_MODULE lines are plug-ins (one variant each, found by name), package entry points, or
# one concept several layers share; anything else that small belongs with its neighbour.
SMALL_MODULE = 40
SMALL_BY_DESIGN = {
    "perfsuite.variants.argmax_ones": "a built-in variant: one module each, found by name",
    "perfsuite.variants.triton_auto": "a built-in variant: one module each, found by name",
    "perfsuite.variants.ordering": "the suite's tie order, shared by parity, identity, the draft loop, tp",
    "perfsuite.core.dtypes": "the dtype names every layer shares (kernels, scenario, results, cases)",
    "perfsuite.core.exits": "the exit statuses every command, tool and worker returns: one table",
    "perfsuite.core.strict_json": "the JSON every writer shares (results, run.json, tp inputs, traces)",
}


def test_no_two_modules_share_a_base_name():
    by_name: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py") and path.parent.name != "commands":
            by_name.setdefault(path.stem, []).append(_module_name(path))  # a command's module: its name
    shared = {name: sorted(mods) for name, mods in by_name.items() if len(mods) > 1}
    assert not shared, f"modules with one base name: {shared}"


def test_small_modules_are_small_by_design():
    small = {
        _module_name(path): n
        for path in PACKAGE.rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
        and (n := len(path.read_text().splitlines())) < SMALL_MODULE
    }
    commands = "perfsuite.commands."  # a command: one module each, found by its name
    unexplained = {m: n for m, n in small.items() if m not in SMALL_BY_DESIGN and not m.startswith(commands)}
    assert not unexplained, f"modules under {SMALL_MODULE} lines (merge with a neighbour): {unexplained}"


# A case kind's part is called by a reader in a given layer, so it must sit in that layer or below.
KIND_PART_LAYERS = {
    "columns": "results",  # the results files write its columns
    "cases": "sweep",
    "unit": "sweep",
    "run": "sweep",
    "rows": "report",
    "sections": "report",
}


def test_every_case_kind_part_resolves_in_a_layer_its_reader_may_call():
    from perfsuite.core import kinds

    layer_index = {name: i for i, (name, _) in enumerate(LAYERS)}
    too_high = []
    for kind in kinds.KINDS:
        for role, reader in KIND_PART_LAYERS.items():
            path = getattr(kind, role)
            if path is None:
                continue
            assert callable(kind.part(role)) or isinstance(kind.part(role), dict), (kind.name, role)
            module = path.partition(":")[0]
            if layer_of(module) > layer_index[reader]:
                too_high.append(
                    f"{kind.name}.{role} = {path} (layer {LAYERS[layer_of(module)][0]} > {reader})"
                )
    assert not too_high, "case-kind parts above their readers:\n" + "\n".join(too_high)
    assert len({kind.name for kind in kinds.KINDS}) == len(kinds.KINDS)


def test_each_case_kind_baseline_is_its_selectors_baseline():
    from perfsuite import variants
    from perfsuite.core import kinds
    from perfsuite.results import columns
    from perfsuite.variants import tensor_parallel

    baselines = {kind.name: kind.baseline for kind in kinds.KINDS}
    assert baselines == {
        "kernel": variants.BASELINE,
        "tensor_parallel": tensor_parallel.BASELINE,
        "draft": variants.BASELINE,
        "edge_cases": variants.BASELINE,
    }
    assert columns.BASELINES == (variants.BASELINE, tensor_parallel.BASELINE)


def test_readers_of_the_case_kinds_name_no_kind():
    """The scenario loader, the results files, the sweep and the report reach the kinds' modules only
    through the registry."""
    graph = import_graph()
    kind_modules = {
        "perfsuite.cases.kernel",
        "perfsuite.cases.draft.draft_runner",
        "perfsuite.cases.draft.draft_table",
        "perfsuite.cases.tensor_parallel.tp_runner",
        "perfsuite.cases.tensor_parallel.launch",
        "perfsuite.report.tp_section",
        "perfsuite.report.draft_section",
    }
    readers = [
        "perfsuite.scenario.load",
        "perfsuite.results.run_dir",
        "perfsuite.sweep",
        "perfsuite.report.html",
    ]
    named = {reader: sorted(graph[reader] & kind_modules) for reader in readers}
    assert not any(named.values()), f"readers importing a kind's module by name: {named}"


def _kind_list(text: str, start: str, end: str) -> set[str]:
    """The backquoted names between `start` and `end` in `text` (a list of case kinds)."""
    part = text[text.index(start) :]
    return set(re.findall(r"`(\w+)`", part[: part.index(end)]))


def test_the_docs_list_every_case_kind():
    from perfsuite.core import kinds

    registered = {kind.name for kind in kinds.KINDS}
    docs = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    listed = _kind_list(docs, "A case kind is what a scenario asks", "`perfsuite/core/kinds.py`")
    assert registered <= listed, f"docs/architecture.md's kind list lacks {sorted(registered - listed)}"
    listed = _kind_list(kinds.__doc__, "`KINDS` lists them", "The loader")
    assert registered <= listed, f"core/kinds.py's docstring lacks {sorted(registered - listed)}"


def test_the_kind_list_check_sees_a_kind_left_out():
    docs = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    start, end = "A case kind is what a scenario asks", "`perfsuite/core/kinds.py`"
    assert "edge_cases" in _kind_list(docs, start, end)
    assert "edge_cases" not in _kind_list(docs.replace("`edge_cases`", "the edge cases"), start, end)

"""The case kinds: what a scenario asks perfsuite to measure, each a plug-in named in one registry.

`KINDS` lists them in run order: `kernel` (one selector call on one device, `[[sweep]]`),
`tensor_parallel` (one call over a process group, `[[sweep]]` with tp > 1), `draft` (one draft cycle,
`[draft]`) and `edge_cases` (the edge-case matrix of the sweeps' selectors). The loader, the sweep, the
results files and the report loop over `KINDS` and name no kind. Parts are dotted paths imported when first
used, so this registry sits below every reader; `tests/test_structure.py` checks that each resolves in a
layer its reader may call. Adding a kind: docs/architecture.md ("Adding a case kind").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASELINE = "full_softmax"
"""The selector every speedup of the kernel, draft and edge-case kinds is over (`variants.BASELINE`)."""
SWEEP_TABLE = "sweep"
"""The scenario's own table, `[[sweep]]`, validated by the scenario loader; kinds may share it."""


@dataclass(frozen=True)
class KindRun:
    """What a kind's `run` is given: the scenario, the device, the rows' environment and the run folder."""

    scenario: Any  # perfsuite.scenario.load.Scenario
    info: Any  # perfsuite.measure.device.DeviceInfo
    env: dict[str, object]
    out_dir: Path
    progress: bool = True
    counters: Callable[[Any], dict[str, object]] | None = None  # `run --counters` (kernel cases)


@dataclass(frozen=True)
class CaseKind:
    """One case kind: its parts (dotted paths), its scenario table and where its rows go (by default the
    sweep's table and the kernel rows' log and table, over the baseline selector)."""

    name: str
    cases: str  # (scenario) -> list of cases
    unit: str  # (case) -> hashable: the cases that run together, a shard's unit
    run: str  # (cases, KindRun) -> Iterator[row]
    sections: str  # (frame, samples) -> list of report sections
    table: str = SWEEP_TABLE  # the scenario table its cases come from
    log: str = "results.jsonl"  # the run folder's log its rows are appended to
    table_file: str = "results.csv"  # the table written from the log
    baseline: str = BASELINE  # the variant its speedups are over
    rows: str | None = None  # (frame) -> bool mask of its rows, where kinds share a log
    columns: str | None = None  # a plug-in kind's own `results.columns.Column`s (the built-in kinds':
    # in the registry, results/columns.py)
    noun: str = ""  # the kind in a count: "2 tensor-parallel cases" (default: its name)

    def count(self, n: int, what: str = "case") -> str:
        """`n` of its cases (or rows, `what`) in words: "1 draft case", "40 edge-case matrix rows"."""
        return f"{n} {self.noun or self.name.replace('_', ' ')} {what}{'' if n == 1 else 's'}"

    def part(self, role: str) -> Any:
        """The attribute a role names ("module:attribute"), imported now."""
        path = getattr(self, role)
        if path is None:
            raise LookupError(f"case kind {self.name!r} has no {role}")
        module, _, attribute = path.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def cases_of(self, scenario: Any) -> list[Any]:
        return list(self.part("cases")(scenario))

    def run_cases(self, cases: list[Any], context: KindRun) -> Iterator[dict[str, object]]:
        return self.part("run")(cases, context)


KINDS: tuple[CaseKind, ...] = (
    CaseKind(
        name="kernel",
        cases="perfsuite.cases.kernel:kernel_cases",
        unit="perfsuite.cases.kernel:unit",
        run="perfsuite.cases.kernel:run",
        sections="perfsuite.report.kernel_sections:kind_sections",
        rows="perfsuite.cases.kernel:rows",
    ),
    CaseKind(
        name="tensor_parallel",
        cases="perfsuite.cases.tensor_parallel.tp_runner:tp_cases",
        unit="perfsuite.cases.tensor_parallel.tp_runner:unit",
        run="perfsuite.cases.tensor_parallel.launch:run",
        sections="perfsuite.report.tp_section:kind_sections",
        baseline="allgather_full_softmax",
        rows="perfsuite.cases.tensor_parallel.tp_runner:rows",
        noun="tensor-parallel",
    ),
    CaseKind(
        name="draft",
        cases="perfsuite.cases.draft.draft_table:expand_draft",
        unit="perfsuite.cases.draft.draft_runner:unit",
        run="perfsuite.cases.draft.draft_runner:run",
        sections="perfsuite.report.draft_section:kind_sections",
        table="draft",
        log="draft.jsonl",
        table_file="draft.csv",
    ),
    CaseKind(
        name="edge_cases",
        cases="perfsuite.cases.edge_matrix:cases",
        unit="perfsuite.cases.edge_matrix:unit",
        run="perfsuite.cases.edge_matrix:run",
        sections="perfsuite.report.edge_case_section:kind_sections",
        log="edge_cases.jsonl",
        table_file="edge_cases.csv",
        noun="edge-case matrix",
    ),
)


def get(name: str) -> CaseKind:
    """The kind called `name`."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise KeyError(f"no case kind {name!r}; kinds: {', '.join(k.name for k in KINDS)}")


def tables() -> tuple[str, ...]:
    """The scenario tables the kinds read, `[[sweep]]` first."""
    return tuple(dict.fromkeys(kind.table for kind in KINDS))


def logs() -> tuple[str, ...]:
    """The run folder's row logs, one per group of kinds that share one, in run order."""
    return tuple(dict.fromkeys(kind.log for kind in KINDS))


def table_files() -> tuple[str, ...]:
    """The tables written from the logs (results.csv, draft.csv, edge_cases.csv)."""
    return tuple(dict.fromkeys(kind.table_file for kind in KINDS))


def sharing(log: str) -> tuple[CaseKind, ...]:
    """The kinds whose rows go to `log`."""
    return tuple(kind for kind in KINDS if kind.log == log)


def rows_of(kind: CaseKind, frame: Any) -> Any:
    """The rows of `frame` (read from `kind.log`) that are `kind`'s: all of them when it has the log alone."""
    if kind.rows is None or len(sharing(kind.log)) == 1 or frame.empty:
        return frame
    return frame[kind.part("rows")(frame)]

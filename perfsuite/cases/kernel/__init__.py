"""The kernel case kind (`core.kinds`): one selector call on one device, from the `[[sweep]]` tables, run a
shape at a time: the variants of one shape and path are sampled in turn (`KernelRunner.run_in_turn`), so
each one's speedup pairs with the baseline's samples of the same seconds."""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.cases.tensor_parallel.tp_runner import is_tensor_parallel
from perfsuite.cases.tensor_parallel.tp_runner import rows as tensor_parallel_rows
from perfsuite.core.console import progress_bar
from perfsuite.core.kinds import KindRun
from perfsuite.scenario.load import Case, Scenario, expand


def kernel_cases(scenario: Scenario) -> list[Case]:
    """The scenario's single-device cases, in sweep order."""
    return [case for case in expand(scenario) if not is_tensor_parallel(case)]


def unit(case: Case) -> tuple:
    """The cases sampled in turn (one shard's unit): the variants of one shape, dtype, logits, k and path."""
    return (case.tp, case.input_key, case.topk, case.path)


def run(cases: list[Case], context: KindRun) -> Iterator[dict[str, object]]:
    """The rows of `cases`, grouped by `unit` in first-seen order, each group's rows as it finishes."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(unit(case), []).append(case)
    runner = KernelRunner(context.info, context.env, counters=context.counters)
    for group in progress_bar(list(groups.values()), context.progress, unit="shape"):
        yield from runner.run_in_turn(group)


def rows(frame: pd.DataFrame) -> pd.Series:
    """Which rows of results.jsonl are kernel rows: those that are not tensor parallel."""
    return ~tensor_parallel_rows(frame)

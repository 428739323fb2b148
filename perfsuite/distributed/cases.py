"""Tensor-parallel cases of a scenario file: load it, pick the cases with tp == N.

[[sweep]]
variants = ["allgather_full_softmax", "allgather_identity", "sharded_torch", "sharded_triton"]
tp = [2, 4]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from perfsuite.scenario import load as scenarios
from perfsuite.scenario.load import Case, Scenario


def load(path: str | Path) -> Scenario:
    """The scenario file (its validation knows the tensor-parallel variant names)."""
    return scenarios.load(path)


def select(scenario: Scenario, tp: int, case_ids: Iterable[str] | None = None) -> list[Case]:
    """The scenario's cases with `case.tp == tp` (only those in `case_ids` when given), in sweep order."""
    wanted = None if case_ids is None else set(case_ids)
    return [
        case
        for case in scenarios.expand(scenario)
        if case.tp == tp and (wanted is None or case.case_id in wanted)
    ]

"""The edge-case matrix case kind (`core.kinds`): what the scenario's single-device selectors return on
non-finite, tied and misaligned rows, beside full_softmax (`correctness.edge_cases`). A case is one dtype
and k; its rows (per row pattern and variant) go to `edge_cases.csv`. One shard runs the whole matrix."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from perfsuite.core import dtypes
from perfsuite.core.kinds import KindRun
from perfsuite.correctness import edge_cases
from perfsuite.scenario.load import Scenario
from perfsuite.variants.tensor_parallel import is_tp_variant


@dataclass(frozen=True)
class EdgeCase:
    """The matrix's rows for one dtype and k, for these variants (and the baseline)."""

    dtype: str
    topk: int
    variants: tuple[str, ...]

    @property
    def case_id(self) -> str:
        return f"edge/{self.dtype}/k{self.topk}"


def cases(scenario: Scenario) -> list[EdgeCase]:
    """One case per dtype of the sweeps and k of `EDGE_TOPK`, for their single-device variants (if any)."""
    names = tuple(dict.fromkeys(v for s in scenario.sweeps for v in s.variants if not is_tp_variant(v)))
    found = dict.fromkeys(dtypes.dtype_name(dtypes.dtype_of(d)) for s in scenario.sweeps for d in s.dtypes)
    return [EdgeCase(d, k, names) for d in found for k in edge_cases.EDGE_TOPK] if names else []


def unit(case: EdgeCase) -> str:
    """The matrix runs whole, in one shard."""
    return "edge-case matrix"


def run(todo: list[EdgeCase], context: KindRun) -> Iterator[dict[str, object]]:
    """Each case's rows, as its dtype and k finish."""
    for case in todo:
        device, dtype = context.info.device, dtypes.dtype_of(case.dtype)
        for row in edge_cases.matrix([dtype], [case.topk], case.variants, device).to_dict("records"):
            yield {"case_id": case.case_id, **row}

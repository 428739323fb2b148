"""`triton_fused`: exact top-k softmax in one Triton pass over the logits, one program per row.

Online softmax and a running top-k in fp32, writing only the `[B, k]` outputs. Order: descending logit,
lowest index first, NaN above +inf; `topk_p` NaN for a row holding a NaN or +inf or all -inf
(docs/triton.md). The Triton variants' shared parts: `run_planned`, `triton_variant`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from perfsuite.kernels import availability, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import PlanFor, Variant, ideal_traffic


def run_planned(plan_for: PlanFor, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch `plan_for`'s plan for the logits' shape on their device (every Triton variant's `select`)."""
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def triton_variant(plan_for: PlanFor, tuned: PlanFor | None = None, **given: Any) -> Variant:
    """A Triton variant on `plan_for`'s plans: its `select` launches them (`run_planned`), lowest index
    first on ties, NaN above every number (as torch.argmax / torch.topk); its `launch` describes the plan
    and, with `tuned` (the tuned entry a shape's plan comes from, None where none is near), where it came
    from: the device's tuned table or the heuristic."""

    def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
        hw = plans.hardware()
        plan = plan_for(batch, vocab, k, dtype, hw).describe()
        if tuned is None:
            return plan
        return f"{plan} ({'tuned' if tuned(batch, vocab, k, dtype, hw) is not None else 'heuristic'})"

    return Variant(
        select=functools.partial(run_planned, plan_for),
        plan_for=plan_for,
        nan="largest",
        lowest_index_ties=True,
        available=availability,
        untimed=untimed,
        launch=launch,
        **given,
    )


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite warm` compiles it ahead)."""
    return plans.fused_plan(hw, dtype.itemsize)


VARIANT = triton_variant(
    plan_for,
    name="triton_fused",
    accuracy="exact",
    traffic=ideal_traffic,  # one read of the logits, `[B, k]` fp32 + int64 written; nothing materialized
    summary="Triton, one program per row, one pass: online softmax + running top-k (exact, no temporaries)",
)

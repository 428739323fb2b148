"""`triton_auto`: the exact Triton kernel (fused or split, with its tunables) picked by shape.

The device's tuned plan for the nearest shape `perfsuite tune` measured on this GPU
(`kernels.plan_table`), else `plans.choose`: split while the batch leaves most SMs idle and the row is
long enough to split, fused otherwise. Results and non-finite semantics are `triton_fused`'s and
`triton_split`'s, which agree.
"""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, plan_table, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, ideal_traffic
from perfsuite.variants.triton_split import split_traffic


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite warm` compiles it ahead)."""
    return plan_table.best_plan(batch, vocab, k, dtype, hw)


def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
    """The plan, and where it came from: the device's tuned table or the heuristic."""
    hw = plans.hardware()
    source = "tuned" if plan_table.table_for(hw.name) else "heuristic"
    return f"{plan_for(batch, vocab, k, dtype, hw).describe()} ({source})"


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The chosen kernel's traffic (plan for the current device, 132 SMs without one)."""
    plan = plan_for(batch, vocab, k, dtype, plans.hardware())
    if plan.kernel != "split":
        return ideal_traffic(batch, vocab, k, dtype)
    return split_traffic(batch, vocab, k, dtype, plans.partial_bytes(batch, plan.n_splits, k))


VARIANT = Variant(
    name="triton_auto",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="Triton, fused or split picked by shape and SM count (the fastest exact kernel by heuristic)",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=True,
    available=availability,
    untimed=untimed,
    launch=launch,
    held_against="triton_argmax",
)

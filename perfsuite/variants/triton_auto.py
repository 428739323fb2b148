"""`triton_auto`: the exact Triton kernel (fused or split, with its tunables) picked by shape: the device's
tuned plan for the nearest shape `perfsuite tune` measured (within `plan_table.MAX_OCTAVES`), else
`plans.choose` (split while the batch leaves most SMs idle and the row is long enough). Results:
`triton_fused`'s.
"""

from __future__ import annotations

import torch

from perfsuite.kernels import plan as plans
from perfsuite.kernels import plan_table
from perfsuite.variants.base import Traffic, ideal_traffic
from perfsuite.variants.triton_fused import triton_variant
from perfsuite.variants.triton_split import split_traffic


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite warm` compiles it ahead)."""
    return plan_table.best_plan(batch, vocab, k, dtype, hw)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The chosen kernel's traffic (plan for the current device, 132 SMs without one)."""
    plan = plan_for(batch, vocab, k, dtype, plans.hardware())
    if plan.kernel != "split":
        return ideal_traffic(batch, vocab, k, dtype)
    return split_traffic(batch, vocab, k, dtype, plans.partial_bytes(batch, plan.n_splits, k))


VARIANT = triton_variant(
    plan_for,
    plan_table.tuned_entry,
    name="triton_auto",
    accuracy="exact",
    traffic=traffic,
    summary="Triton, fused or split picked by shape and SM count (the fastest exact kernel by heuristic)",
    held_against="triton_argmax",
)

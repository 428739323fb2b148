"""`triton_auto`: the exact Triton kernel (fused or split, with its tunables) picked by shape."""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, plan_table, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, ideal_traffic
from perfsuite.variants.triton_split import split_traffic


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The device's tuned plan for the nearest tuned shape where `perfsuite tune` has measured this GPU
    (`perfsuite.kernels.plan_table`); else `plans.choose` by batch, vocabulary, k and the device's SMs: split
    while the batch leaves most SMs idle and the row is long enough to split, fused otherwise.

    Results (indices exactly, probabilities within fp32 rounding) and non-finite semantics are those of
    `triton_fused` / `triton_split`, which agree: NaN ranks above +inf (the first NaN wins), then +inf,
    finite values, -inf; indices always in `[0, V)`; `topk_p` NaN for rows with a NaN or +inf, or all -inf.
    """
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite.tools.warm` compiles it ahead)."""
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
)

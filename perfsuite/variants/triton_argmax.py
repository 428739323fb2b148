"""`triton_argmax`: the Triton argmax on the exact kernels' plans: one pass, no softmax, `topk_p = 1.0`."""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, plan_table, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, swept
from perfsuite.variants.cache import sweep

SELECTION: plans.Selection = "argmax"


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first maximum of each row (k = 1), and the constant `topk_p = 1.0`: what an engine's draft step
    runs at topk 1 when it needs no probability.

    Plans: those of `triton_auto` (fused one program per row, or split over `(B, n_splits)` programs and
    merged, by shape and SM count; a device's tuned table where `perfsuite tune` measured the argmax
    kernels), the same tiles and 16-byte aligned loads: a masked head, unmasked tiles, a masked vector
    tail, so no index is ever >= V (V = 151666 included). One read of the logits: per lane the largest
    order key (no exp, no sum); row offsets in int64. Ties: the lowest index. NaN policy: NaN wins, as in
    torch.argmax and the exact Triton kernels (the order is NaN, lowest index first, then +inf, finite
    values, -inf; an all -inf row gives 0), so the index equals `triton_auto`'s top-1 on every row.
    """
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw`: the tuned argmax plan, else the heuristic's."""
    return plan_table.best_plan(batch, vocab, 1, dtype, hw, SELECTION)


def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
    """The plan, and where it came from: the device's tuned argmax entries or the heuristic."""
    hw = plans.hardware()
    source = "tuned" if plan_table.is_tuned(hw.name, SELECTION) else "heuristic"
    return f"{plan_for(batch, vocab, k, dtype, hw).describe()} ({source})"


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """One read of the logits, `[B, 1]` int64 + fp32 written; split plans add one int64 per split,
    written by stage 1 and read back by the merge (cacheable)."""
    logits = batch * vocab * dtype.itemsize
    outputs = Traffic(0, batch * k * (8 + 4))
    plan = plan_for(batch, vocab, k, dtype, plans.hardware())
    if plan.kernel != "split":
        return Traffic(logits, 0) + outputs
    partials = plans.argmax_partial_bytes(batch, plan.n_splits)
    stage1 = sweep({"logits": logits}, {"candidates": partials})
    return swept(stage1, sweep({"candidates": partials})) + outputs


VARIANT = Variant(
    name="triton_argmax",
    select=select,
    accuracy="inexact",
    traffic=traffic,
    summary="Triton argmax on triton_auto's plans, one pass, topk_p = 1.0; lowest index, NaN wins (inexact)",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=True,
    available=availability,
    untimed=untimed,
    launch=launch,
    max_k=1,
)

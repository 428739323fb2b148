"""`triton_argmax`: the Triton argmax on the exact kernels' plans: one pass, no softmax, `topk_p = 1.0`.

What an engine's draft step runs at topk 1 when it needs no probability: `triton_auto`'s plans (a tuned
table's argmax entries where `perfsuite tune` measured them), tiles and 16-byte aligned loads with masked
head and tail (no index >= V, V = 151666 included); per lane the largest order key, no exp, no sum. Ties:
the lowest index; NaN wins, as in torch.argmax and the exact kernels, so the index is `triton_auto`'s top-1.
"""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, plan_table, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, swept
from perfsuite.variants.cache import sweep


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw`: the tuned argmax plan, else the heuristic's."""
    return plan_table.best_plan(batch, vocab, 1, dtype, hw, "argmax")


def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
    """The plan, and where it came from: the device's tuned argmax entries or the heuristic."""
    hw = plans.hardware()
    source = "tuned" if plan_table.is_tuned(hw.name, "argmax") else "heuristic"
    return f"{plan_for(batch, vocab, k, dtype, hw).describe()} ({source})"


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """One read of the logits, `[B, 1]` int64 + fp32 written; a split plan adds one int64 per split,
    written by stage 1 and read back by the merge (cacheable)."""
    logits, outputs = batch * vocab * dtype.itemsize, Traffic(0, batch * k * (8 + 4))
    plan = plan_for(batch, vocab, k, dtype, plans.hardware())
    if plan.kernel != "split":
        return Traffic(logits, 0) + outputs
    partials = batch * plan.n_splits * 8  # one packed int64 candidate (key, column) per split
    return (
        swept(sweep({"logits": logits}, {"candidates": partials}), sweep({"candidates": partials})) + outputs
    )


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

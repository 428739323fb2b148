"""`triton_argmax`: the Triton argmax on the exact kernels' plans: one pass, no softmax, `topk_p = 1.0`.

What an engine's draft step runs at topk 1 when it needs no probability, on `triton_auto`'s plans (a tuned
table's argmax entries where `perfsuite tune` measured them; docs/triton.md). Ties: the lowest index; NaN
wins, as in torch.argmax and the exact kernels, so the index is `triton_auto`'s top-1.
"""

from __future__ import annotations

import torch

from perfsuite.kernels import plan as plans
from perfsuite.kernels import plan_table
from perfsuite.variants.base import Traffic, swept
from perfsuite.variants.cache import sweep
from perfsuite.variants.triton_fused import triton_variant


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw`: the tuned argmax plan, else the heuristic's."""
    return plan_table.best_plan(batch, vocab, 1, dtype, hw, "argmax")


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """One read of the logits, `[B, 1]` outputs; a split plan's int64 per split, read back (cacheable)."""
    logits, outputs = batch * vocab * dtype.itemsize, Traffic(0, batch * k * (8 + 4))
    plan = plan_for(batch, vocab, k, dtype, plans.hardware())
    if plan.kernel != "split":
        return Traffic(logits, 0) + outputs
    partials = batch * plan.n_splits * 8  # one packed int64 candidate (key, column) per split
    return (
        swept(sweep({"logits": logits}, {"candidates": partials}), sweep({"candidates": partials})) + outputs
    )


VARIANT = triton_variant(
    plan_for,
    lambda batch, vocab, k, dtype, hw: plan_table.tuned_entry(batch, vocab, 1, dtype, hw, "argmax"),
    name="triton_argmax",
    accuracy="inexact",
    traffic=traffic,
    summary="Triton argmax on triton_auto's plans, one pass, topk_p = 1.0; lowest index, NaN wins (inexact)",
    max_k=1,
)

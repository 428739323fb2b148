"""`triton_fused`: exact top-k softmax in one Triton pass over the logits, one program per row.

Online softmax (running max, per-lane sums of exp rescaled when the max grows) and a running top-k that
only the tiles beating the current k-th candidate update, in fp32 for fp32/fp16/bf16 inputs; writes only
the `[B, k]` outputs. Order: descending logit, lowest index first, NaN above +inf; `topk_p` NaN for a row
holding a NaN or +inf (as torch's softmax) or all -inf (docs/triton.md).
"""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Variant, ideal_traffic


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite warm` compiles it ahead)."""
    return plans.fused_plan(hw, dtype.itemsize)


def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
    return plan_for(batch, vocab, k, dtype, plans.hardware()).describe()


VARIANT = Variant(
    name="triton_fused",
    select=select,
    accuracy="exact",
    traffic=ideal_traffic,  # one read of the logits, `[B, k]` fp32 + int64 written; nothing materialized
    summary="Triton, one program per row, one pass: online softmax + running top-k (exact, no temporaries)",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=True,
    available=availability,
    untimed=untimed,
    launch=launch,
)

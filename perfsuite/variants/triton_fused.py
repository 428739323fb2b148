"""`triton_fused`: exact top-k softmax in one Triton pass over the logits, one program per row."""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, ideal_traffic


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One program per row streams it once: online softmax (running max, per-lane sums of exp rescaled when
    the max grows) and a running top-k that only tiles beating the current k-th candidate update.

    Order: descending logit, lowest index first, decided on integer keys in the kernel. Writes only the
    `[B, k]` outputs, no `[B, V]` temporary; fp32 arithmetic for fp32/fp16/bf16 inputs. Non-finite rows:
    NaN ranks above +inf (the first NaN wins, then the next ones by index), then +inf, finite values, -inf;
    indices always lie in `[0, V)` (an all -inf row gives 0..k-1). `topk_p` is NaN for the whole row when it
    holds a NaN or +inf (as torch's softmax) or is all -inf; -inf entries of a finite row get 0.
    """
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite.tools.warm` compiles it ahead)."""
    return plans.fused_plan(hw, dtype.itemsize)


def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
    return plan_for(batch, vocab, k, dtype, plans.hardware()).describe()


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The ideal: one read of the logits, `[B, k]` fp32 + int64 written; nothing materialized."""
    return ideal_traffic(batch, vocab, k, dtype)


VARIANT = Variant(
    name="triton_fused",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="Triton, one program per row, one pass: online softmax + running top-k (exact, no temporaries)",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=True,
    available=availability,
    untimed=untimed,
    launch=launch,
)

"""`triton_auto`: the exact Triton kernel (fused or split, with its tunables) picked by shape."""

from __future__ import annotations

import torch

from perfsuite.kernels import availability
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, ideal_traffic


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`plans.choose` by batch, vocabulary, k and the device's SM count: split while the batch leaves most
    SMs idle (B <= SPLIT_MAX_BATCH_FRACTION * SMs) and the row is long enough to split, fused otherwise.

    Results (indices exactly, probabilities within fp32 rounding) and non-finite semantics are those of
    `triton_fused` / `triton_split`, which agree: NaN ranks above +inf (the first NaN wins), then +inf,
    finite values, -inf; indices always in `[0, V)`; `topk_p` NaN for rows with a NaN or +inf, or all -inf.
    """
    from perfsuite.kernels import topk_softmax

    return topk_softmax.run_plan(logits, k, plans.choose(*logits.shape, k, plans.sm_count(logits.device)))


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The chosen kernel's traffic (plan for the current device, 132 SMs without one)."""
    sms = plans.sm_count(torch.device("cuda") if torch.cuda.is_available() else None)
    plan = plans.choose(batch, vocab, k, sms)
    partials = plans.partial_bytes(batch, plan.n_splits, k) if plan.kernel == "split" else 0
    return ideal_traffic(batch, vocab, k, dtype) + Traffic(partials, partials)


VARIANT = Variant(
    name="triton_auto",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="Triton, fused or split picked by shape and SM count (the fastest exact kernel by heuristic)",
    lowest_index_ties=True,
    available=availability,
)

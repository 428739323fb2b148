"""`identity`: exact probabilities from the logits, `softmax(x)[i] = exp(x_i - max) / sum(exp(x - max))`."""

from __future__ import annotations

import torch

from perfsuite.variants.base import Traffic, Variant, elementwise
from perfsuite.variants.ordering import topk_lowest_index


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of the logits, then `exp(v - m) / sum(exp(x - m))` in fp32 (k == 1: `1 / sum(exp(x - m))`).

    Written with torch ops, as an engine would: no `[B, V]` probability tensor, but eager torch still
    materializes one `[B, V]` fp32 temporary for `exp(x - m)` (the sum cannot be fused without a kernel
    or `torch.compile`). Ties: lowest index first. Non-finite rows: a NaN or +inf anywhere makes the row's
    probabilities NaN (as full_softmax does); an all -inf row gives NaN; indices stay inside `[0, V)`.
    """
    values, topk_index = topk_lowest_index(logits, k)
    row_max = values[:, :1].float()
    shifted = logits - row_max  # promotes to fp32: the one [B, V] temporary
    sum_exp = shifted.exp_().sum(dim=-1, keepdim=True)
    topk_p = torch.exp(values.float() - row_max) / sum_exp
    return topk_p, topk_index


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """Top-k pass (plus the tie repair's compare and count for k > 1), and the fp32 exp/sum temporary."""
    n, size = batch * vocab, dtype.itemsize
    selection = Traffic(n * size, batch * k * (size + 8))
    if k > 1:  # x == kth (bool), cumsum (int32)
        selection = selection + elementwise(n, size, 1) + elementwise(n, 1, 4, temp=True)
    shift = elementwise(n, size, 4, temp=True)
    exp_sum = elementwise(n, 4, 4) + elementwise(n, 4, 0)
    return selection + shift + exp_sum + Traffic(batch * k * 8, batch * k * 4)


VARIANT = Variant(
    name="identity",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="max/topk of logits, then exp(v - max) / sum(exp(x - max)) in fp32, torch ops",
)

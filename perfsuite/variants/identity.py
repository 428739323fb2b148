"""`identity`: exact probabilities from the logits, `softmax(x)[i] = exp(x_i - max) / sum(exp(x - max))`,
the top-k in the suite's order (lowest index first on ties)."""

from __future__ import annotations

import torch

from perfsuite.variants.base import Traffic, Variant, swept
from perfsuite.variants.cache import sweep
from perfsuite.variants.ordering import topk_lowest_index


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k of the logits, ties to the lowest index, then `probabilities`.

    Written with torch ops, as an engine would: no `[B, V]` probability tensor, but eager torch still
    materializes one `[B, V]` fp32 temporary for `exp(x - m)`. Non-finite rows: a NaN or +inf anywhere
    makes the row's probabilities NaN (as full_softmax does), an all -inf row too; indices stay in `[0, V)`.
    """
    values, topk_index = topk_lowest_index(logits, k)
    return probabilities(logits, values), topk_index


def probabilities(logits: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`exp(v - m) / sum(exp(x - m))` in fp32 for the selected logits `values` `[B, k]`, sorted descending
    (`values[:, 0]` is the row max `m`): exact at any finite magnitude, unlike `exp(v - logsumexp(x))`,
    which adds `log(sum)` to a huge max and rounds it away."""
    row_max = values[:, :1].float()
    shifted = logits - row_max  # promotes to fp32: the one [B, V] temporary
    return torch.exp(values.float() - row_max) / shifted.exp_().sum(dim=-1, keepdim=True)


def selection_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """`torch.max` (k == 1) or `torch.topk`: one read of the logits, `[B, k]` values and indices written."""
    logits = sweep({"logits": batch * vocab * dtype.itemsize})
    return swept(logits) + Traffic(0, batch * k * (dtype.itemsize + 8))


def tie_repair_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The lowest-index repair for k > 1: `x == kth` (reads the logits, writes bools) and the int32
    cumulative count over them (the `[B, V]` temporary); none for k == 1."""
    if k == 1:
        return Traffic(0, 0)
    n = batch * vocab
    compare = sweep({"logits": n * dtype.itemsize}, {"ties": n})
    return swept(compare, sweep({"ties": n}, {"tied_rank": n * 4}), temp=n * 4)


def probability_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """`probabilities`: the fp32 `x - m` temporary, its in-place exp, the sum, and the `[B, k]` outputs."""
    n = batch * vocab
    shift = sweep({"logits": n * dtype.itemsize}, {"shifted": n * 4})
    exp = sweep({"shifted": n * 4}, {"shifted": n * 4})
    return swept(shift, exp, sweep({"shifted": n * 4}), temp=n * 4) + Traffic(batch * k * 8, batch * k * 4)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """Top-k pass, the tie repair's compare and count for k > 1, and the fp32 exp/sum temporary."""
    shape = (batch, vocab, k, dtype)
    return selection_traffic(*shape) + tie_repair_traffic(*shape) + probability_traffic(*shape)


VARIANT = Variant(
    name="identity",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="max/topk of logits, ties to the lowest index, then exp(v - max) / sum(exp(x - max)) in fp32",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    role="torch exact",
)

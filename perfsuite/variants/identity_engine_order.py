"""`identity_engine_order`: the exact identity in torch's top-k order, the order an engine's own
`torch.topk` gives, without `identity`'s lowest-index tie repair."""

from __future__ import annotations

import torch

from perfsuite.variants.base import Traffic, Variant
from perfsuite.variants.identity import probabilities, probability_traffic, selection_traffic


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.max` (k == 1) or `torch.topk` of the logits, then `exp(v - m) / sum(exp(x - m))` in fp32.

    `identity`'s exact probabilities without its tie repair: which logits equal to the k-th value make the
    cut, and their order, are torch's (a GPU's `torch.topk` need not pick the lowest indices). At k == 1
    `torch.max` returns the first maximum: the two identities run the same ops. Non-finite rows as `identity`.
    """
    if k == 1:
        values, topk_index = torch.max(logits, dim=-1, keepdim=True)
    else:
        values, topk_index = torch.topk(logits, k, dim=-1, sorted=True)
    return probabilities(logits, values), topk_index


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """`identity`'s traffic without the tie repair: the top-k pass and the fp32 exp/sum temporary."""
    shape = (batch, vocab, k, dtype)
    return selection_traffic(*shape) + probability_traffic(*shape)


VARIANT = Variant(
    name="identity_engine_order",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="identity in torch's top-k order (ties as torch.topk gives them, no repair pass), torch ops",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=False,
    engine_order_of="identity",
)

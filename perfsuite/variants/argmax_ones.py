"""`argmax_ones`: the shortcut that was shipped and reverted (argmax over logits, `topk_p = 1.0`)."""

from __future__ import annotations

import torch

from perfsuite.variants.base import Traffic, Variant


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang PR 26235: `topk_index = argmax(logits)`, `topk_p = 1.0`; k > 1 takes `topk` of the logits.

    Same tokens as the logits order, but every consumer of the scores (tree score products, log-prob
    floors, MTP paths) sees 1.0: inexact by declaration. Ties: `max`'s first maximum, `topk`'s own order.
    """
    topk_index = torch.argmax(logits, -1, keepdim=True) if k == 1 else torch.topk(logits, k, dim=-1).indices
    return torch.ones(topk_index.shape, dtype=torch.float32, device=logits.device), topk_index


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """One read of the logits; writes indices (plus topk's values for k > 1) and the constant ones."""
    values = batch * k * dtype.itemsize if k > 1 else 0
    return Traffic(batch * vocab * dtype.itemsize, batch * k * (8 + 4) + values)


VARIANT = Variant(
    name="argmax_ones",
    select=select,
    accuracy="inexact",
    traffic=traffic,
    summary="argmax / topk over logits with topk_p = 1.0: the reverted shortcut (inexact probabilities)",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=False,
    role="shortcut",
)

"""`full_softmax`: the engines' baseline, softmax over the whole vocabulary, then max / top-k."""

from __future__ import annotations

import torch

from perfsuite.variants.base import Traffic, Variant, swept
from perfsuite.variants.cache import sweep


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """SGLang's `draft_forward`: `probs = softmax(logits)` in the input dtype, then `fast_topk(probs, k)`.

    Ties follow torch: `max` returns the first maximum of the *rounded* probabilities; `topk`'s order among
    equal probabilities is unspecified. Non-finite rows give NaN probabilities, as torch's softmax does.
    """
    probs = torch.softmax(logits, dim=-1)
    if k == 1:
        topk_p, topk_index = torch.max(probs, dim=-1, keepdim=True)
    else:
        topk_p, topk_index = torch.topk(probs, k, dim=-1)
    return topk_p.float(), topk_index


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """softmax writes `[B, V]` probabilities that max / topk read back (cacheable); the outputs, upcast."""
    n, size = batch * vocab, dtype.itemsize
    softmax = sweep({"logits": n * size}, {"probs": n * size})
    selection = sweep({"probs": n * size})
    outputs = Traffic(0, batch * k * (size + 8))
    upcast = Traffic(batch * k * size, batch * k * 4) if size != 4 else Traffic(0, 0)
    return swept(softmax, selection, temp=n * size) + outputs + upcast


VARIANT = Variant(
    name="full_softmax",
    select=select,
    accuracy="rounded",
    traffic=traffic,
    summary="softmax(logits) in the input dtype, then max (k=1) or topk: the engines' baseline",
    lowest_index_ties=False,
)

"""Top-k of logits in the suite's total order: descending value, ties broken by the lowest index."""

from __future__ import annotations

import torch


def canonical_order(values: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-sort a `[B, k]` selection by (value descending, index ascending); cheap, k-sized."""
    by_index = torch.argsort(indices, dim=-1)
    values, indices = values.gather(-1, by_index), indices.gather(-1, by_index)
    by_value = torch.sort(values, dim=-1, descending=True, stable=True).indices
    return values.gather(-1, by_value), indices.gather(-1, by_value)


def topk_lowest_index(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`torch.topk` with the suite's tie rule, without a host sync (safe inside a graph capture).

    `torch.topk` returns every element strictly above the k-th value, but which of the elements *equal*
    to it make the cut is unspecified. The repair finds the lowest-index tied elements with one
    comparison pass and a cumulative count over the row, and places them in the tied slots.
    For k == 1 `torch.max` already returns the first maximum.
    """
    if k == 1:
        values, indices = torch.max(x, dim=-1, keepdim=True)
        return values, indices
    values, indices = torch.topk(x, k, dim=-1, sorted=True)
    kth = values[:, -1:]
    # Slots before the tied block are always right (NaN ranks above every number, as in torch.sort).
    strictly_above = (values != kth).sum(-1, keepdim=True)
    tied_rank = torch.cumsum(x == kth, dim=-1, dtype=torch.int32)  # 1-based rank of each tie
    slot = torch.arange(k, device=x.device).expand_as(indices)
    wanted_rank = (slot - strictly_above + 1).to(torch.int32)
    tied_index = torch.searchsorted(tied_rank, wanted_rank.contiguous())  # first column reaching rank
    repair = (slot >= strictly_above) & (tied_index < x.shape[-1])  # NaN rows have no ties: keep topk
    indices = torch.where(repair, tied_index, indices)
    return canonical_order(values, indices)

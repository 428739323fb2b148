"""Per-rank softmax partials on the wire, and their exact merge with torch ops.

A rank's partial of a row summarises its columns: max `m`, `s = sum(exp(x - m))`, its top-k values and
global indices. Softmax is exact from these: `M = max_r m_r`, `S = sum_r s_r * exp(m_r - M)`, and the
global top-k is the best k of the ranks' candidates in the suite's order (descending logit, lowest
index first), with `topk_p = exp(v - M) / S`. All-gathering `B x parts x (2 + 2k)` numbers per rank
replaces all-gathering `B x V / tp` logits.

Wire format: int32 `[B, parts, 2 + 2k]`: fp32 bits of (max, sum-exp, k values), then k int32 global
indices. Empty slots (a part narrower than k, a rank without columns) hold value -inf and index -1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perfsuite.variants.ordering import canonical_order, topk_lowest_index

EMPTY_INDEX = -1
_SORT_LAST = 2**62  # empty slots sort after every real candidate, including -inf ones


def wire_width(k: int) -> int:
    return 2 + 2 * k


def empty_wire(batch: int, parts: int, k: int, device: torch.device) -> torch.Tensor:
    """Partials of no columns: max -inf, sum 0, every slot empty."""
    floats = torch.full((batch, parts, 2 + k), float("-inf"), device=device)
    floats[..., 1] = 0.0
    index = torch.full((batch, parts, k), EMPTY_INDEX, dtype=torch.int32, device=device)
    return torch.cat([floats.view(torch.int32), index], dim=-1)


def pack(
    row_max: torch.Tensor, sumexp: torch.Tensor, values: torch.Tensor, index: torch.Tensor, k: int, parts: int
) -> torch.Tensor:
    """Wire `[B, parts, 2 + 2k]` from `[B, P]` max / sum-exp and `[B, P, kk]` values / global indices.

    Slots past `kk` and parts past `P` are filled empty (ranks must send equal shapes).
    """
    batch, n, kk = values.shape
    floats = torch.cat([row_max.float()[..., None], sumexp.float()[..., None], values.float()], dim=-1)
    index = index.to(torch.int32)
    if kk < k:
        floats = F.pad(floats, (0, k - kk), value=float("-inf"))
        index = F.pad(index, (0, k - kk), value=EMPTY_INDEX)
    wire = torch.cat([floats.view(torch.int32), index], dim=-1)
    if n < parts:
        wire = torch.cat([wire, empty_wire(batch, parts - n, k, wire.device)], dim=1)
    return wire


def unpack(wire: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max fp32 `[...]`, sum-exp fp32 `[...]`, values fp32 `[..., k]`, indices int64 `[..., k]`) views."""
    k = (wire.shape[-1] - 2) // 2
    floats = wire[..., : 2 + k].view(torch.float32)
    return floats[..., 0], floats[..., 1], floats[..., 2:], wire[..., 2 + k :].to(torch.int64)


def torch_partial(logits: torch.Tensor, k: int, index_offset: int) -> torch.Tensor:
    """One part per row over a rank's `[B, w]` columns, with torch ops: wire `[B, 1, 2 + 2k]`.

    Top-k of the logits (lowest index first), max = the first value (NaN when the row holds one), and
    `sum(exp(x - max))` in fp32 (0 for an all -inf shard, NaN with a NaN or +inf).
    """
    batch, width = logits.shape
    if width == 0:
        return empty_wire(batch, 1, k, logits.device)
    values, index = topk_lowest_index(logits, min(k, width))
    row_max = values[:, :1].float()
    shift = row_max.masked_fill(row_max == float("-inf"), 0.0)
    sumexp = (logits - shift).exp_().sum(dim=-1, keepdim=True)  # fp32: the one [B, w] temporary
    return pack(row_max, sumexp, values[:, None, :], (index + index_offset)[:, None, :], k, 1)


def interleave(gathered: torch.Tensor) -> torch.Tensor:
    """`[tp, B, parts, W]` gathered wires to `[B, tp * parts, W]`, ranks in column order."""
    tp, batch, parts, width = gathered.shape
    return gathered.permute(1, 0, 2, 3).reshape(batch, tp * parts, width)


def merge(wire: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact `(topk_p, topk_index)` from `[B, n, 2 + 2k]` partials of disjoint column ranges, torch ops.

    NaN semantics follow torch: a NaN or +inf anywhere in the row makes its `topk_p` NaN, an all -inf
    row gives NaN; indices are real columns (NaN ranks first, then by value, lowest index on ties).
    """
    row_max, sumexp, values, index = unpack(wire)
    batch = wire.shape[0]
    top = row_max.max(dim=1, keepdim=True).values  # NaN when a part saw a NaN
    scale = torch.exp(row_max - top).masked_fill(row_max == float("-inf"), 0.0)
    total = (sumexp * scale).sum(dim=1, keepdim=True)
    values, index = values.reshape(batch, -1), index.reshape(batch, -1)
    values, index = canonical_order(values, index.masked_fill(index < 0, _SORT_LAST))
    values, index = values[:, :k], index[:, :k]
    return torch.exp(values - top) / total, index

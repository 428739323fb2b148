"""The merge-partials variants: each rank's partials, one small all-gather, an exact merge on every rank
(`sharded_torch`: torch ops; `sharded_triton`: the split kernel's stages). Format: docs/tensor-parallel.md.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from perfsuite import variants
from perfsuite.kernels import availability
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, ideal_traffic
from perfsuite.variants.ordering import canonical_order, topk_lowest_index
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, VocabSlice, padded_width

WIRE_BYTES = 4  # every number of a partial travels as 32 bits: fp32 max, sum and values, int32 column
_SORT_LAST = 2**62  # empty slots sort after every real candidate, including -inf ones


def wire_bytes(batch: int, k: int, parts: int = 1) -> int:
    """One rank's partials on the wire: per row and part, max, sum-exp, k values and k global indices."""
    return batch * parts * (2 + 2 * k) * WIRE_BYTES


def pack(
    row_max: torch.Tensor, sumexp: torch.Tensor, values: torch.Tensor, index: torch.Tensor, k: int, parts: int
) -> torch.Tensor:
    """int32 wire `[B, parts, 2 + 2k]` from `[B, P]` max / sum-exp and `[B, P, kk]` values / indices;
    slots past `kk` and parts past `P` are empty (max and values -inf, sum-exp 0, index -1)."""
    n, kk = values.shape[1:]
    floats = torch.cat([row_max.float()[..., None], sumexp.float()[..., None], values.float()], dim=-1)
    floats = F.pad(floats, (0, k - kk, 0, parts - n), value=float("-inf"))
    floats[:, n:, 1] = 0.0
    index = F.pad(index.to(torch.int32), (0, k - kk, 0, parts - n), value=-1)
    return torch.cat([floats.view(torch.int32), index], dim=-1)


def empty_wire(batch: int, parts: int, k: int, device: torch.device) -> torch.Tensor:
    none = torch.empty((batch, 0), device=device)
    return pack(none, none, none[..., None], none[..., None].long(), k, parts)


def unpack(wire: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max fp32 `[...]`, sum-exp fp32 `[...]`, values fp32 `[..., k]`, indices int64 `[..., k]`)."""
    k = (wire.shape[-1] - 2) // 2
    floats = wire[..., : 2 + k].view(torch.float32)
    return floats[..., 0], floats[..., 1], floats[..., 2:], wire[..., 2 + k :].to(torch.int64)


def torch_wire(logits: torch.Tensor, k: int, shard: VocabSlice) -> torch.Tensor:
    """One part per row, torch ops: top-k (lowest index first), max = its first value (NaN when the row
    holds one), `sum(exp(x - max))` in fp32 (0 for an all -inf shard, NaN with a NaN or +inf)."""
    if shard.width == 0:
        return empty_wire(logits.shape[0], 1, k, logits.device)
    values, index = topk_lowest_index(logits, min(k, shard.width))
    row_max = values[:, :1].float()
    shift = row_max.masked_fill(row_max == float("-inf"), 0.0)
    sumexp = (logits - shift).exp_().sum(dim=-1, keepdim=True)  # fp32: the one [B, w] temporary
    return pack(row_max, sumexp, values[:, None, :], (index + shard.start)[:, None, :], k, 1)


def torch_merge(wire: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact `(topk_p, topk_index)` from `[B, n, 2 + 2k]` partials of disjoint column ranges, torch ops:
    a NaN or +inf in the row, or an all -inf row, gives NaN `topk_p`; indices are real columns."""
    row_max, sumexp, values, index = unpack(wire)
    top = row_max.max(dim=1, keepdim=True).values  # NaN when a part saw a NaN
    scale = torch.exp(row_max - top).masked_fill(row_max == float("-inf"), 0.0)
    total = (sumexp * scale).sum(dim=1, keepdim=True)
    index = index.flatten(1)
    values, index = canonical_order(values.flatten(1), index.masked_fill(index < 0, _SORT_LAST))
    return torch.exp(values[:, :k] - top) / total, index[:, :k]


def rank_plan(
    batch: int, vocab: int, k: int, tp: int, element_size: int, device: torch.device | None = None
) -> plans.Plan:
    """The split plan for one rank's slice, the same on every rank (the gathered shapes must match)."""
    return plans.split_plan(batch, padded_width(vocab, tp), k, plans.hardware(device), element_size)


def triton_wire(logits: torch.Tensor, k: int, shard: VocabSlice) -> torch.Tensor:
    """`row_partials` over the rank's columns (`index_offset` = its first column), packed to the wire."""
    from perfsuite.kernels import topk_softmax

    plan = rank_plan(logits.shape[0], shard.vocab, k, shard.tp, logits.element_size(), logits.device)
    if shard.width == 0:
        return empty_wire(logits.shape[0], plan.n_splits, k, logits.device)
    tunables = {"chunk": plan.chunk, "block": plan.block, "num_warps": plan.num_warps}
    part = topk_softmax.row_partials(logits, min(k, shard.width), index_offset=shard.start, **tunables)
    return pack(part.max, part.sumexp, part.values, part.indices, k, plan.n_splits)


def triton_merge(wire: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    from perfsuite.kernels import topk_softmax

    return topk_softmax.merge_partials(topk_softmax.Partials(*unpack(wire)), k)


def torch_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    """The identity's passes over the rank's slice, then the partials packed, gathered and merged."""
    wire = wire_bytes(batch, k)
    local = variants.get("identity").traffic(batch, padded_width(vocab, tp), k, dtype)
    return local + Traffic(2 * wire + 2 * tp * wire, wire + 2 * tp * wire + batch * k * 12)


def triton_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    """One read of the slice, the outputs, and the partials read and written once (stage 1, wire, merge)."""
    parts = rank_plan(batch, vocab, k, tp, dtype.itemsize).n_splits
    part, wire = plans.partial_bytes(batch, parts, k), wire_bytes(batch, k, parts)
    moved = part + wire + 2 * tp * wire + tp * part
    return ideal_traffic(batch, padded_width(vocab, tp), k, dtype) + Traffic(moved, moved)


def merged(wire: Callable, merge: Callable, local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each rank's `wire`, all-gathered, `merge`d by every rank."""
    gathered = local.group.all_gather(wire(local.logits, k, local.shard))  # [tp, B, parts, 2 + 2k]
    return merge(gathered.transpose(0, 1).flatten(1, 2), k)  # ranks in column order


def torch_comm(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    return (tp - 1) * wire_bytes(batch, k)


def triton_comm(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    return (tp - 1) * wire_bytes(batch, k, rank_plan(batch, vocab, k, tp, dtype.itemsize).n_splits)


SHARDED_TORCH = TPVariant(
    "sharded_torch", partial(merged, torch_wire, torch_merge), "exact", torch_traffic, torch_comm
)
TRITON_SELECT = partial(merged, triton_wire, triton_merge)
SHARDED_TRITON = TPVariant(
    "sharded_triton", TRITON_SELECT, "exact", triton_traffic, triton_comm, availability
)

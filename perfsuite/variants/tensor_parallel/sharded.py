"""The merge-partials variants: each rank summarises its columns in a partial, one small all-gather, an exact
merge on every rank; `sharded_torch` with torch ops, `sharded_triton` with the split kernel's two stages.

A rank's partial of a row: max `m`, `s = sum(exp(x - m))`, its top-k values and global indices. Softmax is
exact from these: `M = max_r m_r`, `S = sum_r s_r * exp(m_r - M)`, and the global top-k is the best k of
the ranks' candidates in the suite's order (descending logit, lowest index first), `topk_p = exp(v - M) / S`.
All-gathering `B x parts x (2 + 2k)` numbers per rank replaces all-gathering `B x V / tp` logits.

Wire format: int32 `[B, parts, 2 + 2k]`: fp32 bits of (max, sum-exp, k values), then k int32 global
indices. Empty slots (a part narrower than k, a rank without columns) hold value -inf and index -1.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from perfsuite import variants
from perfsuite.kernels import availability
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Availability, Traffic, always_available, ideal_traffic
from perfsuite.variants.ordering import canonical_order, topk_lowest_index
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, VocabSlice, padded_width

WIRE_BYTES = 4
"""Every number of a partial travels as 32 bits: fp32 max, sum and values, int32 global column."""
EMPTY_INDEX = -1
_SORT_LAST = 2**62  # empty slots sort after every real candidate, including -inf ones


def wire_bytes(batch: int, k: int, parts: int = 1) -> int:
    """One rank's partials on the wire: per row and part, max, sum-exp, k values and k global indices."""
    return batch * parts * (2 + 2 * k) * WIRE_BYTES


def pack(
    row_max: torch.Tensor, sumexp: torch.Tensor, values: torch.Tensor, index: torch.Tensor, k: int, parts: int
) -> torch.Tensor:
    """Wire `[B, parts, 2 + 2k]` from `[B, P]` max / sum-exp and `[B, P, kk]` values / global indices;
    slots past `kk` and parts past `P` are empty (ranks must send equal shapes): max -inf, sum-exp 0."""
    n, kk = values.shape[1:]
    floats = torch.cat([row_max.float()[..., None], sumexp.float()[..., None], values.float()], dim=-1)
    floats = F.pad(floats, (0, k - kk, 0, parts - n), value=float("-inf"))
    floats[:, n:, 1] = 0.0
    index = F.pad(index.to(torch.int32), (0, k - kk, 0, parts - n), value=EMPTY_INDEX)
    return torch.cat([floats.view(torch.int32), index], dim=-1)


def empty_wire(batch: int, parts: int, k: int, device: torch.device) -> torch.Tensor:
    """Partials of no columns: every part empty."""
    none = torch.empty((batch, 0), device=device)
    return pack(none, none, none[..., None], none[..., None].long(), k, parts)


def unpack(wire: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max fp32 `[...]`, sum-exp fp32 `[...]`, values fp32 `[..., k]`, indices int64 `[..., k]`)."""
    k = (wire.shape[-1] - 2) // 2
    floats = wire[..., : 2 + k].view(torch.float32)
    return floats[..., 0], floats[..., 1], floats[..., 2:], wire[..., 2 + k :].to(torch.int64)


def torch_wire(logits: torch.Tensor, k: int, shard: VocabSlice) -> torch.Tensor:
    """One part per row over a rank's `[B, w]` columns, with torch ops: wire `[B, 1, 2 + 2k]`.

    Top-k of the logits (lowest index first), max = the first value (NaN when the row holds one), and
    `sum(exp(x - max))` in fp32 (0 for an all -inf shard, NaN with a NaN or +inf).
    """
    if shard.width == 0:
        return empty_wire(logits.shape[0], 1, k, logits.device)
    values, index = topk_lowest_index(logits, min(k, shard.width))
    row_max = values[:, :1].float()
    shift = row_max.masked_fill(row_max == float("-inf"), 0.0)
    sumexp = (logits - shift).exp_().sum(dim=-1, keepdim=True)  # fp32: the one [B, w] temporary
    return pack(row_max, sumexp, values[:, None, :], (index + shard.start)[:, None, :], k, 1)


def torch_merge(wire: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact `(topk_p, topk_index)` from `[B, n, 2 + 2k]` partials of disjoint column ranges, torch ops.

    NaN semantics follow torch: a NaN or +inf anywhere in the row makes its `topk_p` NaN, an all -inf
    row gives NaN; indices are real columns (NaN ranks first, then by value, lowest index on ties).
    """
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


def triton_parts(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    """Parts per row of a rank's wire: the splits of this device's plan."""
    return rank_plan(batch, vocab, k, tp, dtype.itemsize).n_splits


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
    """`merge_partials` over every rank's parts (lowest index first)."""
    from perfsuite.kernels import topk_softmax

    return topk_softmax.merge_partials(topk_softmax.Partials(*unpack(wire)), k)


def torch_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    """The identity's passes over the rank's slice (top-k, fp32 exp temporary, sum), then the partials:
    packed, gathered from tp ranks, interleaved and merged into the outputs."""
    wire = wire_bytes(batch, k)
    local = variants.get("identity").traffic(batch, padded_width(vocab, tp), k, dtype)
    return local + Traffic(2 * wire + 2 * tp * wire, wire + 2 * tp * wire + batch * k * 12)


def triton_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    """One read of the rank's slice and the outputs, plus the partials (plan for this device), each byte
    read once and written once: written by stage 1, packed, gathered from tp ranks, interleaved and
    unpacked, read by the merge."""
    parts = triton_parts(batch, vocab, k, dtype, tp)
    part, wire = plans.partial_bytes(batch, parts, k), wire_bytes(batch, k, parts)
    moved = part + wire + 2 * tp * wire + tp * part
    return ideal_traffic(batch, padded_width(vocab, tp), k, dtype) + Traffic(moved, moved)


def sharded_variant(
    name: str,
    wire: Callable[[torch.Tensor, int, VocabSlice], torch.Tensor],
    merge: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]],
    traffic: Callable[[int, int, int, torch.dtype, int], Traffic],
    parts: Callable[[int, int, int, torch.dtype, int], int],
    available: Availability = always_available,
) -> TPVariant:
    """Each rank's `wire`, all-gathered, `merge`d by every rank; (tp - 1) ranks' `parts` partials arrive."""

    def select(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        gathered = local.group.all_gather(wire(local.logits, k, local.shard))  # [tp, B, parts, 2 + 2k]
        return merge(gathered.transpose(0, 1).flatten(1, 2), k)  # ranks in column order

    def comm_bytes(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
        return (tp - 1) * wire_bytes(batch, k, parts(batch, vocab, k, dtype, tp))

    return TPVariant(name, select, "exact", traffic, comm_bytes, available)


SHARDED_TORCH = sharded_variant("sharded_torch", torch_wire, torch_merge, torch_traffic, lambda *_: 1)
SHARDED_TRITON = sharded_variant(
    "sharded_triton", triton_wire, triton_merge, triton_traffic, triton_parts, availability
)

"""`sharded_triton`: the split kernel's partials over each rank's columns, all-gathered, merged in Triton."""

from __future__ import annotations

import torch

from perfsuite.kernels import availability
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, ideal_traffic
from perfsuite.variants.tensor_parallel import partials
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, partial_wire_bytes
from perfsuite.variants.tensor_parallel.vocab_slice import padded_width


def rank_plan(batch: int, vocab: int, k: int, tp: int, hw: plans.Hardware, element_size: int) -> plans.Plan:
    """The split plan for one rank's slice, the same on every rank (the gathered shapes must match)."""
    return plans.split_plan(batch, padded_width(vocab, tp), k, hw, element_size)


def select(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`row_partials` over the rank's columns (`index_offset` = its first column), packed to the wire,
    all-gathered, and merged by `merge_partials` over every rank's parts (lowest index first)."""
    from perfsuite.kernels import topk_softmax

    x, shard = local.logits, local.shard
    batch, width = x.shape
    plan = rank_plan(batch, shard.vocab, k, shard.tp, plans.hardware(x.device), x.element_size())
    if width == 0:
        wire = partials.empty_wire(batch, plan.n_splits, k, x.device)
    else:
        part = topk_softmax.row_partials(
            x,
            min(k, width),
            chunk=plan.chunk,
            block=plan.block,
            num_warps=plan.num_warps,
            index_offset=shard.start,
        )
        wire = partials.pack(part.max, part.sumexp, part.values, part.indices, k, plan.n_splits)
    gathered = partials.interleave(local.group.all_gather(wire))  # [B, tp * parts, 2 + 2k]
    return topk_softmax.merge_partials(topk_softmax.Partials(*partials.unpack(gathered)), k)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    """One read of the rank's slice and the outputs, plus the partials: written by stage 1, packed,
    gathered from tp ranks, interleaved and unpacked, read by the merge (plan for this device)."""
    parts = rank_plan(batch, vocab, k, tp, plans.hardware(), dtype.itemsize).n_splits
    part, wire = plans.partial_bytes(batch, parts, k), partial_wire_bytes(batch, k, parts)
    stage1, pack, gather = Traffic(0, part), Traffic(part, wire), Traffic(wire, tp * wire)
    unpack, merge = Traffic(tp * wire, tp * wire) + Traffic(tp * wire, tp * part), Traffic(tp * part, 0)
    return ideal_traffic(batch, padded_width(vocab, tp), k, dtype) + stage1 + pack + gather + unpack + merge


def comm_bytes(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    """(tp - 1) ranks' partials: `B x parts x (2 + 2k)` 32-bit numbers each (parts from the split plan)."""
    parts = rank_plan(batch, vocab, k, tp, plans.hardware(), dtype.itemsize).n_splits
    return (tp - 1) * partial_wire_bytes(batch, k, parts)


VARIANT = TPVariant(
    name="sharded_triton",
    select=select,
    accuracy="exact",
    traffic=traffic,
    comm_bytes=comm_bytes,
    summary="Triton row_partials per rank (global indices), all-gather partials, Triton merge_partials",
    available=availability,
)

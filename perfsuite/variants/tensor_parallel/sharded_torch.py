"""`sharded_torch`: each rank's softmax partial with torch ops, one small all-gather, an exact merge."""

from __future__ import annotations

import torch

from perfsuite import variants
from perfsuite.variants.base import Traffic
from perfsuite.variants.tensor_parallel import partials
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, partial_wire_bytes
from perfsuite.variants.tensor_parallel.vocab_slice import padded_width

LOCAL = variants.get("identity")


def select(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Local top-k (lowest index first), max and fp32 sum-exp over the rank's columns; all-gather the
    `B x (2 + 2k)` partials; every rank merges them identically (`partials.merge`)."""
    wire = partials.torch_partial(local.logits, k, local.shard.start)
    gathered = local.group.all_gather(wire)  # [tp, B, 1, 2 + 2k]
    return partials.merge(partials.interleave(gathered), k)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    """The identity's passes over the rank's slice (top-k, fp32 exp temporary, sum), then the partials:
    packed, gathered from tp ranks, interleaved and merged."""
    wire = partial_wire_bytes(batch, k)
    local = LOCAL.traffic(batch, padded_width(vocab, tp), k, dtype)
    pack, gather = Traffic(wire, wire), Traffic(wire, tp * wire)
    merge = Traffic(tp * wire, tp * wire) + Traffic(tp * wire, batch * k * 12)
    return local + pack + gather + merge


def comm_bytes(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    """(tp - 1) partials of `B x (2 + 2k)` 32-bit numbers."""
    return (tp - 1) * partial_wire_bytes(batch, k)


VARIANT = TPVariant(
    name="sharded_torch",
    select=select,
    accuracy="exact",
    traffic=traffic,
    comm_bytes=comm_bytes,
    summary="per-rank max, sum-exp and top-k with torch ops, all-gather B x (2+2k) partials, exact merge",
)

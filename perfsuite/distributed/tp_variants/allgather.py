"""All-gather of the vocabulary slices into full `[B, V]` logits on every rank: the engines' usual path."""

from __future__ import annotations

import torch

from perfsuite.distributed.tp_variants.base import Local
from perfsuite.variants.base import Traffic


def gather_logits(local: Local) -> torch.Tensor:
    """Full `[B, V]` logits on every rank: all-gather the padded slices, interleave them, drop the padding.

    As a vocabulary-parallel LM head does: the all-gather stacks slices by rank, a copy moves them to the
    column axis, and the padding (at the end) is sliced off.
    """
    batch, vocab = local.padded.shape[0], local.shard.vocab
    slices = local.group.all_gather(local.padded)  # [tp, B, padded_width]
    return slices.permute(1, 0, 2).reshape(batch, -1)[:, :vocab]


def gather_traffic(batch: int, vocab: int, dtype: torch.dtype, tp: int) -> Traffic:
    """Send the slice, receive tp slices, copy them into `[B, tp * padded_width]` (two temporaries)."""
    slice_bytes = batch * -(-vocab // tp) * dtype.itemsize
    receive = Traffic(slice_bytes, tp * slice_bytes, tp * slice_bytes)
    interleave = Traffic(tp * slice_bytes, tp * slice_bytes, tp * slice_bytes)
    return receive + interleave

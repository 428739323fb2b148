"""All-gather of the vocabulary slices into full `[B, V]` logits on every rank: the engines' usual path."""

from __future__ import annotations

import torch

from perfsuite import variants
from perfsuite.variants.base import Traffic
from perfsuite.variants.tensor_parallel.tp_base import Local, TPVariant, allgather_comm_bytes


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


def allgather_variant(single_name: str, summary: str) -> TPVariant:
    """`allgather_<single_name>`: gather the logits, then run the single-device variant on them."""
    single = variants.get(single_name)

    def select(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return single.select(gather_logits(local), k)

    def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
        return gather_traffic(batch, vocab, dtype, tp) + single.traffic(batch, vocab, k, dtype)

    return TPVariant(
        name=f"allgather_{single_name}",
        select=select,
        accuracy=single.accuracy,
        traffic=traffic,
        comm_bytes=allgather_comm_bytes,
        summary=summary,
        lowest_index_ties=single.lowest_index_ties,
        max_k=single.max_k,
    )

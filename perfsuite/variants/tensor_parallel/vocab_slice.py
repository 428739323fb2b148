"""Vocabulary shards: which columns of the logits each tensor-parallel rank holds.

Engines pad the vocabulary to a multiple of the tensor-parallel size, so every rank's LM-head slice has
the same width `ceil(V / tp)`; the padding lies at the end, on the last rank(s). Rank `r` holds the real
columns `[min(r * w, V), min((r + 1) * w, V))`, possibly none when `V < tp`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class VocabSlice:
    """Rank `rank` of `tp`: `width` real columns from global column `start`, in a `padded_width` slice."""

    rank: int
    tp: int
    vocab: int
    start: int
    width: int
    padded_width: int


def padded_width(vocab: int, tp: int) -> int:
    """Columns of every rank's slice: `ceil(vocab / tp)`."""
    return -(-vocab // tp)


def vocab_slice(vocab: int, tp: int, rank: int) -> VocabSlice:
    """The columns rank `rank` holds when `vocab` columns are split over `tp` ranks."""
    if not 0 <= rank < tp:
        raise ValueError(f"rank {rank} outside [0, {tp})")
    padded = padded_width(vocab, tp)
    start = min(rank * padded, vocab)
    end = min(start + padded, vocab)
    return VocabSlice(rank, tp, vocab, start, end - start, padded)


def local_slice(full: torch.Tensor, shard: VocabSlice, row_pad: int = 0) -> torch.Tensor:
    """The rank's `[B, padded_width]` slice of `full` `[B, V]`, in a buffer `row_pad` columns wider.

    Columns past `shard.width` (vocabulary padding and `row_pad`) hold the dtype's largest value, so a
    sharded selector that reads past its real columns picks a wrong token and fails parity.
    """
    batch = full.shape[0]
    poison = torch.finfo(full.dtype).max
    buffer = torch.full((batch, shard.padded_width + row_pad), poison, dtype=full.dtype, device=full.device)
    buffer[:, : shard.width] = full[:, shard.start : shard.start + shard.width]
    return buffer[:, : shard.padded_width]

"""The tensor-parallel variant contract: a selector over one rank's vocabulary shard and a process group.

    tp_variants.get(name)(local, k) -> (topk_p float32 [B, k], topk_index int64 [B, k])

Every rank calls it with its own shard (a collective inside); every rank gets the same answer, with the
single-device contract: global indices, descending logit with the lowest index first on ties across
ranks (exact variants), exact `topk_p` for exact variants. Besides its HBM traffic per rank, each variant
models the interconnect bytes each rank receives (a ring all-gather sends as many).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from perfsuite.variants.base import Accuracy, Availability, Traffic, always_available, check_inputs
from perfsuite.variants.tensor_parallel.group import Group
from perfsuite.variants.tensor_parallel.vocab_slice import VocabSlice

WIRE_BYTES = 4
"""Every number of a partial travels as 32 bits: fp32 max, sum and values, int32 global column."""


@dataclass(frozen=True)
class Local:
    """What one rank holds: its `[B, padded_width]` slice of the logits, the shard and the group."""

    padded: torch.Tensor
    shard: VocabSlice
    group: Group

    @property
    def logits(self) -> torch.Tensor:
        """The real columns, `[B, shard.width]` (a row-strided view when the slice carries padding)."""
        return self.padded[:, : self.shard.width]


TPSelector = Callable[[Local, int], tuple[torch.Tensor, torch.Tensor]]
TPTraffic = Callable[[int, int, int, torch.dtype, int], Traffic]
"""(batch, vocab, k, dtype, tp) -> HBM traffic of one rank."""
CommModel = Callable[[int, int, int, torch.dtype, int], int]
"""(batch, vocab, k, dtype, tp) -> interconnect bytes one rank receives."""


@dataclass(frozen=True)
class TPVariant:
    """A vocabulary-parallel top-k selector with its accuracy claim, HBM model and interconnect model."""

    name: str
    select: TPSelector
    accuracy: Accuracy
    traffic: TPTraffic
    comm_bytes: CommModel
    summary: str
    lowest_index_ties: bool = True
    available: Availability = field(default=always_available)
    max_k: int | None = None
    """The largest topk it supports (an all-gathered argmax kernel: 1); None: any."""

    @property
    def exact(self) -> bool:
        return self.accuracy == "exact"

    def __call__(self, local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Checked call; an empty batch returns at once on every rank (no collective)."""
        check_inputs(local.padded, 1)
        if not 1 <= k <= local.shard.vocab:
            raise ValueError(f"topk must be in [1, vocab={local.shard.vocab}], got {k}")
        if local.padded.shape[0] == 0:
            device = local.padded.device
            return torch.empty((0, k), device=device), torch.empty((0, k), dtype=torch.int64, device=device)
        return self.select(local, k)


def allgather_comm_bytes(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> int:
    """All-gather of the padded logits slices: each rank receives (tp - 1) slices of `B x ceil(V/tp)`."""
    return (tp - 1) * batch * -(-vocab // tp) * dtype.itemsize


def partial_wire_bytes(batch: int, k: int, parts: int = 1) -> int:
    """One rank's partials on the wire: per row and part, max, sum-exp, k values and k global indices."""
    return batch * parts * (2 + 2 * k) * WIRE_BYTES

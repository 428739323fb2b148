"""`allgather_full_softmax`: the baseline, all-gather the logits, then the engines' softmax + max / top-k."""

from __future__ import annotations

import torch

from perfsuite import variants
from perfsuite.distributed.tp_variants.allgather import gather_logits, gather_traffic
from perfsuite.distributed.tp_variants.base import Local, TPVariant, allgather_comm_bytes
from perfsuite.variants.base import Traffic

SINGLE = variants.get("full_softmax")


def select(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`full_softmax` on the gathered `[B, V]` logits: rounded probabilities, torch's order among ties."""
    return SINGLE.select(gather_logits(local), k)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    return gather_traffic(batch, vocab, dtype, tp) + SINGLE.traffic(batch, vocab, k, dtype)


VARIANT = TPVariant(
    name="allgather_full_softmax",
    select=select,
    accuracy="rounded",
    traffic=traffic,
    comm_bytes=allgather_comm_bytes,
    summary="all-gather [B, V] logits, then softmax in the input dtype and max/topk: the engines' baseline",
    lowest_index_ties=False,
)

"""`allgather_identity`: all-gather the logits, then the exact identity selection (torch ops)."""

from __future__ import annotations

import torch

from perfsuite import variants
from perfsuite.distributed.tp_variants.allgather import gather_logits, gather_traffic
from perfsuite.distributed.tp_variants.base import Local, TPVariant, allgather_comm_bytes
from perfsuite.variants.base import Traffic

SINGLE = variants.get("identity")


def select(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`identity` on the gathered `[B, V]` logits: exact `topk_p`, lowest index first on ties."""
    return SINGLE.select(gather_logits(local), k)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, tp: int) -> Traffic:
    return gather_traffic(batch, vocab, dtype, tp) + SINGLE.traffic(batch, vocab, k, dtype)


VARIANT = TPVariant(
    name="allgather_identity",
    select=select,
    accuracy="exact",
    traffic=traffic,
    comm_bytes=allgather_comm_bytes,
    summary="all-gather [B, V] logits, then max/topk and exp(v - max) / sum(exp(x - max)) in fp32",
)

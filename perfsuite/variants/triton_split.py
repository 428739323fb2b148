"""`triton_split`: exact top-k softmax with each row split over many Triton programs, then merged.

Stage 1, grid `(B, n_splits)` (about one wave over the SMs): each program scans a chunk of a row into a
partial (max, sum of exp, top-k). Stage 2, grid `(B,)`: a program per row merges them (docs/triton.md). The
indices are `triton_fused`'s bit for bit whatever the split count.
"""

from __future__ import annotations

import torch

from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, ideal_traffic, swept
from perfsuite.variants.cache import sweep
from perfsuite.variants.triton_fused import triton_variant


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite warm` compiles it ahead)."""
    return plans.split_plan(batch, vocab, k, hw, dtype.itemsize)


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The split plan's traffic (for the current device, 132 SMs without one)."""
    n_splits = plan_for(batch, vocab, k, dtype, plans.hardware()).n_splits
    return split_traffic(batch, vocab, k, dtype, plans.partial_bytes(batch, n_splits, k))


def split_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, partials: int) -> Traffic:
    """Stage 1 reads the logits, writes the partials; stage 2 reads them back (cacheable); the outputs."""
    ideal = ideal_traffic(batch, vocab, k, dtype)
    stage1 = sweep({"logits": ideal.read}, {"partials": partials})
    return swept(stage1, sweep({"partials": partials})) + Traffic(0, ideal.write)


VARIANT = triton_variant(
    plan_for,
    name="triton_split",
    accuracy="exact",
    traffic=traffic,
    summary="Triton, rows split over (B, n_splits) programs into partial max/sum/top-k, then a merge kernel",
)

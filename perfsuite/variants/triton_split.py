"""`triton_split`: exact top-k softmax with each row split over many Triton programs, then merged.

Stage 1, grid `(B, n_splits)` (`plans.split_plan`: about one wave of programs over the SMs): each program
scans a chunk of a row into a partial (chunk max, sum of exp rescaled to it, chunk top-k values and global
indices). Stage 2, grid `(B,)`: one program per row rescales the sums to the global max and merges the
partial top-k. The indices are `triton_fused`'s bit for bit whatever the split count (integer keys).
"""

from __future__ import annotations

import torch

from perfsuite.kernels import availability, untimed
from perfsuite.kernels import plan as plans
from perfsuite.variants.base import Traffic, Variant, ideal_traffic, swept
from perfsuite.variants.cache import sweep


def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    from perfsuite.kernels import topk_softmax

    plan = plan_for(*logits.shape, k, logits.dtype, plans.hardware(logits.device))
    return topk_softmax.run_plan(logits, k, plan)


def plan_for(batch: int, vocab: int, k: int, dtype: torch.dtype, hw: plans.Hardware) -> plans.Plan:
    """The plan `select` launches for a shape on `hw` (`perfsuite warm` compiles it ahead)."""
    return plans.split_plan(batch, vocab, k, hw, dtype.itemsize)


def launch(batch: int, vocab: int, k: int, dtype: torch.dtype) -> str:
    return plan_for(batch, vocab, k, dtype, plans.hardware()).describe()


def traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The split plan's traffic (for the current device, 132 SMs without one)."""
    n_splits = plan_for(batch, vocab, k, dtype, plans.hardware()).n_splits
    return split_traffic(batch, vocab, k, dtype, plans.partial_bytes(batch, n_splits, k))


def split_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype, partials: int) -> Traffic:
    """Stage 1 reads the logits and writes the partials, stage 2 reads them back (cacheable), then the
    `[B, k]` outputs."""
    ideal = ideal_traffic(batch, vocab, k, dtype)
    stage1 = sweep({"logits": ideal.read}, {"partials": partials})
    return swept(stage1, sweep({"partials": partials})) + Traffic(0, ideal.write)


VARIANT = Variant(
    name="triton_split",
    select=select,
    accuracy="exact",
    traffic=traffic,
    summary="Triton, rows split over (B, n_splits) programs into partial max/sum/top-k, then a merge kernel",
    nan="largest",  # NaN above every number, as torch.argmax / torch.topk
    lowest_index_ties=True,
    available=availability,
    untimed=untimed,
    launch=launch,
)

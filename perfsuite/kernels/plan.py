"""Launch plans for the top-k softmax kernels: which kernel, tile sizes, splits and warps, by shape.

Triton-free on purpose, so the heuristic can be read, tested and tuned without a GPU. Every number a GPU run
should tune is a named constant below; `choose` is the one place that turns a shape into a plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import torch

from perfsuite import simulated_gpu

DEFAULT_SM_COUNT = 132
"""Streaming multiprocessors (CUs on ROCm) assumed when the device cannot be asked: an H100/H200."""

# Fused single-pass kernel: one program per row streams the row in tiles of FUSED_NUM_WARPS warps.
FUSED_NUM_WARPS = 8
FUSED_TILE_BYTES = 8192
"""Bytes of one fused tile: 4096 bf16 or 2048 fp32 columns, 32 bytes per thread over 8 warps of 32 (16 over
8 wavefronts of 64). Registers grow with columns per thread: a tile of 4096 fp32 columns, prefetched,
spilled on sm_90 under triton 3.6 (`perfsuite kernels`)."""

# Split kernel, stage 1: program (row, split) scans SPLIT_BLOCK-column tiles of its chunk of the row.
SPLIT_BLOCK = 1024
SPLIT_NUM_WARPS = 4
SPLIT_MIN_CHUNK = 2048
"""Fewest columns one split program reads: below this the partial buffers and the merge cost more than the
parallelism buys."""
SPLIT_MAX_SPLITS = 256
SPLIT_MAX_CANDIDATES = 4096
"""Cap on n_splits * k, the candidates stage 2 merges per row in one program (bounds the merge's cost)."""
SPLIT_WAVES = 1.0
"""Target B * n_splits ~= SPLIT_WAVES * SM count: one wave of programs covering every SM."""
SPLIT_MAX_BATCH_FRACTION = 0.25
"""`triton_auto` splits while B <= this * SM count. Above it the fused kernel's B programs already keep
enough SMs streaming that a second launch (the merge) and the partial round trip cost more than they save."""

# Split kernel, stage 2: one program per row merges the partials in tiles of MERGE_TILE candidates.
MERGE_TILE = 1024
MERGE_PART_TILE = 256
MERGE_NUM_WARPS = 4

PREFETCH = True
"""Scans load tile t + 1 before reducing tile t, so a tile's loads are in flight during the previous tile's
block-wide max (a barrier per tile). Costs one tile of registers; `perfsuite tune` times both."""

LOAD_BYTES = 16
"""Bytes of the widest global load: a tile gives every thread at least this much per step."""

Kernel = Literal["fused", "split"]
Selection = Literal["topk", "argmax"]
"""What the kernels select: the exact top-k softmax, or the argmax (k = 1, `topk_p = 1.0`, no softmax) on
the same plans, loads and grids."""


@dataclass(frozen=True)
class Plan:
    """How to launch one selection: the kernel and its tunables."""

    kernel: Kernel
    block: int  # columns per tile (fused: per loop step; split: per step inside one chunk)
    num_warps: int
    n_splits: int = 1  # split only: programs per row
    chunk: int = 0  # split only: columns per split program (a multiple of `block`)
    prefetch: bool = PREFETCH
    selection: Selection = "topk"

    def describe(self) -> str:
        """One line for results tables: "split 75 x 2048 cols, block 1024, 4 warps, prefetch" ("argmax "
        in front for an argmax plan)."""
        grid = f"split {self.n_splits} x {self.chunk} cols" if self.kernel == "split" else "fused"
        grid = f"argmax {grid}" if self.selection == "argmax" else grid
        return f"{grid}, block {self.block}, {self.num_warps} warps" + (", prefetch" if self.prefetch else "")

    def selecting(self, selection: Selection) -> Plan:
        """The same launch plan for the other kernels (the argmax's or the exact top-k's)."""
        return replace(self, selection=selection)


@dataclass(frozen=True)
class Hardware:
    """What a launch plan needs to know of the GPU: SMs (CUs on ROCm), threads per warp (wavefront), and
    the name tuned plans are filed under ("" where there is no GPU)."""

    sms: int = DEFAULT_SM_COUNT
    warp_size: int = 32
    name: str = ""


def hardware(device: torch.device | str | None = None) -> Hardware:
    """The Hardware of `device` (default: the current GPU); the default Hardware (H100/H200-like, no name)
    for the CPU, without a GPU, or when it cannot be asked."""
    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda" or not torch.cuda.is_available():
        return Hardware()
    try:
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _cuda_hardware(index)
    except (RuntimeError, AssertionError):
        return Hardware()


@simulated_gpu.device_cached
def _cuda_hardware(index: int) -> Hardware:
    props = torch.cuda.get_device_properties(index)
    warp = getattr(props, "warp_size", 64 if torch.version.hip else 32)
    return Hardware(int(props.multi_processor_count), int(warp), props.name)


def min_block(element_size: int, warp_size: int, num_warps: int) -> int:
    """Fewest columns per tile that give each of the program's threads one LOAD_BYTES load."""
    return LOAD_BYTES // element_size * warp_size * num_warps


def fused_plan(
    hw: Hardware = Hardware(),
    element_size: int = 2,
    *,
    block: int | None = None,
    num_warps: int = FUSED_NUM_WARPS,
    prefetch: bool = PREFETCH,
) -> Plan:
    """One program per row; by default tiles of FUSED_TILE_BYTES."""
    block = block or FUSED_TILE_BYTES // element_size
    block = max(block, min_block(element_size, hw.warp_size, num_warps))
    return Plan("fused", block, num_warps, prefetch=prefetch)


def split_plan(
    batch: int,
    vocab: int,
    k: int,
    hw: Hardware = Hardware(),
    element_size: int = 2,
    *,
    block: int = SPLIT_BLOCK,
    num_warps: int = SPLIT_NUM_WARPS,
    min_chunk: int = SPLIT_MIN_CHUNK,
    waves: float = SPLIT_WAVES,
    prefetch: bool = PREFETCH,
) -> Plan:
    """Spread each row over enough programs to fill about `waves` waves of the SMs (B * splits ~ waves * SMs).

    Chunks are a multiple of `block` and at least `min_chunk` columns; the number of splits is capped by
    SPLIT_MAX_SPLITS and by SPLIT_MAX_CANDIDATES // k (the merge's work). `block` grows to `min_block`
    (e.g. 2048 bf16 columns for 4 wavefronts of 64 on ROCm), so that every load is 16 bytes wide.
    """
    block = max(block, min_block(element_size, hw.warp_size, num_warps))
    target = math.ceil(waves * hw.sms / max(batch, 1))
    target = max(1, min(target, SPLIT_MAX_SPLITS, max(1, SPLIT_MAX_CANDIDATES // k)))
    chunk = max(min_chunk, math.ceil(vocab / target))
    chunk = math.ceil(chunk / block) * block
    return Plan("split", block, num_warps, math.ceil(vocab / chunk), chunk, prefetch)


def choose(
    batch: int,
    vocab: int,
    k: int,
    hw: Hardware = Hardware(),
    element_size: int = 2,
    selection: Selection = "topk",
) -> Plan:
    """The exact kernel expected to be fastest for `[batch, vocab]`, top-`k`, on `hw`, by heuristic.

    The fused kernel runs one program per row, so with B rows it keeps at most B SMs busy; each reads a whole
    row alone. Split spreads a row over many programs (more SMs pulling bandwidth at once) at the price of a
    second launch and a small partial round trip. So: split while the batch leaves most SMs idle
    (B <= SPLIT_MAX_BATCH_FRACTION * SMs) and the row holds at least two chunks of SPLIT_MIN_CHUNK columns;
    fused otherwise. Without a GPU the crossover is a principled guess: `perfsuite tune` measures it on one
    (`perfsuite.kernels.plan_table`). `selection = "argmax"`: the same plan for the argmax kernels (k = 1).
    """
    if batch <= SPLIT_MAX_BATCH_FRACTION * hw.sms and vocab >= 2 * SPLIT_MIN_CHUNK:
        return split_plan(batch, vocab, k, hw, element_size).selecting(selection)
    return fused_plan(hw, element_size).selecting(selection)


def partial_bytes(batch: int, n_splits: int, k: int) -> int:
    """Bytes of the split partials: fp32 max and sum-exp, k fp32 values and k int64 indices per split."""
    return batch * n_splits * (4 + 4 + k * (4 + 8))


def argmax_partial_bytes(batch: int, n_splits: int) -> int:
    """Bytes of the split argmax's partials: one packed int64 candidate (key, column) per split."""
    return batch * n_splits * 8

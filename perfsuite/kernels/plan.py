"""Launch plans for the top-k softmax kernels: which kernel, tile sizes, splits and warps, by shape.

Triton-free, so the heuristic can be read, tested and tuned without a GPU; every number a GPU run should
tune is a named constant here, and `choose` is the one place that turns a shape into a plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import torch

from perfsuite import simulated_gpu

# Fused: one program per row streams it in tiles of FUSED_TILE_BYTES: 4096 bf16 or 2048 fp32 columns,
# 32 bytes per thread over 8 warps of 32 (4096 fp32 columns, prefetched, spilled on sm_90 under triton 3.6).
FUSED_NUM_WARPS = 8
FUSED_TILE_BYTES = 8192
# Split, stage 1: program (row, split) scans SPLIT_BLOCK-column tiles of its chunk of the row.
SPLIT_BLOCK = 1024
SPLIT_NUM_WARPS = 4
SPLIT_MIN_CHUNK = 2048  # fewest columns per split: below it the partials and merge cost more than they buy
SPLIT_MAX_SPLITS = 256
SPLIT_MAX_CANDIDATES = 4096  # cap on n_splits * k, the candidates the merge takes per row in one program
SPLIT_WAVES = 1.0  # target B * n_splits ~= SPLIT_WAVES * SMs: one wave of programs over every SM
# `triton_auto` splits while B <= this * SMs: above it the fused kernel's B programs keep enough SMs
# streaming that a second launch (the merge) and the partials' round trip cost more than they save.
SPLIT_MAX_BATCH_FRACTION = 0.25
# Split, stage 2: one program per row merges the partials in tiles of MERGE_TILE candidates.
MERGE_TILE = 1024
MERGE_PART_TILE = 256
MERGE_NUM_WARPS = 4
# Scans load tile t + 1 before reducing tile t, so its loads are in flight during tile t's block-wide max
# (a barrier per tile). Costs one tile of registers; `perfsuite tune` times both.
PREFETCH = True
LOAD_BYTES = 16  # the widest global load: every thread gets at least this much per tile step

Kernel = Literal["fused", "split"]
Selection = Literal["topk", "argmax"]  # the exact top-k softmax, or the argmax (k = 1, `topk_p = 1.0`)


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
        """One line for results tables: "[argmax ]split 75 x 2048 cols, block 1024, 4 warps, prefetch"."""
        grid = f"split {self.n_splits} x {self.chunk} cols" if self.kernel == "split" else "fused"
        grid = f"argmax {grid}" if self.selection == "argmax" else grid
        return f"{grid}, block {self.block}, {self.num_warps} warps" + (", prefetch" if self.prefetch else "")

    def selecting(self, selection: Selection) -> Plan:
        return replace(self, selection=selection)


@dataclass(frozen=True)
class RowLayout:
    """How a `[B, V]` logits tensor sits in memory: what the scans need to align their loads."""

    stride: int  # elements between row starts
    shift: int  # elements from the kernels' base pointer (a 16-byte boundary) to the first row's start
    element_size: int

    @staticmethod
    def of(logits: torch.Tensor) -> RowLayout:
        """The layout of `logits` from the 16-byte boundary at or below its first element; shift 0 (the
        logits' own pointer, narrower loads) where that lies before the storage or is not element-aligned."""
        size, pointer = logits.element_size(), logits.data_ptr()
        shift = pointer % LOAD_BYTES // size
        if pointer % size or shift > logits.storage_offset():
            shift = 0
        return RowLayout(logits.stride(0), shift, size)

    @staticmethod
    def contiguous(vocab: int, element_size: int, pad: int = 0) -> RowLayout:
        """Fresh `[B, vocab]` rows `pad` elements apart (allocators return 16-byte aligned storage)."""
        return RowLayout(vocab + pad, 0, element_size)


@dataclass(frozen=True)
class Hardware:
    """What a plan needs of the GPU: SMs (CUs), threads per warp (wavefront), the name tuned plans are filed
    under; the default (no name) an H100/H200, assumed when the device cannot be asked."""

    sms: int = 132
    warp_size: int = 32
    name: str = ""


def hardware(device: torch.device | str | None = None) -> Hardware:
    """The Hardware of `device` (default: the current GPU); the default one without a GPU."""
    device = torch.device(device if device is not None else "cuda")
    if device.type != "cuda" or not torch.cuda.is_available():
        return Hardware()
    try:
        return _cuda_hardware(device.index if device.index is not None else torch.cuda.current_device())
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
    hw: Hardware = Hardware(), element_size: int = 2, *, block: int | None = None,
    num_warps: int = FUSED_NUM_WARPS, prefetch: bool = PREFETCH,
) -> Plan:  # fmt: skip
    """One program per row; by default tiles of FUSED_TILE_BYTES."""
    block = max(block or FUSED_TILE_BYTES // element_size, min_block(element_size, hw.warp_size, num_warps))
    return Plan("fused", block, num_warps, prefetch=prefetch)


def split_plan(
    batch: int, vocab: int, k: int, hw: Hardware = Hardware(), element_size: int = 2, *,
    block: int = SPLIT_BLOCK, num_warps: int = SPLIT_NUM_WARPS, waves: float = SPLIT_WAVES,
    prefetch: bool = PREFETCH,
) -> Plan:  # fmt: skip
    """Each row over enough programs to fill about `waves` waves of the SMs: chunks a multiple of `block`
    (at least `min_block`) of at least SPLIT_MIN_CHUNK columns, at most SPLIT_MAX_SPLITS and
    SPLIT_MAX_CANDIDATES // k splits (the merge's work)."""
    block = max(block, min_block(element_size, hw.warp_size, num_warps))
    target = math.ceil(waves * hw.sms / max(batch, 1))
    target = max(1, min(target, SPLIT_MAX_SPLITS, max(1, SPLIT_MAX_CANDIDATES // k)))
    chunk = math.ceil(max(SPLIT_MIN_CHUNK, math.ceil(vocab / target)) / block) * block
    return Plan("split", block, num_warps, math.ceil(vocab / chunk), chunk, prefetch)


def choose(
    batch: int, vocab: int, k: int, hw: Hardware = Hardware(), element_size: int = 2,
    selection: Selection = "topk",
) -> Plan:  # fmt: skip
    """The heuristic plan: split while the batch leaves most SMs idle and the row holds two chunks of
    SPLIT_MIN_CHUNK, else fused (`perfsuite tune` measures the crossover on a GPU)."""
    if batch <= SPLIT_MAX_BATCH_FRACTION * hw.sms and vocab >= 2 * SPLIT_MIN_CHUNK:
        return split_plan(batch, vocab, k, hw, element_size).selecting(selection)
    return fused_plan(hw, element_size).selecting(selection)


def partial_bytes(batch: int, n_splits: int, k: int) -> int:
    """Bytes of the split partials: fp32 max and sum-exp, k fp32 values and k int64 indices per split."""
    return batch * n_splits * (4 + 4 + k * (4 + 8))

"""Exact top-k softmax in Triton: a fused single pass, and a split-vocabulary two-stage kernel.

Both return `(topk_p float32 [B, k], topk_index int64 [B, k])` with `topk_p = softmax(logits)` at the
selected indices, computed in fp32 from one read of the logits.

Order. Every value is mapped to a 32-bit integer key that is monotone in the float order (the sign-magnitude
trick), with -0.0 mapped to +0.0's key and every NaN to one key above +inf. A candidate is the int64
`key << 32 | (2^31 - 1 - column)`: distinct per column, and descending int64 order is exactly "descending
logit, lowest index first, NaN above +inf". The top-k is the k largest of these integers, so ties resolve
the same way whatever the tile size or the number of splits, and integer max never meets a NaN (float max
treats NaN differently on GPUs and in the interpreter).

Loads. The host hands the kernels the 16-byte boundary at or below the logits' first element as their
base pointer and the element shift from there to the first row (`RowLayout`, `aligned_base`), so Triton
sees a 16-byte aligned pointer for every view, odd offsets included. Each scan reads its columns once: a
masked head up to the row's first 16-byte boundary, whole tiles unmasked from there (`tl.multiple_of`
lets the compiler emit 16-byte loads whatever the shift, V or the row stride), one masked tail tile; the
masks keep every read inside the row's V columns.

Specialisation. Triton compiles a kernel once per specialisation of its integer arguments (divisible by
16, equal to 1). The row geometry (V, row stride, shift, a split's chunk) keeps it: when every row and
chunk starts on a 16-byte boundary the compiler drops the head and widens the tail (fused bf16 k=8 on
sm_90: 124 registers instead of 165). Split counts, index offsets and the merge's part counts do not
(`UNSPECIALISED`): specialising them changes no load in the scans, only the number of compiles.

Softmax. The running max `m` is taken over the keys (NaN counted as +inf, so it is NaN-free); the running
sum is a per-lane fp32 vector `s` rescaled by `exp(m_old - m_new)` when `m` grows, summed once at the end.
One `exp` per element.

Non-finite rows (identical for fused and split, decided in the kernels):
- indices always follow the order above and lie in `[0, V)`: NaN first (lowest index first), then +inf,
  then finite values, then -inf; an all -inf row gives 0, 1, ..., k-1;
- `topk_p` is NaN for the whole row when it holds a NaN or +inf (as torch's softmax) or is all -inf;
- otherwise -inf entries that make the top-k get probability 0.

Argmax (`triton_argmax`, plans with `selection = "argmax"`, k = 1 only): the same keys, loads, plans and
grids without the softmax: one pass keeping each lane's first largest key (no exp, no sum), the lanes
reduced to the largest key's lowest column; the split kernel writes one packed candidate per split (8
bytes) and the merge takes their integer max. The index is the exact kernels' top-1 on every row (NaN
first, lowest index first); `topk_p` is the constant 1.0, written by the same kernel.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import triton

from perfsuite.kernels import launch_log
from perfsuite.kernels import plan as plans
from perfsuite.kernels.triton_code import (
    UNSPECIALISED,
    _argmax_kernel,
    _argmax_merge_kernel,
    _argmax_partials_kernel,
    _fused_kernel,
    _merge_kernel,
    _partials_kernel,
)


@dataclass(frozen=True)
class Partials:
    """Per-split summaries of a row, enough to finish an exact top-k softmax without the logits.

    max: `[B, S]` fp32, the split's largest logit with NaN counted as +inf (-inf for an all -inf split);
    never NaN. sumexp: `[B, S]` fp32, `sum(exp(x - max))` over the split; NaN when it holds a NaN or +inf.
    values / indices: `[B, S, k]` the split's top-k in the suite's order (fp32 logits, int64 global column);
    slots past a split's length hold -inf / -1. Partials of disjoint column ranges (splits, tensor-parallel
    ranks with `index_offset` = their first column) concatenated along S merge with `merge_partials`.
    """

    max: torch.Tensor
    sumexp: torch.Tensor
    values: torch.Tensor
    indices: torch.Tensor

    @property
    def n_parts(self) -> int:
        return self.max.shape[1]

    @property
    def k(self) -> int:
        return self.values.shape[2]

    @staticmethod
    def cat(parts: list[Partials]) -> Partials:
        """Partials of disjoint column ranges joined along the split axis."""
        return Partials(
            torch.cat([p.max for p in parts], dim=1),
            torch.cat([p.sumexp for p in parts], dim=1),
            torch.cat([p.values for p in parts], dim=1),
            torch.cat([p.indices for p in parts], dim=1),
        )


ALIGN_BYTES = 16
"""Width of the widest global load (128 bits): the scans' unmasked body tiles start at this alignment."""

KERNELS = {
    "fused": _fused_kernel,
    "partials": _partials_kernel,
    "merge": _merge_kernel,
    "argmax": _argmax_kernel,
    "argmax_partials": _argmax_partials_kernel,
    "argmax_merge": _argmax_merge_kernel,
}
LOGITS_KERNELS = ("fused", "partials", "argmax", "argmax_partials")
"""The kernels that read the logits (their pointer's element type is the logits' dtype)."""

POINTER_TYPES = {
    "base_ptr": "input",
    "p_ptr": "fp32",
    "max_ptr": "fp32",
    "sum_ptr": "fp32",
    "val_ptr": "fp32",
    "idx_ptr": "i64",
    "out_idx_ptr": "i64",
    "cand_ptr": "i64",
}
"""Element type of every kernel's pointer arguments, by name ("input": the logits' dtype)."""


@dataclass(frozen=True)
class Launch:
    """One kernel launch without its tensors: what runs it here, and what compiles it ahead of time."""

    kernel: str  # a key of KERNELS
    grid: tuple[int, ...]
    scalars: dict[str, int]  # runtime integer arguments, by name
    constants: dict[str, int]  # tl.constexpr arguments, by name
    num_warps: int

    def __call__(self, *tensors: torch.Tensor) -> None:
        """Launch on the pointer arguments `tensors`, in the kernel's order."""
        kernel = KERNELS[self.kernel]
        if launch_log.LOG_PATH is not None:  # the compile-plan proof: which keys each stage launches
            aligned = all(t.data_ptr() % ALIGN_BYTES == 0 for t in tensors)
            launch_log.record(self.compile_key(tensors[0].dtype), aligned)
        kernel[self.grid](*tensors, **self.scalars, **self.constants, num_warps=self.num_warps)

    def specialisation(self) -> tuple[tuple[str, str, str], ...]:
        """The integer arguments as Triton's launcher specialises them, by name: `(name, type, "D")` for a
        multiple of 16, `(name, "constexpr", "1")` for a 1, `(name, type, "")` otherwise and for the
        kernel's `UNSPECIALISED` ones (type: i32, or i64 past its range)."""
        found = []
        for name, value in sorted(self.scalars.items()):
            kind = "i32" if -(2**31) <= value < 2**31 else "i64"
            if name in UNSPECIALISED[self.kernel]:
                found.append((name, kind, ""))
            elif value == 1:
                found.append((name, "constexpr", "1"))
            else:
                found.append((name, kind, "D" if value % 16 == 0 else ""))
        return tuple(found)

    def compile_key(self, dtype: torch.dtype) -> tuple:
        """What Triton compiles this launch by, with logits of `dtype` and 16-byte aligned pointers (fresh
        outputs, `aligned_base`): launches with equal keys share one compiled kernel."""
        logits = str(dtype) if self.kernel in LOGITS_KERNELS else ""
        return (self.kernel, logits, tuple(self.constants.items()), self.specialisation(), self.num_warps)


@dataclass(frozen=True)
class RowLayout:
    """How a `[B, V]` logits tensor sits in memory: what the scans need to align their loads."""

    stride: int  # elements between row starts
    shift: int  # elements from the kernels' base pointer (a 16-byte boundary) to the first row's start
    element_size: int

    @staticmethod
    def of(logits: torch.Tensor) -> RowLayout:
        """The layout of `logits`, shifted from the 16-byte boundary at or below its first element.

        Where that boundary lies before the tensor's storage (storage from outside torch's allocators) or
        the pointer is not a multiple of the element size, the shift is 0 and the base pointer is the
        logits' own: results are the same, the loads narrower.
        """
        size, pointer = logits.element_size(), logits.data_ptr()
        shift = pointer % ALIGN_BYTES // size
        if pointer % size or shift > logits.storage_offset():
            shift = 0
        return RowLayout(logits.stride(0), shift, size)

    @staticmethod
    def contiguous(vocab: int, element_size: int) -> RowLayout:
        """A freshly allocated `[B, vocab]` tensor (allocators return 16-byte aligned storage)."""
        return RowLayout(vocab, 0, element_size)

    @property
    def vec(self) -> int:
        """Columns per 16-byte load."""
        return ALIGN_BYTES // self.element_size


def aligned_base(logits: torch.Tensor, layout: RowLayout) -> torch.Tensor:
    """What the kernels get as `base_ptr`: a view of the logits' storage starting `layout.shift` elements
    before the first row (the logits themselves when the shift is 0). The kernels add the shift back and
    read only the rows' V columns."""
    if layout.shift == 0:
        return logits
    return logits.as_strided((1,), (1,), logits.storage_offset() - layout.shift)


def _slots(k: int) -> int:
    """Width of the running top-k vector: a power of two >= k (at least 2)."""
    return max(2, triton.next_power_of_2(k))


def _tile(block: int, columns: int) -> int:
    """`block` shrunk to the smallest power of two covering `columns` (at least 16)."""
    return max(16, min(block, triton.next_power_of_2(max(columns, 1))))


def _scan_constants(k: int, block: int, columns: int, layout: RowLayout, prefetch: bool) -> dict[str, int]:
    """The compile-time constants of a scan over rows of `columns` columns."""
    return {"K": k, "KP": _slots(k), "BLOCK": _tile(block, columns), "VEC": layout.vec, "PREFETCH": prefetch}


def fused_launch(
    batch: int,
    vocab: int,
    k: int,
    layout: RowLayout,
    *,
    block: int,
    num_warps: int,
    prefetch: bool = plans.PREFETCH,
) -> Launch:
    """`_fused_kernel` over `[batch, vocab]`: grid `(B,)`."""
    scalars = {"V": vocab, "stride_row": layout.stride, "shift": layout.shift}
    return Launch("fused", (batch,), scalars, _scan_constants(k, block, vocab, layout, prefetch), num_warps)


def partials_launch(
    batch: int,
    vocab: int,
    k: int,
    layout: RowLayout,
    *,
    chunk: int,
    block: int,
    num_warps: int,
    index_offset: int = 0,
    prefetch: bool = plans.PREFETCH,
) -> Launch:
    """`_partials_kernel` over `[batch, vocab]` in chunks of `chunk` columns: grid `(B, splits)`."""
    chunk = max(1, chunk)
    n_splits = -(-vocab // chunk)
    scalars = {
        "V": vocab,
        "stride_row": layout.stride,
        "chunk": chunk,
        "n_splits": n_splits,
        "index_offset": index_offset,
        "shift": layout.shift,
    }
    constants = _scan_constants(k, block, chunk, layout, prefetch)
    return Launch("partials", (batch, n_splits), scalars, constants, num_warps)


def merge_launch(
    batch: int,
    n_parts: int,
    part_k: int,
    k: int,
    *,
    tile: int = plans.MERGE_TILE,
    part_tile: int = plans.MERGE_PART_TILE,
    num_warps: int = plans.MERGE_NUM_WARPS,
) -> Launch:
    """`_merge_kernel` combining `n_parts` partials of top-`part_k` per row into the top-k: grid `(B,)`."""
    constants = {
        "K": k,
        "KP": _slots(k),
        "TILE": _tile(tile, n_parts * part_k),
        "PART_TILE": _tile(part_tile, n_parts),
    }
    return Launch("merge", (batch,), {"n_parts": n_parts, "part_k": part_k}, constants, num_warps)


def argmax_launch(
    batch: int, vocab: int, layout: RowLayout, *, block: int, num_warps: int, prefetch: bool = plans.PREFETCH
) -> Launch:
    """`_argmax_kernel` over `[batch, vocab]`: grid `(B,)`."""
    scalars = {"V": vocab, "stride_row": layout.stride, "shift": layout.shift}
    constants = {"BLOCK": _tile(block, vocab), "VEC": layout.vec, "PREFETCH": prefetch}
    return Launch("argmax", (batch,), scalars, constants, num_warps)


def argmax_partials_launch(
    batch: int,
    vocab: int,
    layout: RowLayout,
    *,
    chunk: int,
    block: int,
    num_warps: int,
    prefetch: bool = plans.PREFETCH,
) -> Launch:
    """`_argmax_partials_kernel` over `[batch, vocab]` in chunks of `chunk` columns: grid `(B, splits)`."""
    chunk = max(1, chunk)
    n_splits = -(-vocab // chunk)
    scalars = {"V": vocab, "stride_row": layout.stride, "chunk": chunk, "n_splits": n_splits}
    scalars["shift"] = layout.shift
    constants = {"BLOCK": _tile(block, chunk), "VEC": layout.vec, "PREFETCH": prefetch}
    return Launch("argmax_partials", (batch, n_splits), scalars, constants, num_warps)


def argmax_merge_launch(
    batch: int,
    n_parts: int,
    *,
    part_tile: int = plans.MERGE_PART_TILE,
    num_warps: int = plans.MERGE_NUM_WARPS,
) -> Launch:
    """`_argmax_merge_kernel` taking the best of `n_parts` packed candidates per row: grid `(B,)`."""
    constants = {"PART_TILE": _tile(part_tile, n_parts)}
    return Launch("argmax_merge", (batch,), {"n_parts": n_parts}, constants, num_warps)


def _tunables(plan: plans.Plan) -> dict[str, int | bool]:
    return {"block": plan.block, "num_warps": plan.num_warps, "prefetch": plan.prefetch}


def plan_launches(batch: int, vocab: int, k: int, plan: plans.Plan, layout: RowLayout) -> list[Launch]:
    """The launches `run_plan` makes for this shape, layout and plan (an argmax plan ignores k)."""
    if plan.selection == "argmax":
        if plan.kernel == "fused":
            return [argmax_launch(batch, vocab, layout, **_tunables(plan))]
        stage1 = argmax_partials_launch(batch, vocab, layout, chunk=plan.chunk, **_tunables(plan))
        return [stage1, argmax_merge_launch(batch, stage1.grid[1])]
    if plan.kernel == "fused":
        return [fused_launch(batch, vocab, k, layout, **_tunables(plan))]
    stage1 = partials_launch(batch, vocab, k, layout, chunk=plan.chunk, **_tunables(plan))
    return [stage1, merge_launch(batch, stage1.grid[1], k, k)]


def _check(logits: torch.Tensor, k: int) -> None:
    if logits.dim() != 2 or logits.stride(-1) != 1:
        raise ValueError("logits must be [B, V] with contiguous rows (a row-strided view is fine)")
    if not 1 <= k <= logits.shape[1]:
        raise ValueError(f"k must be in [1, {logits.shape[1]}], got {k}")
    if logits.shape[1] >= 2**31:
        raise ValueError("vocabularies of 2^31 columns or more are not supported")


def _device_guard(tensor: torch.Tensor):
    if tensor.device.type == "cuda":
        return torch.cuda.device(tensor.device)
    return contextlib.nullcontext()


def _outputs(batch: int, k: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.empty((batch, k), dtype=torch.float32, device=device),
        torch.empty((batch, k), dtype=torch.int64, device=device),
    )


def fused_topk_softmax(
    logits: torch.Tensor,
    k: int,
    *,
    block: int | None = None,
    num_warps: int = plans.FUSED_NUM_WARPS,
    prefetch: bool = plans.PREFETCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k softmax, one program per row, one pass over the logits (grid `(B,)`); `block` defaults
    to the fused plan's for this device and dtype."""
    _check(logits, k)
    batch, vocab = logits.shape
    topk_p, topk_index = _outputs(batch, k, logits.device)
    if batch > 0:
        hw, size = plans.hardware(logits.device), logits.element_size()
        block = block or plans.fused_plan(hw, size, num_warps=num_warps).block
        tunables = {"block": block, "num_warps": num_warps, "prefetch": prefetch}
        layout = RowLayout.of(logits)
        launch = fused_launch(batch, vocab, k, layout, **tunables)
        with _device_guard(logits):
            launch(aligned_base(logits, layout), topk_p, topk_index)
    return topk_p, topk_index


def row_partials(
    logits: torch.Tensor,
    k: int,
    *,
    n_splits: int | None = None,
    chunk: int | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    index_offset: int = 0,
    prefetch: bool | None = None,
) -> Partials:
    """Stage 1 of the split kernel: each row cut into chunks, one program per (row, chunk) (grid `(B, S)`).

    Give `chunk` (columns per split) or `n_splits`; what is not given comes from the split plan for this
    shape and device. Indices are global columns plus `index_offset` (a tensor-parallel rank's first
    vocabulary column).
    """
    _check(logits, k)
    batch, vocab = logits.shape
    plan = plans.split_plan(batch, vocab, k, plans.hardware(logits.device), logits.element_size())
    if chunk is None:
        chunk = plan.chunk if n_splits is None else -(-vocab // max(1, n_splits))
    layout = RowLayout.of(logits)
    launch = partials_launch(
        batch,
        vocab,
        k,
        layout,
        chunk=chunk,
        block=block or plan.block,
        num_warps=num_warps or plan.num_warps,
        index_offset=index_offset,
        prefetch=plan.prefetch if prefetch is None else prefetch,
    )
    shape, device = launch.grid, logits.device
    part_max = torch.empty(shape, dtype=torch.float32, device=device)
    part_sum = torch.empty(shape, dtype=torch.float32, device=device)
    values = torch.empty((*shape, k), dtype=torch.float32, device=device)
    indices = torch.empty((*shape, k), dtype=torch.int64, device=device)
    if batch > 0:
        with _device_guard(logits):
            launch(aligned_base(logits, layout), part_max, part_sum, values, indices)
    return Partials(part_max, part_sum, values, indices)


def merge_partials(
    partials: Partials,
    k: int | None = None,
    *,
    tile: int = plans.MERGE_TILE,
    part_tile: int = plans.MERGE_PART_TILE,
    num_warps: int = plans.MERGE_NUM_WARPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 2: exact `(topk_p, topk_index)` from partials of disjoint column ranges (grid `(B,)`).

    `k` defaults to the partials' k and may not exceed it.
    """
    part_k = partials.k
    k = part_k if k is None else k
    if not 1 <= k <= part_k:
        raise ValueError(f"k must be in [1, {part_k}] (the partials' k), got {k}")
    part_max, part_sum = partials.max.contiguous(), partials.sumexp.contiguous()
    values, indices = partials.values.contiguous(), partials.indices.contiguous()
    batch, n_parts = part_max.shape
    topk_p, topk_index = _outputs(batch, k, part_max.device)
    if batch > 0:
        launch = merge_launch(batch, n_parts, part_k, k, tile=tile, part_tile=part_tile, num_warps=num_warps)
        with _device_guard(part_max):
            launch(part_max, part_sum, values, indices, topk_p, topk_index)
    return topk_p, topk_index


def split_topk_softmax(
    logits: torch.Tensor,
    k: int,
    *,
    n_splits: int | None = None,
    chunk: int | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    prefetch: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k softmax in two stages: `row_partials` over (row, chunk), then `merge_partials`."""
    tunables = {"block": block, "num_warps": num_warps, "prefetch": prefetch}
    partials = row_partials(logits, k, n_splits=n_splits, chunk=chunk, **tunables)
    return merge_partials(partials, k)


def fused_argmax(
    logits: torch.Tensor,
    *,
    block: int | None = None,
    num_warps: int = plans.FUSED_NUM_WARPS,
    prefetch: bool = plans.PREFETCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(topk_p = 1.0 [B, 1], topk_index [B, 1])`: the first maximum of each row, one program per row, one
    pass over the logits; `block` defaults to the fused plan's for this device and dtype."""
    _check(logits, 1)
    batch, vocab = logits.shape
    topk_p, topk_index = _outputs(batch, 1, logits.device)
    if batch > 0:
        hw, size = plans.hardware(logits.device), logits.element_size()
        block = block or plans.fused_plan(hw, size, num_warps=num_warps).block
        layout = RowLayout.of(logits)
        launch = argmax_launch(batch, vocab, layout, block=block, num_warps=num_warps, prefetch=prefetch)
        with _device_guard(logits):
            launch(aligned_base(logits, layout), topk_p, topk_index)
    return topk_p, topk_index


def argmax_partials(
    logits: torch.Tensor,
    *,
    chunk: int | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    prefetch: bool | None = None,
) -> torch.Tensor:
    """Stage 1 of the split argmax: `[B, S]` int64 packed candidates (`triton_code._pack`: order key, then
    the lowest column), one program per (row, chunk); what is not given comes from the split plan."""
    _check(logits, 1)
    batch, vocab = logits.shape
    plan = plans.split_plan(batch, vocab, 1, plans.hardware(logits.device), logits.element_size())
    layout = RowLayout.of(logits)
    launch = argmax_partials_launch(
        batch,
        vocab,
        layout,
        chunk=chunk or plan.chunk,
        block=block or plan.block,
        num_warps=num_warps or plan.num_warps,
        prefetch=plan.prefetch if prefetch is None else prefetch,
    )
    candidates = torch.empty(launch.grid, dtype=torch.int64, device=logits.device)
    if batch > 0:
        with _device_guard(logits):
            launch(aligned_base(logits, layout), candidates)
    return candidates


def merge_argmax(candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 2: `(topk_p = 1.0, topk_index)` `[B, 1]` from `[B, S]` packed candidates (grid `(B,)`)."""
    candidates = candidates.contiguous()
    batch, n_parts = candidates.shape
    topk_p, topk_index = _outputs(batch, 1, candidates.device)
    if batch > 0:
        with _device_guard(candidates):
            argmax_merge_launch(batch, n_parts)(candidates, topk_p, topk_index)
    return topk_p, topk_index


def split_argmax(
    logits: torch.Tensor,
    *,
    chunk: int | None = None,
    block: int | None = None,
    num_warps: int | None = None,
    prefetch: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The split argmax: `argmax_partials` over (row, chunk), then `merge_argmax`."""
    tunables = {"block": block, "num_warps": num_warps, "prefetch": prefetch}
    return merge_argmax(argmax_partials(logits, chunk=chunk, **tunables))


def run_plan(logits: torch.Tensor, k: int, plan: plans.Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel a plan names with its tunables (an argmax plan: k must be 1)."""
    if plan.selection == "argmax":
        if k != 1:
            raise ValueError(f"the argmax kernels select k = 1, got {k}")
        if plan.kernel == "fused":
            return fused_argmax(logits, **_tunables(plan))
        return split_argmax(logits, chunk=plan.chunk, **_tunables(plan))
    if plan.kernel == "fused":
        return fused_topk_softmax(logits, k, **_tunables(plan))
    return split_topk_softmax(logits, k, chunk=plan.chunk, **_tunables(plan))

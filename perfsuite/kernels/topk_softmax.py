"""Exact top-k softmax in Triton: a fused single pass, and a split-vocabulary two-stage kernel.

Both return `(topk_p float32 [B, k], topk_index int64 [B, k])` with `topk_p = softmax(logits)` at the
selected indices, computed in fp32 from one read of the logits.

Order. Every value is mapped to a 32-bit integer key that is monotone in the float order (the sign-magnitude
trick), with -0.0 mapped to +0.0's key and every NaN to one key above +inf. A candidate is the int64
`key << 32 | (2^31 - 1 - column)`: distinct per column, and descending int64 order is exactly "descending
logit, lowest index first, NaN above +inf". The top-k is the k largest of these integers, so ties resolve
the same way whatever the tile size or the number of splits, and integer max never meets a NaN (float max
treats NaN differently on GPUs and in the interpreter).

Loads. Each scan reads its columns once: a masked head up to the row's first 16-byte boundary (the host
passes the logits' alignment, `RowLayout`), whole tiles unmasked from there (`tl.multiple_of` lets the
compiler emit 16-byte loads whatever V or the row stride), one masked tail tile.

Softmax. The running max `m` is taken over the keys (NaN counted as +inf, so it is NaN-free); the running
sum is a per-lane fp32 vector `s` rescaled by `exp(m_old - m_new)` when `m` grows, summed once at the end.
One `exp` per element.

Non-finite rows (identical for fused and split, decided in the kernels):
- indices always follow the order above and lie in `[0, V)`: NaN first (lowest index first), then +inf,
  then finite values, then -inf; an all -inf row gives 0, 1, ..., k-1;
- `topk_p` is NaN for the whole row when it holds a NaN or +inf (as torch's softmax) or is all -inf;
- otherwise -inf entries that make the top-k get probability 0.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from perfsuite.kernels import plan as plans

_NAN_KEY = tl.constexpr(0x7FFFFFFF)
"""Key of every NaN: above +inf's key (0x7F800000)."""
_EMPTY_KEY = tl.constexpr(-(2**31))
"""Key of a masked lane: below -inf's key (-0x7F800001)."""
_EMPTY = tl.constexpr(-(2**63))
"""Packed candidate of an empty slot: below every real candidate."""


# --------------------------------------------------------------------------------------------------------
# Device helpers
# --------------------------------------------------------------------------------------------------------


@triton.jit
def row_offset(row, stride):
    """`row * stride` in int64: in int32 it wraps once it passes 2^31 (e.g. 8192 rows x 262144 columns)."""
    return row.to(tl.int64) * stride


@triton.jit
def _order_key(x):
    """int32 key of fp32 `x`, monotone in the float order; -0.0 -> +0.0, NaN -> _NAN_KEY."""
    x = tl.where(x == 0.0, 0.0, x)
    bits = x.to(tl.int32, bitcast=True)
    key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return tl.where(x != x, _NAN_KEY, key)


@triton.jit
def _key_value(key):
    """The fp32 value of a key (NaN for _NAN_KEY)."""
    bits = tl.where(key < 0, key ^ 0x7FFFFFFF, key)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _pack(key, col):
    """int64 candidate: larger key first, then lower column first. Needs 0 <= col < 2^31."""
    return (key.to(tl.int64) << 32) | (0x7FFFFFFF - col.to(tl.int64))


@triton.jit
def _unpack(packed):
    """(fp32 value, int64 column) of packed candidates."""
    key = (packed >> 32).to(tl.int32)
    col = 0x7FFFFFFF - (packed & 0x7FFFFFFF)
    return _key_value(key), col.to(tl.int64)


@triton.jit
def _insert(run, packed, slots, K: tl.constexpr):
    """Merge the candidates `packed` (any size) into the sorted running top-k `run` (`[KP]`, descending).

    K rounds of "take the largest of both, remove it": candidates are distinct, so each round removes one.
    """
    out = tl.full(slots.shape, _EMPTY, tl.int64)
    for i in range(K):
        best = tl.maximum(tl.max(packed, axis=0), tl.max(run, axis=0))
        out = tl.where(slots == i, best, out)
        packed = tl.where(packed == best, _EMPTY, packed)
        run = tl.where(run == best, _EMPTY, run)
    return out


@triton.jit
def _kth(run, slots, K: tl.constexpr):
    """The k-th best packed candidate of a sorted running top-k (_EMPTY while fewer than k are known)."""
    return tl.max(tl.where(slots == K - 1, run, _EMPTY), axis=0)


@triton.jit
def _consume(x, key, cols, m, s, run, kth_key, slots, K: tl.constexpr):
    """Fold one tile into the scan state (m, s, run, kth_key); masked lanes hold x = -inf, key = _EMPTY_KEY.

    The tile's candidates are merged into the top-k only when its best key beats the current k-th one
    (tiles come in column order, so a tie with the k-th loses to it): most tiles skip the merge.
    """
    top_key = tl.max(key, axis=0)
    top = _key_value(top_key)
    top = tl.where(top != top, float("inf"), top)  # NaN counts as +inf
    top = tl.where(top_key == _EMPTY_KEY, float("-inf"), top)  # an empty tile (head or tail)
    m_new = tl.maximum(m, top)
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: exp(-inf - 0) = 0, not NaN
    s = s * tl.exp(m - shift) + tl.exp(x - shift)  # masked lanes hold -inf: exp gives 0
    if top_key > kth_key:
        packed = tl.where(key != _EMPTY_KEY, _pack(key, cols), _EMPTY)
        run = _insert(run, packed, slots, K)
        kth_key = (_kth(run, slots, K) >> 32).to(tl.int32)
    return m_new, s, run, kth_key


@triton.jit
def first_aligned(phase, col_start, col_end, VEC: tl.constexpr):
    """The first column >= col_start whose address is 16-byte aligned (VEC columns per 16 bytes), for a
    row starting `phase` columns past a 16-byte boundary; col_end when the range has none."""
    return tl.minimum(col_start + (VEC - (phase + col_start) % VEC) % VEC, col_end)


@triton.jit
def _load_masked(base_ptr, row_start, cols, col_end):
    """fp32 logits of `cols` (< col_end), -inf past it, and their keys (_EMPTY_KEY past it)."""
    mask = cols < col_end
    x = tl.load(base_ptr + row_start + cols, mask=mask, other=float("-inf")).to(tl.float32)
    return x, tl.where(mask, _order_key(x), _EMPTY_KEY)


@triton.jit
def _load_aligned(base_ptr, row_start, start, body_end, lanes, VEC: tl.constexpr, BLOCK: tl.constexpr):
    """The whole tile of columns `start + lanes` (`row_start + start` a multiple of VEC: 16-byte aligned
    from `base_ptr`) in the logits' dtype when it starts before `body_end`, else nothing: all lanes or none
    (a bound of BLOCK or 0), so the loads stay 16 bytes wide."""
    offset = tl.multiple_of(row_start + start, VEC)
    return tl.load(base_ptr + offset + lanes, mask=lanes < tl.where(start < body_end, BLOCK, 0), other=0.0)


@triton.jit
def _row_start(row, stride_row, base_phase):
    """Elements from the 16-byte boundary at `logits_ptr - base_phase` to the start of `row` (int64)."""
    return base_phase + row_offset(row, stride_row)


@triton.jit
def _scan(
    base_ptr,
    row_start,
    col_start,
    col_end,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """One pass over columns [col_start, col_end) of the row at `base_ptr + row_start`.

    Returns (max, sum of exp(x - max), running top-k). max: largest logit, NaN counted as +inf (-inf when
    every value is -inf). sum: fp32; NaN when the range holds a NaN or +inf. top-k: `[KP]` packed
    candidates, descending, _EMPTY past the range's length.
    Loads: `base_ptr` is a 16-byte boundary (the logits pointer minus its phase, `RowLayout`), so column c
    is aligned where `row_start + c` is a multiple of VEC. A masked head of fewer than VEC columns reaches
    the first aligned column, whole BLOCK tiles from there load unmasked and
    aligned (one 16-byte load per VEC columns, whatever V or the row stride), then one masked tail tile.
    PREFETCH: load tile t + 1 before reducing tile t (one more tile of registers).
    """
    slots = tl.arange(0, KP)
    lanes = tl.arange(0, BLOCK)
    run = tl.full([KP], _EMPTY, tl.int64)
    kth_key = tl.full([], _EMPTY_KEY, tl.int32)
    m = tl.full([], float("-inf"), tl.float32)
    aligned = first_aligned(row_start % VEC, col_start, col_end, VEC)
    head = col_start + tl.arange(0, VEC)
    x, key = _load_masked(base_ptr, row_start, head, aligned)
    m, s_head, run, kth_key = _consume(x, key, head, m, tl.zeros([VEC], tl.float32), run, kth_key, slots, K)
    s = tl.where(lanes == 0, tl.sum(s_head, axis=0), 0.0)
    body_end = aligned + (col_end - aligned) // BLOCK * BLOCK
    if PREFETCH:  # the next tile's loads are in flight while this one is reduced (a barrier per tile)
        ahead = _load_aligned(base_ptr, row_start, aligned, body_end, lanes, VEC, BLOCK)
        for start in range(aligned, body_end, BLOCK):
            xb = ahead.to(tl.float32)  # names of their own: x is [VEC] here
            ahead = _load_aligned(base_ptr, row_start, start + BLOCK, body_end, lanes, VEC, BLOCK)
            m, s, run, kth_key = _consume(xb, _order_key(xb), start + lanes, m, s, run, kth_key, slots, K)
    else:
        for start in range(aligned, body_end, BLOCK):
            xb = _load_aligned(base_ptr, row_start, start, body_end, lanes, VEC, BLOCK).to(tl.float32)
            m, s, run, kth_key = _consume(xb, _order_key(xb), start + lanes, m, s, run, kth_key, slots, K)
    tail = body_end + lanes
    x, key = _load_masked(base_ptr, row_start, tail, col_end)
    m, s, run, kth_key = _consume(x, key, tail, m, s, run, kth_key, slots, K)
    return m, tl.sum(s, axis=0), run


@triton.jit
def _write_topk(run, m, s, p_ptr, idx_ptr, slots, K: tl.constexpr):
    """Store `topk_p = exp(v - m) / s` and the columns; NaN probabilities when `m` is +-inf."""
    value, col = _unpack(run)
    p = tl.exp(value - m) / s
    p = tl.where((m == float("inf")) | (m == float("-inf")), float("nan"), p)
    keep = slots < K
    tl.store(p_ptr + slots, p, mask=keep)
    tl.store(idx_ptr + slots, col, mask=keep)


# --------------------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------------------


@triton.jit
def _fused_kernel(
    logits_ptr,
    p_ptr,
    idx_ptr,
    V,
    stride_row,
    base_phase,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """Program `row`: online softmax and running top-k over the whole row, then `[k]` outputs."""
    row = tl.program_id(0)
    row_start = _row_start(row, stride_row, base_phase)
    m, s, run = _scan(logits_ptr - base_phase, row_start, 0, V, K, KP, BLOCK, VEC, PREFETCH)
    slots = tl.arange(0, KP)
    _write_topk(run, m, s, p_ptr + row_offset(row, K), idx_ptr + row_offset(row, K), slots, K)


@triton.jit
def _partials_kernel(
    logits_ptr,
    max_ptr,
    sum_ptr,
    val_ptr,
    idx_ptr,
    V,
    stride_row,
    chunk,
    n_splits,
    index_offset,
    base_phase,
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """Program (row, split): the partial of columns [split * chunk, min((split + 1) * chunk, V))."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    start = split * chunk
    end = tl.minimum(start + chunk, V)
    row_start = _row_start(row, stride_row, base_phase)
    m, s, run = _scan(logits_ptr - base_phase, row_start, start, end, K, KP, BLOCK, VEC, PREFETCH)
    part = row_offset(row, n_splits) + split
    tl.store(max_ptr + part, m)
    tl.store(sum_ptr + part, s)
    slots = tl.arange(0, KP)
    value, col = _unpack(run)
    filled = run != _EMPTY
    keep = slots < K
    tl.store(val_ptr + part * K + slots, tl.where(filled, value, float("-inf")), mask=keep)
    tl.store(idx_ptr + part * K + slots, tl.where(filled, col + index_offset, -1), mask=keep)


@triton.jit
def _merge_kernel(
    max_ptr,
    sum_ptr,
    val_ptr,
    idx_ptr,
    p_ptr,
    out_idx_ptr,
    n_parts,
    part_k,
    K: tl.constexpr,
    KP: tl.constexpr,
    TILE: tl.constexpr,
    PART_TILE: tl.constexpr,
):
    """Program `row`: combine `n_parts` partials (max, sum-exp, top-`part_k`) into the exact top-k."""
    row = tl.program_id(0)
    base = row_offset(row, n_parts)
    # Softmax: M = max of the partial maxima (NaN-free by construction), S = sum of rescaled sums.
    parts = tl.arange(0, PART_TILE)
    m = tl.full([], float("-inf"), tl.float32)
    for start in range(0, n_parts, PART_TILE):
        j = start + parts
        mj = tl.load(max_ptr + base + j, mask=j < n_parts, other=float("-inf"))
        m = tl.maximum(m, tl.max(mj, axis=0))
    s = tl.zeros([PART_TILE], tl.float32)
    for start in range(0, n_parts, PART_TILE):
        j = start + parts
        mj = tl.load(max_ptr + base + j, mask=j < n_parts, other=float("-inf"))
        sj = tl.load(sum_ptr + base + j, mask=j < n_parts, other=0.0)
        s += sj * tl.where(mj == float("-inf"), 0.0, tl.exp(mj - m))
    total = tl.sum(s, axis=0)
    # Top-k: the k largest packed candidates over every partial's slots (index -1 marks an empty slot).
    slots = tl.arange(0, KP)
    lanes = tl.arange(0, TILE)
    run = tl.full([KP], _EMPTY, tl.int64)
    kth = tl.full([], _EMPTY, tl.int64)
    n_cand = n_parts * part_k
    cand_base = base * part_k
    for start in range(0, n_cand, TILE):
        c = start + lanes
        inside = c < n_cand
        idx = tl.load(idx_ptr + cand_base + c, mask=inside, other=-1)
        val = tl.load(val_ptr + cand_base + c, mask=inside, other=float("-inf"))
        packed = tl.where(idx >= 0, _pack(_order_key(val), idx), _EMPTY)
        if tl.max(packed, axis=0) > kth:
            run = _insert(run, packed, slots, K)
            kth = _kth(run, slots, K)
    _write_topk(run, m, total, p_ptr + row_offset(row, K), out_idx_ptr + row_offset(row, K), slots, K)


# --------------------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------------------


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

KERNELS = {"fused": _fused_kernel, "partials": _partials_kernel, "merge": _merge_kernel}

POINTER_TYPES = {
    "logits_ptr": "input",
    "p_ptr": "fp32",
    "max_ptr": "fp32",
    "sum_ptr": "fp32",
    "val_ptr": "fp32",
    "idx_ptr": "i64",
    "out_idx_ptr": "i64",
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
        kernel[self.grid](*tensors, **self.scalars, **self.constants, num_warps=self.num_warps)


@dataclass(frozen=True)
class RowLayout:
    """How a `[B, V]` logits tensor sits in memory: what the scans need to align their loads."""

    stride: int  # elements between row starts
    phase: int  # the first row's start, in elements past a 16-byte boundary
    element_size: int

    @staticmethod
    def of(logits: torch.Tensor) -> RowLayout:
        size = logits.element_size()
        return RowLayout(logits.stride(0), (logits.data_ptr() // size) % (ALIGN_BYTES // size), size)

    @staticmethod
    def contiguous(vocab: int, element_size: int) -> RowLayout:
        """A freshly allocated `[B, vocab]` tensor (allocators return 16-byte aligned storage)."""
        return RowLayout(vocab, 0, element_size)

    @property
    def vec(self) -> int:
        """Columns per 16-byte load."""
        return ALIGN_BYTES // self.element_size


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
    scalars = {"V": vocab, "stride_row": layout.stride, "base_phase": layout.phase}
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
        "base_phase": layout.phase,
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


def _tunables(plan: plans.Plan) -> dict[str, int | bool]:
    return {"block": plan.block, "num_warps": plan.num_warps, "prefetch": plan.prefetch}


def plan_launches(batch: int, vocab: int, k: int, plan: plans.Plan, layout: RowLayout) -> list[Launch]:
    """The launches `run_plan` makes for this shape, layout and plan."""
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
        launch = fused_launch(batch, vocab, k, RowLayout.of(logits), **tunables)
        with _device_guard(logits):
            launch(logits, topk_p, topk_index)
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
    launch = partials_launch(
        batch,
        vocab,
        k,
        RowLayout.of(logits),
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
            launch(logits, part_max, part_sum, values, indices)
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


def run_plan(logits: torch.Tensor, k: int, plan: plans.Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel a plan names with its tunables."""
    if plan.kernel == "fused":
        return fused_topk_softmax(logits, k, **_tunables(plan))
    return split_topk_softmax(logits, k, chunk=plan.chunk, **_tunables(plan))

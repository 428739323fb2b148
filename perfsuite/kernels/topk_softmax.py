"""Exact top-k softmax in Triton: a fused single pass, and a split-vocabulary two-stage kernel.

Both return `(topk_p float32 [B, k], topk_index int64 [B, k])` with `topk_p = softmax(logits)` at the
selected indices, computed in fp32 from one read of the logits.

Order. Every value is mapped to a 32-bit integer key that is monotone in the float order (the sign-magnitude
trick), with -0.0 mapped to +0.0's key and every NaN to one key above +inf. A candidate is the int64
`key << 32 | (2^31 - 1 - column)`: distinct per column, and descending int64 order is exactly "descending
logit, lowest index first, NaN above +inf". The top-k is the k largest of these integers, so ties resolve
the same way whatever the tile size or the number of splits, and integer max never meets a NaN (float max
treats NaN differently on GPUs and in the interpreter).

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
def _scan(row_ptr, col_start, col_end, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr):
    """One pass over columns [col_start, col_end) of a row: (max, sum of exp(x - max), running top-k).

    max: largest logit, NaN counted as +inf (-inf when every value is -inf). sum: fp32; NaN when the range
    holds a NaN or +inf. top-k: `[KP]` packed candidates, descending, _EMPTY past the range's length.
    A tile's candidates are merged into the top-k only when the tile's best key beats the current k-th one
    (tiles come in column order, so a tie with the k-th loses to it): most tiles skip the merge.
    """
    lanes = tl.arange(0, BLOCK)
    slots = tl.arange(0, KP)
    run = tl.full([KP], _EMPTY, tl.int64)
    kth_key = tl.full([], _EMPTY_KEY, tl.int32)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(col_start, col_end, BLOCK):
        cols = start + lanes
        mask = cols < col_end
        x = tl.load(row_ptr + cols, mask=mask, other=float("-inf")).to(tl.float32)
        key = tl.where(mask, _order_key(x), _EMPTY_KEY)
        top_key = tl.max(key, axis=0)
        top = _key_value(top_key)
        top = tl.where(top != top, float("inf"), top)
        m_old = m
        m = tl.maximum(m, top)
        shift = tl.where(m == float("-inf"), 0.0, m)  # all -inf so far: exp(-inf - 0) = 0, not NaN
        s = s * tl.exp(m_old - shift) + tl.exp(x - shift)  # masked lanes hold -inf: exp gives 0
        if top_key > kth_key:
            packed = tl.where(mask, _pack(key, cols), _EMPTY)
            run = _insert(run, packed, slots, K)
            kth_key = (_kth(run, slots, K) >> 32).to(tl.int32)
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
    logits_ptr, p_ptr, idx_ptr, V, stride_row, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr
):
    """Program `row`: online softmax and running top-k over the whole row, then `[k]` outputs."""
    row = tl.program_id(0)
    m, s, run = _scan(logits_ptr + row_offset(row, stride_row), 0, V, K, KP, BLOCK)
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
    K: tl.constexpr,
    KP: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Program (row, split): the partial of columns [split * chunk, min((split + 1) * chunk, V))."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    start = split * chunk
    end = tl.minimum(start + chunk, V)
    m, s, run = _scan(logits_ptr + row_offset(row, stride_row), start, end, K, KP, BLOCK)
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


def _slots(k: int) -> int:
    """Width of the running top-k vector: a power of two >= k (at least 2)."""
    return max(2, triton.next_power_of_2(k))


def _tile(block: int, columns: int) -> int:
    """`block` shrunk to the smallest power of two covering `columns` (at least 16)."""
    return max(16, min(block, triton.next_power_of_2(max(columns, 1))))


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
    logits: torch.Tensor, k: int, *, block: int = plans.FUSED_BLOCK, num_warps: int = plans.FUSED_NUM_WARPS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k softmax, one program per row, one pass over the logits (grid `(B,)`)."""
    _check(logits, k)
    batch, vocab = logits.shape
    topk_p, topk_index = _outputs(batch, k, logits.device)
    if batch == 0:
        return topk_p, topk_index
    with _device_guard(logits):
        _fused_kernel[(batch,)](
            logits,
            topk_p,
            topk_index,
            vocab,
            logits.stride(0),
            K=k,
            KP=_slots(k),
            BLOCK=_tile(block, vocab),
            num_warps=num_warps,
        )
    return topk_p, topk_index


def row_partials(
    logits: torch.Tensor,
    k: int,
    *,
    n_splits: int | None = None,
    chunk: int | None = None,
    block: int = plans.SPLIT_BLOCK,
    num_warps: int = plans.SPLIT_NUM_WARPS,
    index_offset: int = 0,
) -> Partials:
    """Stage 1 of the split kernel: each row cut into chunks, one program per (row, chunk) (grid `(B, S)`).

    Give `chunk` (columns per split) or `n_splits`; by default the plan for this shape. Indices are
    global columns plus `index_offset` (a tensor-parallel rank's first vocabulary column).
    """
    _check(logits, k)
    batch, vocab = logits.shape
    if chunk is None:
        if n_splits is None:
            n_splits = plans.split_plan(batch, vocab, k, plans.sm_count(logits.device)).n_splits
        chunk = -(-vocab // max(1, n_splits))
    chunk = max(1, chunk)
    n_splits = -(-vocab // chunk)
    device = logits.device
    part_max = torch.empty((batch, n_splits), dtype=torch.float32, device=device)
    part_sum = torch.empty((batch, n_splits), dtype=torch.float32, device=device)
    values = torch.empty((batch, n_splits, k), dtype=torch.float32, device=device)
    indices = torch.empty((batch, n_splits, k), dtype=torch.int64, device=device)
    if batch > 0:
        with _device_guard(logits):
            _partials_kernel[(batch, n_splits)](
                logits,
                part_max,
                part_sum,
                values,
                indices,
                vocab,
                logits.stride(0),
                chunk,
                n_splits,
                index_offset,
                K=k,
                KP=_slots(k),
                BLOCK=_tile(block, chunk),
                num_warps=num_warps,
            )
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
    if batch == 0:
        return topk_p, topk_index
    with _device_guard(part_max):
        _merge_kernel[(batch,)](
            part_max,
            part_sum,
            values,
            indices,
            topk_p,
            topk_index,
            n_parts,
            part_k,
            K=k,
            KP=_slots(k),
            TILE=_tile(tile, n_parts * part_k),
            PART_TILE=_tile(part_tile, n_parts),
            num_warps=num_warps,
        )
    return topk_p, topk_index


def split_topk_softmax(
    logits: torch.Tensor,
    k: int,
    *,
    n_splits: int | None = None,
    chunk: int | None = None,
    block: int = plans.SPLIT_BLOCK,
    num_warps: int = plans.SPLIT_NUM_WARPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact top-k softmax in two stages: `row_partials` over (row, chunk), then `merge_partials`."""
    partials = row_partials(logits, k, n_splits=n_splits, chunk=chunk, block=block, num_warps=num_warps)
    return merge_partials(partials, k)


def run_plan(logits: torch.Tensor, k: int, plan: plans.Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch the kernel a plan names with its tunables."""
    if plan.kernel == "fused":
        return fused_topk_softmax(logits, k, block=plan.block, num_warps=plan.num_warps)
    return split_topk_softmax(logits, k, chunk=plan.chunk, block=plan.block, num_warps=plan.num_warps)

"""The Triton device code: order keys, the running top-k, the aligned scans, the exact top-k softmax kernels
(fused; split partials and merge) and the argmax kernels on the same keys and scans (docs/triton.md)."""

from __future__ import annotations

import triton
import triton.language as tl

_NAN_KEY = tl.constexpr(0x7FFFFFFF)  # key of every NaN: above +inf's (0x7F800000)
_EMPTY_KEY = tl.constexpr(-(2**31))  # key of a masked lane: below -inf's (-0x7F800001)
_EMPTY = tl.constexpr(-(2**63))  # packed candidate of an empty slot: below every real one

# Integer arguments of each kernel that Triton does not specialise on their value (`do_not_specialize`).
UNSPECIALISED = {
    "fused": (), "partials": ("n_splits", "index_offset"), "merge": ("n_parts", "part_k"), "argmax": (),
    "argmax_partials": ("n_splits",), "argmax_merge": ("n_parts",),
}  # fmt: skip


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
    """Merge the (distinct) candidates `packed` into the descending running top-k `run`: K rounds of "take
    the largest of both, remove it"."""
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
    """Fold one tile into the scan state (masked lanes: x = -inf, key = _EMPTY_KEY); only a tile whose best
    key beats the k-th one is merged (tiles come in column order: a tie loses)."""
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
    """The first 16-byte aligned column >= col_start of a row starting `phase` columns past a boundary (VEC
    columns per 16 bytes); col_end when the range has none."""
    return tl.minimum(col_start + (VEC - (phase + col_start) % VEC) % VEC, col_end)


@triton.jit
def _load_masked(base_ptr, row_start, cols, col_end):
    """fp32 logits of `cols` (< col_end), -inf past it, and their keys (_EMPTY_KEY past it)."""
    mask = cols < col_end
    x = tl.load(base_ptr + row_start + cols, mask=mask, other=float("-inf")).to(tl.float32)
    return x, tl.where(mask, _order_key(x), _EMPTY_KEY)


@triton.jit
def _load_aligned(base_ptr, row_start, start, body_end, lanes, VEC: tl.constexpr, BLOCK: tl.constexpr):
    """The aligned tile of columns `start + lanes` when it starts before `body_end`, else nothing: all
    lanes or none, so the loads stay 16 bytes wide."""
    offset = tl.multiple_of(row_start + start, VEC)
    return tl.load(base_ptr + offset + lanes, mask=lanes < tl.where(start < body_end, BLOCK, 0), other=0.0)


@triton.jit
def _row_start(row, stride_row, shift):
    """Elements from the base pointer (`shift` elements below the first row's start) to `row`'s start."""
    return shift + row_offset(row, stride_row)


@triton.jit
def _scan(
    base_ptr, row_start, col_start, col_end, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr,
    VEC: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """(max, NaN counted as +inf; sum of exp(x - max); `[KP]` packed top-k, descending) of columns
    [col_start, col_end): a masked head to the first 16-byte boundary, aligned BLOCK tiles, a masked tail."""
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


@triton.jit
def _fused_kernel(
    base_ptr, p_ptr, idx_ptr, V, stride_row, shift, K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr,
    VEC: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """Program `row`: online softmax and running top-k over the whole row, then `[k]` outputs."""
    row = tl.program_id(0)
    row_start = _row_start(row, stride_row, shift)
    m, s, run = _scan(base_ptr, row_start, 0, V, K, KP, BLOCK, VEC, PREFETCH)
    slots = tl.arange(0, KP)
    _write_topk(run, m, s, p_ptr + row_offset(row, K), idx_ptr + row_offset(row, K), slots, K)


@triton.jit(do_not_specialize=UNSPECIALISED["partials"])
def _partials_kernel(
    base_ptr, max_ptr, sum_ptr, val_ptr, idx_ptr, V, stride_row, chunk, n_splits, index_offset, shift,
    K: tl.constexpr, KP: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr, PREFETCH: tl.constexpr,
):  # fmt: skip
    """Program (row, split): the partial of columns [split * chunk, min((split + 1) * chunk, V))."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    start = split * chunk
    end = tl.minimum(start + chunk, V)
    row_start = _row_start(row, stride_row, shift)
    m, s, run = _scan(base_ptr, row_start, start, end, K, KP, BLOCK, VEC, PREFETCH)
    part = row_offset(row, n_splits) + split
    tl.store(max_ptr + part, m)
    tl.store(sum_ptr + part, s)
    slots = tl.arange(0, KP)
    value, col = _unpack(run)
    filled = run != _EMPTY
    keep = slots < K
    tl.store(val_ptr + part * K + slots, tl.where(filled, value, float("-inf")), mask=keep)
    tl.store(idx_ptr + part * K + slots, tl.where(filled, col + index_offset, -1), mask=keep)


@triton.jit(do_not_specialize=UNSPECIALISED["merge"])
def _merge_kernel(
    max_ptr, sum_ptr, val_ptr, idx_ptr, p_ptr, out_idx_ptr, n_parts, part_k, K: tl.constexpr,
    KP: tl.constexpr, TILE: tl.constexpr, PART_TILE: tl.constexpr,
):  # fmt: skip
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


# Argmax: the same order keys and aligned loads, one pass, no exp and no sum.
_NO_COL = tl.constexpr(0x7FFFFFFF)  # column of a lane that has seen none yet: above every real one (V < 2^31)


@triton.jit
def _argmax_fold(key, cols, best_key, best_col):
    """Per lane: keep the larger key; on equal keys the earlier column (tiles come in column order)."""
    better = key > best_key
    return tl.where(better, key, best_key), tl.where(better, cols.to(tl.int32), best_col)


@triton.jit
def _argmax_scan(
    base_ptr, row_start, col_start, col_end, BLOCK: tl.constexpr, VEC: tl.constexpr, PREFETCH: tl.constexpr
):
    """(key, column) of the first maximum of columns [col_start, col_end) on `_scan`'s loads: each lane keeps
    its best key and column, reduced once at the end."""
    lanes = tl.arange(0, BLOCK)
    aligned = first_aligned(row_start % VEC, col_start, col_end, VEC)
    head = col_start + tl.arange(0, VEC)
    _, head_key = _load_masked(base_ptr, row_start, head, aligned)
    top = tl.max(head_key, axis=0)
    first = tl.min(tl.where(head_key == top, head.to(tl.int32), _NO_COL), axis=0)
    best_key = tl.where(lanes == 0, top, _EMPTY_KEY)
    best_col = tl.where(lanes == 0, first, _NO_COL)
    body_end = aligned + (col_end - aligned) // BLOCK * BLOCK
    if PREFETCH:
        ahead = _load_aligned(base_ptr, row_start, aligned, body_end, lanes, VEC, BLOCK)
        for start in range(aligned, body_end, BLOCK):
            xb = ahead.to(tl.float32)
            ahead = _load_aligned(base_ptr, row_start, start + BLOCK, body_end, lanes, VEC, BLOCK)
            best_key, best_col = _argmax_fold(_order_key(xb), start + lanes, best_key, best_col)
    else:
        for start in range(aligned, body_end, BLOCK):
            xb = _load_aligned(base_ptr, row_start, start, body_end, lanes, VEC, BLOCK).to(tl.float32)
            best_key, best_col = _argmax_fold(_order_key(xb), start + lanes, best_key, best_col)
    tail = body_end + lanes
    _, tail_key = _load_masked(base_ptr, row_start, tail, col_end)
    best_key, best_col = _argmax_fold(tail_key, tail, best_key, best_col)
    top = tl.max(best_key, axis=0)
    return top, tl.min(tl.where(best_key == top, best_col, _NO_COL), axis=0)


@triton.jit
def _argmax_kernel(
    base_ptr, p_ptr, idx_ptr, V, stride_row, shift, BLOCK: tl.constexpr, VEC: tl.constexpr,
    PREFETCH: tl.constexpr,
):  # fmt: skip
    """Program `row`: the first maximum of the whole row, and `topk_p = 1.0`."""
    row = tl.program_id(0)
    _, col = _argmax_scan(base_ptr, _row_start(row, stride_row, shift), 0, V, BLOCK, VEC, PREFETCH)
    tl.store(idx_ptr + row, col.to(tl.int64))
    tl.store(p_ptr + row, tl.full([], 1.0, tl.float32))


@triton.jit(do_not_specialize=UNSPECIALISED["argmax_partials"])
def _argmax_partials_kernel(
    base_ptr, cand_ptr, V, stride_row, chunk, n_splits, shift, BLOCK: tl.constexpr, VEC: tl.constexpr,
    PREFETCH: tl.constexpr,
):  # fmt: skip
    """Program (row, split): the packed first maximum of columns [split * chunk, (split + 1) * chunk)."""
    row = tl.program_id(0)
    split = tl.program_id(1)
    start = split * chunk
    end = tl.minimum(start + chunk, V)
    key, col = _argmax_scan(base_ptr, _row_start(row, stride_row, shift), start, end, BLOCK, VEC, PREFETCH)
    tl.store(cand_ptr + row_offset(row, n_splits) + split, _pack(key, col))


@triton.jit(do_not_specialize=UNSPECIALISED["argmax_merge"])
def _argmax_merge_kernel(cand_ptr, p_ptr, idx_ptr, n_parts, PART_TILE: tl.constexpr):
    """Program `row`: the column of the largest of `n_parts` packed candidates and `topk_p = 1.0`."""
    row = tl.program_id(0)
    base = row_offset(row, n_parts)
    parts = tl.arange(0, PART_TILE)
    best = tl.full([], _EMPTY, tl.int64)
    for start in range(0, n_parts, PART_TILE):
        j = start + parts
        best = tl.maximum(best, tl.max(tl.load(cand_ptr + base + j, mask=j < n_parts, other=_EMPTY), axis=0))
    _, col = _unpack(best)
    tl.store(idx_ptr + row, col)
    tl.store(p_ptr + row, tl.full([], 1.0, tl.float32))

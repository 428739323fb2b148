"""Selectors with the bugs engines have shipped, each declared with the contract a real kernel would carry
(for tests/test_conformance.py, imported as `broken_selectors:<function>` with tests/data on sys.path).
The battery must catch each one with the right verdict; with plain torch ops they stand in for kernels."""

from __future__ import annotations

import weakref

import torch

from perfsuite.variants.external import selector


def _top(x: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k indices, descending value, lowest index first on ties (a stable sort)."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[..., :k]


def _softmax_at(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    x = logits.float()
    row_max = x.amax(dim=-1, keepdim=True)
    return torch.exp(x.gather(-1, index) - row_max) / torch.exp(x - row_max).sum(dim=-1, keepdim=True)


TILE = 64


@selector(accuracy="inexact", outputs="indices", index_dtype="int32", preallocated=True)
def unmasked_tail(logits: torch.Tensor, k: int, out_index: torch.Tensor) -> None:
    """Greedy argmax whose vector tail is not masked: every row is read in whole tiles of 64, past V
    into whatever follows it (the padding of a row-strided view, the next row)."""
    batch, vocab = logits.shape
    stride, start = logits.stride(0), logits.storage_offset()
    storage = logits.untyped_storage().nbytes() // logits.element_size()
    tiles = -(-vocab // TILE) * TILE
    width = min(tiles, storage - start - (batch - 1) * stride)  # what lies past the last row, at most
    wide = torch.as_strided(logits, (batch, width), (stride, 1), start)
    out_index.copy_(_top(wide, k))


@selector(accuracy="exact")
def highest_index_ties(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact, but ties go to the highest index (a reduction that keeps the last maximum), while the
    contract claims the lowest (the default)."""
    vocab = logits.shape[-1]
    index = vocab - 1 - _top(logits.flip(-1), k)
    return _softmax_at(logits, index), index


@selector(accuracy="exact")
def ones_claimed_exact(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The argmax shortcut, `topk_p = 1.0`, declared exact."""
    index = _top(logits, k)
    return torch.ones(index.shape, dtype=torch.float32, device=logits.device), index


@selector(accuracy="inexact", outputs="indices")
def nan_to_vocab(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Argmax that skips NaN and returns V (one past the end) for a row holding one."""
    index = _top(logits.nan_to_num(nan=float("-inf"), posinf=float("inf")), k)
    has_nan = torch.isnan(logits).any(dim=-1, keepdim=True)
    return torch.where(has_nan, torch.full_like(index, logits.shape[-1]), index)


@selector(accuracy="inexact", outputs="indices", index_dtype="int32", preallocated=True)
def int32_row_offsets(logits: torch.Tensor, k: int, out_index: torch.Tensor) -> None:
    """Argmax whose row offset `row * stride` is computed in 32 bits: past 2^32 elements it wraps
    (modulo 2^32) and the row is read from the wrong place of the buffer."""
    batch, vocab = logits.shape
    stride, start = logits.stride(0), logits.storage_offset()
    for row in range(batch):
        offset = (start + row * stride) % (1 << 32)
        read = torch.as_strided(logits, (1, vocab), (stride, 1), offset)
        out_index[row].copy_(_top(read, k)[0])


@selector(accuracy="exact")
def syncs_on_host(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact, but asks the host whether the logits hold a NaN (a sync: no graph capture)."""
    if bool(torch.isnan(logits).any()):
        logits = logits.nan_to_num(nan=float("-inf"))
    index = _top(logits, k)
    return _softmax_at(logits, index), index


@selector(accuracy="exact")
def masks_nan_rows(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact, but cleans the rows holding a NaN through a boolean mask, `x[bad]`: the mask becomes indices
    with nonzero, whose size the host reads (a sync: no graph capture)."""
    x = logits.clone()
    bad = torch.isnan(x).any(dim=-1)
    x[bad] = x[bad].nan_to_num(nan=float("-inf"))
    index = _top(x, k)
    return _softmax_at(x, index), index


@selector(accuracy="exact")
def host_row_index(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact, but picks the rows to sample with row ids built on the host, `logits[torch.arange(B)]`: the
    index is copied from pageable host memory to the device (no graph capture)."""
    rows = logits[torch.arange(logits.shape[0])]
    index = _top(rows, k)
    return _softmax_at(rows, index), index


_STAGED: dict[int, tuple[weakref.ref, int, torch.Tensor]] = {}
"""id(logits) -> (the logits, their version when staged, the staged copy)."""


@selector(accuracy="exact")
def stale_staging(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact eagerly, but copies the logits into a staging buffer only when the host sees them change
    (the tensor's version counter): a graph replays without that Python, on the stale copy."""
    held = _STAGED.get(id(logits))
    if held is not None and held[0]() is logits and held[1] == logits._version:
        staged = held[2]
    else:
        staged = logits.clone()
        _STAGED[id(logits)] = (weakref.ref(logits), logits._version, staged)
    index = _top(staged, k)
    return _softmax_at(staged, index), index


@selector(accuracy="exact")
def naive_softmax(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`exp(x) / sum(exp(x))` without subtracting the max: huge logits overflow to inf / inf = NaN."""
    index = _top(logits, k)
    e = torch.exp(logits.float())
    return e.gather(-1, index) / e.sum(dim=-1, keepdim=True), index


@selector(accuracy="exact")
def aligned_only(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A kernel that refuses a vocabulary not a multiple of 8 (raises)."""
    if logits.shape[-1] % 8:
        raise ValueError(f"vocab {logits.shape[-1]} must be a multiple of 8\n(a second line)")
    index = _top(logits, k)
    return _softmax_at(logits, index), index


def _radix_keys(x: torch.Tensor) -> torch.Tensor:
    """The fp32 upcast's bit patterns as int64 keys that sort as the floats do, but for -0.0 < +0.0: the
    radix-select mapping without the step that makes the two zeros one key."""
    bits = x.float().view(torch.int32).long() & 0xFFFFFFFF
    return torch.where(bits >= 1 << 31, 0xFFFFFFFF - bits, bits + (1 << 31))


def _top_keys(keys: torch.Tensor, k: int) -> torch.Tensor:
    return torch.sort(keys, dim=-1, descending=True, stable=True).indices[..., :k]


@selector(accuracy="exact")
def careless_radix(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Radix-select order keys from the float bits, -0.0 left below +0.0 (they are equal: the lower index
    must win a tie of the two)."""
    index = _top_keys(_radix_keys(logits), k)
    return _softmax_at(logits, index), index


@selector(accuracy="exact")
def packed_31_bit_keys(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Order keys packed into 31 bits (a flag in the lowest): the fp32 value's last mantissa bit is
    dropped, so values one ulp apart tie and the lower index wins."""
    keys = _radix_keys(logits + 0.0) & ~1  # + 0.0: -0.0 becomes +0.0, the careful step
    index = _top_keys(keys, k)
    return _softmax_at(logits, index), index


VECTOR = 4


@selector(accuracy="exact")
def vector_of_four(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Loads 4-wide vectors, the last one masked, but a row shorter than one vector takes a path without
    the mask: the whole vector is read, past V into what follows the row."""
    batch, vocab = logits.shape
    if vocab < VECTOR:
        logits = torch.as_strided(logits, (batch, VECTOR), (logits.stride(0), 1), logits.storage_offset())
    index = _top(logits, k)
    return _softmax_at(logits, index), index


SPARSE_SHARE = 0.9


@selector(accuracy="exact")
def sparse_mask_path(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows over 90 % masked (-inf) take a compacted path that returns the chosen finite tokens in index
    order, never sorted by value (the -inf padding after them, lowest index first, is right)."""
    index = _top(logits, k)
    finite = torch.isfinite(logits.gather(-1, index))
    by_index = torch.sort(torch.where(finite, index, index + logits.shape[-1]), dim=-1).values
    unsorted = torch.where(by_index >= logits.shape[-1], by_index - logits.shape[-1], by_index)
    sparse = (logits == float("-inf")).float().mean(dim=-1, keepdim=True) > SPARSE_SHARE
    index = torch.where(sparse, unsorted, index)
    return _softmax_at(logits, index), index


def _tie_order(logits: torch.Tensor, k: int, highest_first: bool) -> torch.Tensor:
    """Top-k indices, ties to the lowest index, or to the highest with `highest_first`."""
    return logits.shape[-1] - 1 - _top(logits.flip(-1), k) if highest_first else _top(logits, k)


_CALLS = [0]


@selector(accuracy="exact", lowest_index_ties=False)
def arrival_order_ties(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A split kernel merging its partials in arrival order: which of equal logits wins changes from call
    to call (here: every other call the highest index). It claims no tie order, so one call passes."""
    _CALLS[0] += 1
    index = _tie_order(logits, k, highest_first=_CALLS[0] % 2 == 0)
    return _softmax_at(logits, index), index


@selector(accuracy="exact", lowest_index_ties=False)
def batch_size_ties(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A plan picked by batch size: one row alone runs a kernel whose ties go to the lowest index, a
    batch one whose ties go to the highest, so a row's tokens depend on the rows beside it."""
    index = _tie_order(logits, k, highest_first=logits.shape[0] > 1)
    return _softmax_at(logits, index), index


@selector(accuracy="exact", nan="smallest")
def nan_claimed_smallest(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Declares SGLang's NaN policy (NaN below every number) but sorts with torch, where NaN is largest."""
    index = _top(logits, k)
    return _softmax_at(logits, index), index


@selector(accuracy="exact")
def default_stream(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact, but launches its work on the default stream, whatever stream the caller made current (on a
    CPU there are no streams: it passes there)."""
    if not logits.is_cuda:
        index = _top(logits, k)
        return _softmax_at(logits, index), index
    with torch.cuda.stream(torch.cuda.default_stream(logits.device)):
        index = _top(logits, k)
        return _softmax_at(logits, index), index


def _large_batch_path(threshold: int, wrong: str):
    """An exact selector whose path for batches of `threshold` rows and more (a plan picked by row count) is
    wrong, `wrong` saying how: "ties" to the highest index, "bf16" probabilities, "last_row" left unwritten,
    "tail" the vocabulary's last partial 256-column tile never read, "raises" (a launch that fails)."""

    @selector(accuracy="exact")
    def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        large = logits.shape[0] >= threshold
        if large and wrong == "raises":
            raise RuntimeError(f"grid of {logits.shape[0]} programs exceeds the launch limit")
        read = logits[:, : max(k, logits.shape[-1] // 256 * 256)] if large and wrong == "tail" else logits
        index = _tie_order(read, k, highest_first=large and wrong == "ties")
        p = _softmax_at(logits.bfloat16() if large and wrong == "bf16" else logits, index)
        if large and wrong == "last_row":
            p[-1], index[-1] = 0.0, 0
        return p, index

    select.__doc__ = f"wrong from {threshold} rows up: {wrong}"
    return select


ties_from_17 = _large_batch_path(17, "ties")
bf16_from_64 = _large_batch_path(64, "bf16")
last_row_from_257 = _large_batch_path(257, "last_row")
bf16_from_1024 = _large_batch_path(1024, "bf16")
tail_from_129 = _large_batch_path(129, "tail")
raises_from_1025 = _large_batch_path(1025, "raises")

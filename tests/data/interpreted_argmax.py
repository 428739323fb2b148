"""A small masked Triton argmax of this project's own (not engine code), for tests/test_conformance.py:
one program per row, a loop over BLOCK-wide tiles with the tail masked to -inf, the first maximum (lowest
index on ties). It is correct on every float a GPU loads; in Triton's CPU interpreter (TRITON_INTERPRET=1)
bf16 subnormals are converted wrongly, so there its bf16 subnormal rows come out wrong: the battery must
name the interpreter, not fail the kernel."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from perfsuite.variants.external import selector

BLOCK = 1024


@triton.jit
def _argmax_rows(x_ptr, out_ptr, stride, vocab, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row.to(tl.int64) * stride
    lanes = tl.arange(0, BLOCK)
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    best_index = lanes.to(tl.int64)  # an all -inf row: lane 0, column 0
    for start in range(0, vocab, BLOCK):
        columns = start + lanes
        x = tl.load(base + columns, mask=columns < vocab, other=float("-inf")).to(tl.float32)
        better = x > best  # strictly greater: the earlier column keeps a tie
        best_index = tl.where(better, columns.to(tl.int64), best_index)
        best = tl.where(better, x, best)
    top = tl.max(best, axis=0)
    tl.store(out_ptr + row, tl.min(tl.where(best == top, best_index, vocab), axis=0))


@selector(accuracy="inexact", outputs="indices", preallocated=True, max_k=1)
def masked_argmax(logits: torch.Tensor, k: int, out_index: torch.Tensor) -> None:
    """The first maximum of each row, one Triton program per row."""
    _argmax_rows[(logits.shape[0],)](logits, out_index, logits.stride(0), logits.shape[1], BLOCK=BLOCK)

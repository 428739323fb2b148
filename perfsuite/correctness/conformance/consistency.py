"""What one call cannot show: repeatability (a split kernel merging its partials in arrival order returns
other ties on the next call), batch invariance (a plan that depends on the batch size) and the stream the
work runs on (`on_side_stream`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from perfsuite import simulated_gpu
from perfsuite.correctness import edge_cases
from perfsuite.correctness.conformance.judge import PASS, Verdict
from perfsuite.correctness.parity import tolerance
from perfsuite.variants.base import Variant


def repeat(first: edge_cases.Outputs, second: edge_cases.Outputs | str) -> Verdict:
    """The second call on the same logits against the first: bitwise the same outputs."""
    if isinstance(second, str):
        return Verdict("FAIL", "not_repeatable", f"the second call raised: {second}")
    bits = [p.contiguous().view(torch.int32) for p in (first[0], second[0])]
    differ = (first[1] != second[1]) | (bits[0] != bits[1])
    if not bool(differ.any()):
        return PASS
    r, s = (int(v) for v in differ.nonzero()[0])
    detail = (
        f"{int(differ.sum())} of {differ.numel()} slots differ between two calls on the same logits, e.g. "
        f"row {r} slot {s}: index {int(first[1][r, s])} then {int(second[1][r, s])}, topk_p "
        f"{float(first[0][r, s]):.6g} then {float(second[0][r, s]):.6g}"
    )
    return Verdict("FAIL", "not_repeatable", detail)


def other_batches(logits: torch.Tensor) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(what, logits, the original row of each row) of the rows reversed (a fresh contiguous copy) and row 0
    alone (a view): the batches a row is also called in; none for a single row."""
    if logits.shape[0] < 2:
        return []
    return [
        ("the rows reversed", logits.flip(0), torch.arange(logits.shape[0] - 1, -1, -1)),
        ("row 0 alone", logits[:1], torch.tensor([0])),
    ]


def batch(variant: Variant, logits: torch.Tensor, k: int, first: edge_cases.Outputs) -> tuple[Verdict, float]:
    """`first` (the call on the whole batch) against the calls on `other_batches`; the largest `topk_p`
    difference seen."""
    rtol, atol = tolerance(variant.accuracy, logits.dtype)
    worst = 0.0
    failed = lambda detail, dp=float("nan"): (Verdict("FAIL", "batch_variant", detail), dp)  # noqa: E731
    for what, rows, order in other_batches(logits):
        out = edge_cases.call(variant, rows, k)
        if isinstance(out, str):
            return failed(f"the call on {what} raised: {out}")
        p, index = first[0][order], first[1][order]
        moved = (out[1] != index).any(dim=-1)
        if bool(moved.any()):
            r = int(moved.nonzero()[0])
            seen = f"{index[r].tolist()} in the batch, {out[1][r].tolist()} with {what}"
            return failed(f"row {int(order[r])}'s indices depend on its batch: {seen}")
        # |difference| in float64, 0 where both are NaN, inf where only one is
        both_nan = torch.isnan(out[0]) & torch.isnan(p)
        dp = torch.where(both_nan, 0.0, (out[0].double() - p.double()).abs().nan_to_num(nan=float("inf")))
        worst = max(worst, float(dp.max()))
        off = dp > rtol * p.double().abs().nan_to_num(0.0) + atol
        if bool(off.any()) and variant.accuracy != "inexact":
            r, s = (int(v) for v in off.nonzero()[0])
            seen = f"{float(p[r, s]):.6g} in the batch, {float(out[0][r, s]):.6g} with {what}"
            return failed(f"row {int(order[r])} slot {s}: topk_p {seen} (beyond {rtol:.2g} relative)", worst)
    return PASS, worst


@contextlib.contextmanager
def on_side_stream(device: torch.device) -> Iterator[list[str]]:
    """The block run on a fresh side stream of `device` (waiting for the caller's); the yielded one-item list
    then says what it did elsewhere ("" if nothing, or on a CPU): on the simulated GPU, which records each
    kernel's stream, any kernel; on a real GPU (no trace), leaving another stream current."""
    elsewhere = [""]
    if device.type != "cuda":
        yield elsewhere
        return
    caller, side = torch.cuda.current_stream(device), torch.cuda.Stream(device)
    side.wait_stream(caller)
    counted = simulated_gpu.kernels_by_stream if simulated_gpu.active() is not None else dict
    before = counted()
    with torch.cuda.stream(side):
        yield elsewhere
        current = torch.cuda.current_stream(device)
    caller.wait_stream(side)
    ran = {s: n - before.get(s, 0) for s, n in counted().items() if s is not side and n != before.get(s, 0)}
    if current != side:
        elsewhere[0] = "the call left another stream current than the caller's (a side stream)"
    elif ran:
        on_default = ran.get(torch.cuda.default_stream(device), 0)
        elsewhere[0] = (
            f"{sum(ran.values())} kernel(s) ran on another stream than the caller's side stream "
            f"({on_default} on the default stream)"
        )

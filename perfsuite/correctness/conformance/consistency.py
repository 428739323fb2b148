"""What one call cannot show: repeatability (a split kernel merging its partials in arrival order returns
other ties on the next call), batch invariance (a plan that depends on the batch size: the batch axis) and
the stream the work runs on (`on_side_stream`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator

import pandas as pd
import torch

from perfsuite import simulated_gpu
from perfsuite.correctness import edge_cases
from perfsuite.correctness.conformance.battery_patterns import BATCHES, QUICK_BATCHES, place
from perfsuite.correctness.conformance.judge import PASS, Verdict
from perfsuite.correctness.parity import tolerance
from perfsuite.measure import memory
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


CPU_BATCH_LOGITS = 1025 * 16385  # on a CPU (time): the quick axis at every tile, 4096 rows up to V = 4099
QUICK_BATCH_LOGITS = 1025 * 1031  # --quick (time): 1025 rows up to V = 1031, 257 at 4099, 65 at 8193
INTERPRETED_BATCHES = (1, 2, 17)  # the only ones in Triton's CPU interpreter (30 ms a row): the rest on a GPU
Batch = tuple[str, torch.Tensor, torch.Tensor]  # what, logits, the case's row of each row


def other_batches(
    logits: torch.Tensor, quick: bool = True, sizes: Iterable[int] = BATCHES
) -> Iterator[Batch]:
    """(what, logits, the case's row of each row) of each of `sizes` (`quick`: QUICK_BATCHES, each at most
    QUICK_BATCH_LOGITS) whose logits fit (an eighth of a GPU's free memory; on a CPU or the simulated GPU
    an eighth of the host's and CPU_BATCH_LOGITS): the case's rows in an order drawn at random (seeded by
    the size: each row at many places, beside the others), laid out as the case's (data pointer offset,
    row stride, poison); none for B = 0."""
    cap = memory.available_bytes(logits.device) // 8 // logits.element_size()
    cap = cap if logits.is_cuda and simulated_gpu.active() is None else min(cap, CPU_BATCH_LOGITS)
    cap, sizes = (min(cap, QUICK_BATCH_LOGITS), QUICK_BATCHES) if quick else (cap, sizes)
    layout = {"offset": logits.storage_offset(), "stride": logits.stride(0)}
    for size in (s for s in sizes if s * logits.shape[1] <= cap and len(logits)):
        order = torch.randint(len(logits), (size,), generator=torch.Generator().manual_seed(size))
        rows = logits[order.to(logits.device)]
        yield f"batch {size}", place(rows, logits.dtype, logits.device, **layout), order


def batch(
    variant: Variant, axis: list[Batch], k: int, first: edge_cases.Outputs, interpreted: bool = False
) -> tuple[Verdict, dict]:
    """`first` (the call on the case's rows) against the calls on each batch of `axis` (`other_batches`;
    of INTERPRETED_BATCHES rows only for a selector that ran Triton's interpreter): each row's indices
    bitwise the same, its `topk_p` within the tolerance. Columns (none when no batch ran): batch_invariant;
    batch_max_dp, the largest `topk_p` difference; batch_worst, the first batch that differs, else that of
    batch_max_dp; batch_largest, the largest batch run."""
    checks: dict = {"batch_invariant": "pass", "batch_max_dp": 0.0, "batch_worst": pd.NA}
    for what, rows, order in (b for b in axis if len(b[2]) in INTERPRETED_BATCHES or not interpreted):
        rtol, atol = tolerance(variant.accuracy, rows.dtype)
        checks["batch_largest"] = size = len(order)
        out, p, index = edge_cases.call(variant, rows, k), first[0][order], first[1][order]
        failed = {"batch_invariant": "FAIL", "batch_worst": size}
        if isinstance(out, str) or any(o.shape != index.shape for o in out):
            seen = (
                out if isinstance(out, str) else f"outputs {[tuple(o.shape) for o in out]}, not {index.shape}"
            )
            return Verdict("FAIL", "crash", f"on {what}: {seen}"), checks | failed
        # |difference| in float64, 0 where both are NaN, inf where only one is
        both_nan = torch.isnan(out[0]) & torch.isnan(p)
        dp = torch.where(both_nan, 0.0, (out[0].double() - p.double()).abs().nan_to_num(nan=float("inf")))
        if float(dp.max()) > checks["batch_max_dp"]:
            checks |= {"batch_max_dp": float(dp.max()), "batch_worst": size}
        off = (dp > rtol * p.double().abs().nan_to_num(0.0) + atol) & (variant.accuracy != "inexact")
        if bool((moved := (out[1] != index) | off).any()):
            r, s = (int(v) for v in moved.nonzero()[0])
            part = "indices depend" if bool((out[1][r] != index[r]).any()) else "topk_p depends"
            seen = (
                f"row {int(order[r])}'s {part} on its batch ({int(moved.sum())} of {moved.numel()} slots "
                f"differ on {what}): its row {r} slot {s} has index {int(out[1][r, s])}, topk_p "
                f"{float(out[0][r, s]):.6g}, the case's own call {int(index[r, s])}, {float(p[r, s]):.6g}"
            )
            return Verdict("FAIL", "batch_variant", seen), checks | failed
    return PASS, checks if "batch_largest" in checks else {}


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

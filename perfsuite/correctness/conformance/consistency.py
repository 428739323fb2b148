"""Repeatability and batch invariance: what one call cannot show.

A split kernel that merges its partials in arrival order can return other tied indices on the next call
on the same logits; a kernel whose plan depends on the batch size can return other indices for a row when
other rows share its batch. Both pass every single-call check (a selector that claims no tie order may
pick any tied token, once). So every case is called twice and the two answers must be bitwise equal
(`repeat`), and the cases marked `batch_check` are also called on their rows in reverse order and on
their first row alone: each row's indices must be the same in all three batches, its probabilities
within the selector's tolerance (`parity.tolerance`), and the largest difference is reported (`batch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from perfsuite.correctness import edge_cases
from perfsuite.correctness.parity import tolerance
from perfsuite.variants.base import Variant

Outputs = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Check:
    """One consistency check: "pass" or "FAIL" (with what differed), and for batch invariance the largest
    probability difference seen."""

    status: str
    detail: str = ""
    max_dp: float = float("nan")


def _bits(p: torch.Tensor) -> torch.Tensor:
    return p.contiguous().view(torch.int32)


def repeat(first: Outputs, second: Outputs | str) -> Check:
    """The second call on the same logits against the first: bitwise the same outputs."""
    if isinstance(second, str):
        return Check("FAIL", f"the second call raised: {second}")
    differ = (first[1] != second[1]) | (_bits(first[0]) != _bits(second[0]))
    if not bool(differ.any()):
        return Check("pass")
    r, s = (int(v) for v in differ.nonzero()[0])
    return Check(
        "FAIL",
        f"{int(differ.sum())} of {differ.numel()} slots differ between two calls on the same logits, e.g. "
        f"row {r} slot {s}: index {int(first[1][r, s])} then {int(second[1][r, s])}, topk_p "
        f"{float(first[0][r, s]):.6g} then {float(second[0][r, s]):.6g}",
    )


def _difference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in float64, 0 where both are NaN, inf where only one is."""
    diff = (a.double() - b.double()).abs()
    both = torch.isnan(a) & torch.isnan(b)
    return torch.where(both, 0.0, diff.nan_to_num(nan=float("inf")))


def other_batches(logits: torch.Tensor) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The batches a row is also called in: (what, logits, the original row of each of their rows): the
    rows reversed (a fresh contiguous copy) and row 0 alone (a view of it); none for a single row."""
    if logits.shape[0] < 2:
        return []
    return [
        ("the rows reversed", logits.flip(0), torch.arange(logits.shape[0] - 1, -1, -1)),
        ("row 0 alone", logits[:1], torch.tensor([0])),
    ]


def batch(variant: Variant, logits: torch.Tensor, k: int, first: Outputs) -> Check:
    """`first` (the call on the whole batch) against the calls on `other_batches`."""
    rtol, atol = tolerance(variant.accuracy, logits.dtype)
    worst = 0.0
    for what, rows, order in other_batches(logits):
        out = edge_cases.call(variant, rows, k)
        if isinstance(out, str):
            return Check("FAIL", f"the call on {what} raised: {out}")
        p, index = first[0][order], first[1][order]
        moved = (out[1] != index).any(dim=-1)
        if bool(moved.any()):
            r = int(moved.nonzero()[0])
            return Check(
                "FAIL",
                f"row {int(order[r])}'s indices depend on its batch: {index[r].tolist()} in the batch, "
                f"{out[1][r].tolist()} with {what}",
            )
        dp = _difference(out[0], p)
        worst = max(worst, float(dp.max()))
        off = dp > rtol * p.double().abs().nan_to_num(0.0) + atol
        if bool(off.any()) and variant.accuracy != "inexact":
            r, s = (int(v) for v in off.nonzero()[0])
            return Check(
                "FAIL",
                f"row {int(order[r])} slot {s}: topk_p {float(p[r, s]):.6g} in the batch, "
                f"{float(out[0][r, s]):.6g} with {what} (beyond {rtol:.2g} relative)",
                worst,
            )
    return Check("pass", max_dp=worst)

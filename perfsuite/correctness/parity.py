"""Parity: every selection checked against a float64 reference and against the full-softmax baseline."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from functools import cached_property
from typing import NamedTuple

import torch

from perfsuite.variants.base import Accuracy
from perfsuite.variants.ordering import topk_lowest_index

EXACT_RTOL = 2e-5
"""Relative error an exact variant may show: fp32 rounding of `v - max`, `exp` and a V-term sum."""
NAN = float("nan")


def tolerance(accuracy: Accuracy, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) of `topk_p` against float64 truth: fp32 rounding, or for "rounded" one ulp of `dtype`
    (its smallest normal the floor: subnormals)."""
    if accuracy == "rounded":
        info = torch.finfo(dtype)
        return max(EXACT_RTOL, info.eps), info.tiny
    return EXACT_RTOL, torch.finfo(torch.float32).tiny


def defined_rows(logits: torch.Tensor) -> torch.Tensor:
    """Rows whose softmax is defined: no NaN, no +inf, at least one finite logit (-inf masks a token)."""
    return ~(torch.isnan(logits) | (logits == float("inf"))).any(dim=-1) & torch.isfinite(logits).any(dim=-1)


@dataclass(frozen=True)
class Truth:
    """float64 truth for one logits tensor and k: canonical indices, probabilities, finite-row mask."""

    logits: torch.Tensor  # the input, kept to look up logits and probabilities at any index
    row_max: torch.Tensor  # [B, 1] float64 max of the row
    row_sum: torch.Tensor  # [B, 1] float64 sum(exp(x - row_max))
    index: torch.Tensor  # [B, k] int64, descending logit, lowest index on ties

    @cached_property
    def finite(self) -> torch.Tensor:
        return defined_rows(self.logits)

    @cached_property
    def prob(self) -> torch.Tensor:
        return self.prob_at(self.index)

    def prob_at(self, index: torch.Tensor) -> torch.Tensor:
        """float64 softmax probabilities at `index` `[B, k]`."""
        return torch.exp(self.logit_at(index).double() - self.row_max) / self.row_sum

    def logit_at(self, index: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, index)

    def subset(self, rows: torch.Tensor) -> Truth:
        return Truth(*(getattr(self, f.name)[rows] for f in fields(self)))


def truth(logits: torch.Tensor, k: int) -> Truth:
    """float64 softmax and the canonical top-k. `exp(x_i - m) / sum(exp(x - m))` is exact at any finite
    magnitude: a logsumexp would round `log(sum)` away at 1e30 (four tied maxima would not get 0.25)."""
    x = logits.double()
    row_max = x.amax(dim=-1, keepdim=True)
    row_sum = torch.exp(x - row_max).sum(dim=-1, keepdim=True)
    return Truth(logits, row_max, row_sum, topk_lowest_index(logits, k)[1])


@dataclass(frozen=True)
class Parity:
    """How one selection compares with the float64 reference and the baseline, over its finite rows."""

    verdict: str  # pass | inexact | fail (finite rows); "n/a" when there are none
    idx_exact_f64: float  # share of [row, slot] with the reference's index
    idx_tie_f64: float  # ... or an index whose logit equals the reference's (a tie)
    top1_mismatch_f64: float  # share of rows whose first token is not (a tie of) the reference's
    p_relerr_f64: float  # max relative error of topk_p against float64 at the variant's own indices
    idx_exact_base: float  # the same against the full_softmax baseline
    idx_tie_base: float
    p_relerr_base: float  # max relative difference of topk_p from the baseline's, where indices agree
    finite_rows: int
    nonfinite_rows: int
    problem: str  # what failed, for the report; empty when it passed

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def _share(mask: torch.Tensor) -> float:
    return float(mask.float().mean()) if mask.numel() else NAN


def _max_relative_error(value: torch.Tensor, truth: torch.Tensor) -> float:
    error = ((value.double() - truth).abs() / truth.abs().clamp_min(1e-300)).nan_to_num(nan=float("inf"))
    return float(error.max()) if error.numel() else NAN


class Slots(NamedTuple):
    """Per output slot of the finite rows, judged against the reference (`[rows, k]` each)."""

    tie: torch.Tensor  # the slot's logit equals the reference's (its index, or an exact tie of it)
    index_ok: torch.Tensor  # a tie, or for "rounded" a token whose probability rounding merged with it
    truth: torch.Tensor  # the float64 softmax at the slot's own index
    p_ok: torch.Tensor  # topk_p within the accuracy's tolerance of `truth`


def slots(accuracy: Accuracy, index: torch.Tensor, p: torch.Tensor, sub: Truth, dtype: torch.dtype) -> Slots:
    """The slot-by-slot rule of `check` and the battery: `index`, `p` and `sub` of the finite rows, `dtype`
    the logits' (it sets the tolerance)."""
    tie = (index == sub.index) | (sub.logit_at(index) == sub.logit_at(sub.index))
    truth = sub.prob_at(index)
    rtol, atol = tolerance(accuracy, dtype)
    p_ok = (p.double() - truth).abs() <= rtol * truth + atol
    # a rounded variant may pick another token where rounding merged the two probabilities
    rounding_tie = truth >= sub.prob * (1 - rtol) - atol
    return Slots(tie, tie | rounding_tie if accuracy == "rounded" else tie, truth, p_ok)


def check(
    accuracy: Accuracy, topk_p: torch.Tensor, topk_index: torch.Tensor, ref: Truth,
    baseline: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Parity:  # fmt: skip
    """Compare a selection with the reference (verdict) and with the baseline (agreement figures)."""
    rows, vocab, want = ref.finite, ref.logits.shape[-1], tuple(ref.index.shape)
    counts = {"finite_rows": int(rows.sum()), "nonfinite_rows": int((~rows).sum())}
    problem = ""
    if tuple(topk_p.shape) != want or tuple(topk_index.shape) != want:
        problem = f"output shapes {tuple(topk_p.shape)} and {tuple(topk_index.shape)}, expected {want}"
    elif topk_index.dtype != torch.int64 or topk_p.dtype != torch.float32:
        problem = f"output dtypes {topk_p.dtype}, {topk_index.dtype}"
    elif bool(((topk_index < 0) | (topk_index >= vocab)).any()):
        problem = f"index outside [0, {vocab})"
    if problem:
        return Parity("fail", *[NAN] * 7, **counts, problem=problem)
    index, p, sub = topk_index[rows], topk_p[rows], ref.subset(rows)
    tie, idx_ok, truth_here, p_ok = slots(accuracy, index, p, sub, ref.logits.dtype)
    relerr = _max_relative_error(p, truth_here)
    if not counts["finite_rows"]:
        verdict, problem = "n/a", "no finite rows"
    elif not bool(idx_ok.all()):
        verdict, problem = "fail", f"{int((~idx_ok).sum())} slots pick a token the reference ranks lower"
    elif not bool(p_ok.all()):
        verdict = "inexact" if accuracy == "inexact" else "fail"
        problem = f"topk_p off by up to {relerr:.3g} relative"
    else:
        verdict = "pass"
    base = [NAN] * 3
    if baseline is not None:
        base_p, base_index = baseline[0][rows], baseline[1][rows]
        same = index == base_index
        tied = same | (sub.logit_at(index) == sub.logit_at(base_index))
        base = [_share(same), _share(tied), _max_relative_error(p[same], base_p[same].double())]
    same_ref, tie_ref, top1 = _share(index == sub.index), _share(tie), _share(~tie[:, 0])
    return Parity(verdict, same_ref, tie_ref, top1, relerr, *base, **counts, problem=problem)

"""One selection judged against float64 truth (`perfsuite.correctness.parity`'s reference and
tolerances): the verdict and, when it fails, what went wrong (see the package docstring for the rules)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from perfsuite.correctness import parity
from perfsuite.variants.base import Variant

FINDINGS: dict[str, str] = {
    "out_of_vocab": "out-of-vocabulary index",
    "wrong_topk": "wrong top-k",
    "wrong_tie": "wrong tie",
    "nan_order": "NaN against the declared policy",
    "nan_prob": "NaN where a number was due",
    "wrong_prob": "wrong probability",
    "bad_output": "wrong output shape or dtype",
    "crash": "crash",
    "graph_differs": "graph replay differs",
    "host_sync": "host sync in capture",
    "wrong_stream": "work on another stream",
    "not_repeatable": "differs from call to call",
    "batch_variant": "depends on the batch",
}
"""What can go wrong, in the order a selection is judged (the first one found is the verdict's)."""
JUDGED_PROBABILITIES = ("exact", "rounded")


@dataclass(frozen=True)
class Verdict:
    """pass, FAIL (with a `FINDINGS` key and what was seen) or skip (with the reason)."""

    status: str
    finding: str = ""
    detail: str = ""

    @property
    def text(self) -> str:
        """The cell the console table shows."""
        if self.status == "FAIL":
            return f"FAIL {FINDINGS[self.finding]}"
        return self.status


PASS = Verdict("pass")


def failed(finding: str, detail: str) -> Verdict:
    return Verdict("FAIL", finding, detail)


def skipped(reason: str) -> Verdict:
    return Verdict("skip", "", reason)


def _example(mask: torch.Tensor, describe, rows: torch.Tensor | None = None) -> str:
    """ "n of m slots, e.g. row r slot s: ..." for the first True of `mask` `[b, k]` (`rows`: the batch
    rows `mask`'s rows stand for)."""
    where = mask.nonzero()
    r, s = (int(v) for v in where[0])
    row = int(rows[r]) if rows is not None else r
    return f"{len(where)} of {mask.numel()} slots, e.g. row {row} slot {s}: {describe(r, s)}"


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def nan_order(logits: torch.Tensor, policy: str) -> torch.Tensor:
    """`[B, V]` column order of each row by the NaN `policy` ("largest": NaN first, "smallest": NaN last),
    then descending value, ties to the lowest index (a stable sort: NaNs keep index order too)."""
    x = logits.double()
    nan = torch.isnan(x)
    by_value = torch.sort(x.nan_to_num(nan=0.0), dim=-1, descending=True, stable=True).indices
    first = nan.gather(-1, by_value) if policy == "largest" else ~nan.gather(-1, by_value)
    return by_value.gather(-1, torch.sort(first.byte(), dim=-1, descending=True, stable=True).indices)


def _nan_rows(
    variant: Variant, host: torch.Tensor, k: int, topk_index: torch.Tensor
) -> tuple[str, str] | None:
    """The finding on the rows holding a NaN, judged by the selector's declared NaN policy (none when it
    declares none): each slot's index the policy's, or (without a lowest-index claim) a tie of it."""
    rows = torch.isnan(host).any(dim=-1).nonzero().flatten()
    if variant.nan == "unspecified" or not len(rows):
        return None
    x = host[rows].double()
    want = nan_order(x, variant.nan)[:, :k]
    index = topk_index[rows]
    got_v, want_v = x.gather(-1, index), x.gather(-1, want)
    same = index == want
    if not variant.lowest_index_ties:  # any of the equal logits (NaNs equal to one another) will do
        same |= (got_v == want_v) | (torch.isnan(got_v) & torch.isnan(want_v))
    if bool(same.all()):
        return None
    describe = lambda r, s: (  # noqa: E731
        f"index {int(index[r, s])} (logit {_fmt(got_v[r, s])}) where NaN {variant.nan} puts "
        f"{int(want[r, s])} (logit {_fmt(want_v[r, s])})"
    )
    return "nan_order", _example(~same, describe, rows)


def judge(
    variant: Variant, logits: torch.Tensor, k: int, topk_p: torch.Tensor, topk_index: torch.Tensor
) -> Verdict:
    """The verdict on `(topk_p, topk_index)` (on the CPU) for `logits` `[B, V]` by the variant's claims."""
    batch, vocab = logits.shape
    shape = (batch, k)
    if tuple(topk_p.shape) != shape or tuple(topk_index.shape) != shape:
        got = f"{tuple(topk_p.shape)} and {tuple(topk_index.shape)}"
        return failed("bad_output", f"outputs {got}, expected {shape}")
    if topk_p.dtype != torch.float32 or topk_index.dtype != torch.int64:
        return failed("bad_output", f"outputs {topk_p.dtype} and {topk_index.dtype}, expected float32, int64")
    if batch == 0:
        return PASS
    outside = (topk_index < 0) | (topk_index >= vocab)
    if bool(outside.any()):
        detail = _example(outside, lambda r, s: f"index {int(topk_index[r, s])} outside [0, {vocab})")
        return failed("out_of_vocab", detail)
    found: list[tuple[str, str]] = []
    ordered = topk_index.sort(dim=-1).values
    repeated = torch.zeros_like(topk_index, dtype=torch.bool)
    repeated[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    if bool(repeated.any()):
        found.append(("wrong_topk", _example(repeated, lambda r, s: f"index {int(ordered[r, s])} twice")))

    host = logits.cpu()
    host = host.float() if host.dtype.itemsize == 1 else host  # fp8: its exact float32 upcast
    nan_found = _nan_rows(variant, host, k, topk_index)
    if nan_found:
        found.append(nan_found)
    ref = parity.truth(host, k)
    rows = ref.finite.nonzero().flatten()  # undefined rows (NaN, +inf, all -inf): indices only, above
    if len(rows):
        sub = ref.subset(ref.finite)
        index, p = topk_index[rows], topk_p[rows].double()
        got, want = sub.logit_at(index).double(), sub.logit_at(sub.index).double()
        rtol, _ = parity.tolerance(variant.accuracy, logits.dtype)
        slot = parity.slots(variant.accuracy, index, p, sub, logits.dtype)
        truth = slot.truth
        wrong = ~slot.index_ok  # another logit (for "rounded": beyond what rounding merges)
        if bool(wrong.any()):
            describe = lambda r, s: (  # noqa: E731
                f"index {int(index[r, s])} (logit {_fmt(got[r, s])}) where the reference has "
                f"{int(sub.index[r, s])} (logit {_fmt(want[r, s])})"
            )
            found.append(("wrong_topk", _example(wrong, describe, rows)))
        tie = (index != sub.index) & slot.tie
        if variant.lowest_index_ties and bool(tie.any()):
            describe = lambda r, s: (  # noqa: E731
                f"index {int(index[r, s])}, the lowest index of the tie is {int(sub.index[r, s])}"
            )
            found.append(("wrong_tie", _example(tie, describe, rows)))
        if variant.accuracy in JUDGED_PROBABILITIES:
            nan = ~torch.isfinite(p) & torch.isfinite(truth)
            off = ~nan & ~slot.p_ok
            describe = lambda r, s: f"topk_p {_fmt(p[r, s])} where softmax is {_fmt(truth[r, s])}"  # noqa: E731
            if bool(nan.any()):
                found.append(("nan_prob", _example(nan, describe, rows)))
            if bool(off.any()):
                limit = f"{variant.accuracy}: within {rtol:.2g} relative"
                found.append(("wrong_prob", f"{_example(off, describe, rows)} ({limit})"))
    if not found:
        return PASS
    found.sort(key=lambda item: list(FINDINGS).index(item[0]))
    return failed(found[0][0], "; ".join(f"{FINDINGS[kind]}: {detail}" for kind, detail in found))

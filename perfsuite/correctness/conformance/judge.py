"""One selection judged against float64 truth (`parity`'s reference and tolerances): the verdict and, when
it fails, what went wrong (the rules: docs/selectors.md); and the failures Triton's CPU interpreter is to
blame for, which are skips that say so, never FAILs."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from unittest import mock

import torch

from perfsuite import kernels
from perfsuite.correctness import parity
from perfsuite.variants.base import Variant

FINDINGS: dict[str, str] = {
    "out_of_vocab": "out-of-vocabulary index", "wrong_topk": "wrong top-k", "wrong_tie": "wrong tie",
    "nan_order": "NaN against the declared policy", "nan_prob": "NaN where a number was due",
    "wrong_prob": "wrong probability", "bad_output": "wrong output shape or dtype", "crash": "crash",
    "graph_differs": "graph replay differs", "host_sync": "host sync in capture",
    "wrong_stream": "work on another stream", "not_repeatable": "differs from call to call",
    "batch_variant": "depends on the batch",
}  # fmt: skip
"""What can go wrong, in the order a selection is judged (the first one found is the verdict's)."""
JUDGED_PROBABILITIES = ("exact", "rounded")  # inexact and indices-only selectors: their indices only
Finding = tuple[str, str]  # a `FINDINGS` key and what was seen


@dataclass(frozen=True)
class Verdict:
    """pass, FAIL (with a `FINDINGS` key and what was seen) or skip (with the reason in `detail`)."""

    status: str
    finding: str = ""
    detail: str = ""


PASS = Verdict("pass")


def _found(
    kind: str, mask: torch.Tensor, describe: Callable, rows: torch.Tensor | None = None, note: str = ""
) -> list[Finding]:
    """`kind` with "n of m slots, e.g. row r slot s: ..." for the first True of `mask` `[b, k]` (`rows`: the
    batch rows `mask`'s rows stand for), then `note`; nothing when `mask` holds none."""
    where = mask.nonzero()
    if not len(where):
        return []
    r, s = (int(v) for v in where[0])
    row = int(rows[r]) if rows is not None else r
    seen = f"{len(where)} of {mask.numel()} slots, e.g. row {row} slot {s}: {describe(r, s)}{note}"
    return [(kind, seen)]


def _nan_rows(variant: Variant, host: torch.Tensor, k: int, topk_index: torch.Tensor) -> list[Finding]:
    """The finding on the rows holding a NaN by the selector's declared NaN policy (none when it declares
    none): each slot's index the policy's ("largest": NaN first, "smallest": NaN last, then descending
    value, ties to the lowest index), or (without a lowest-index claim) a tie of it."""
    rows = torch.isnan(host).any(dim=-1).nonzero().flatten()
    if variant.nan == "unspecified" or not len(rows):
        return []
    x, largest = host[rows].double(), variant.nan == "largest"
    # torch's stable sort ranks NaN above every number
    want = torch.sort(x if largest else -x, dim=-1, descending=largest, stable=True).indices[:, :k]
    index = topk_index[rows]
    got_v, want_v = x.gather(-1, index), x.gather(-1, want)
    same = index == want
    if not variant.lowest_index_ties:  # any of the equal logits (NaNs equal to one another) will do
        same |= (got_v == want_v) | (torch.isnan(got_v) & torch.isnan(want_v))
    describe = lambda r, s: (  # noqa: E731
        f"index {int(index[r, s])} (logit {got_v[r, s]:.6g}) where NaN {variant.nan} puts "
        f"{int(want[r, s])} (logit {want_v[r, s]:.6g})"
    )
    return _found("nan_order", ~same, describe, rows)


def judge(
    variant: Variant, logits: torch.Tensor, k: int, topk_p: torch.Tensor, topk_index: torch.Tensor
) -> Verdict:
    """The verdict on `(topk_p, topk_index)` (on the CPU) for `logits` `[B, V]` by the variant's claims."""
    batch, vocab = logits.shape
    shapes = (tuple(topk_p.shape), tuple(topk_index.shape))
    if shapes != ((batch, k),) * 2:
        return Verdict("FAIL", "bad_output", "outputs {} and {}, expected {}".format(*shapes, (batch, k)))
    if topk_p.dtype != torch.float32 or topk_index.dtype != torch.int64:
        detail = f"outputs {topk_p.dtype} and {topk_index.dtype}, expected float32, int64"
        return Verdict("FAIL", "bad_output", detail)
    if batch == 0:
        return PASS
    describe = lambda r, s: f"index {int(topk_index[r, s])} outside [0, {vocab})"  # noqa: E731
    if outside := _found("out_of_vocab", (topk_index < 0) | (topk_index >= vocab), describe):
        return Verdict("FAIL", *outside[0])
    ordered = topk_index.sort(dim=-1).values
    repeated = torch.zeros_like(topk_index, dtype=torch.bool)
    repeated[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    found = _found("wrong_topk", repeated, lambda r, s: f"index {int(ordered[r, s])} twice")
    host = logits.cpu()
    host = host.float() if host.dtype.itemsize == 1 else host  # fp8: its exact float32 upcast
    found += _nan_rows(variant, host, k, topk_index)
    ref = parity.truth(host, k)
    rows = ref.finite.nonzero().flatten()  # undefined rows (NaN, +inf, all -inf): indices only, above
    if len(rows):
        sub = ref.subset(ref.finite)
        index, p = topk_index[rows], topk_p[rows].double()
        got, want = sub.logit_at(index).double(), sub.logit_at(sub.index).double()
        slot = parity.slots(variant.accuracy, index, p, sub, logits.dtype)
        describe = lambda r, s: (  # noqa: E731
            f"index {int(index[r, s])} (logit {got[r, s]:.6g}) where the reference has "
            f"{int(sub.index[r, s])} (logit {want[r, s]:.6g})"
        )  # another logit (for "rounded": beyond what rounding merges)
        found += _found("wrong_topk", ~slot.index_ok, describe, rows)
        if variant.lowest_index_ties:
            lowest = lambda r, s: (  # noqa: E731
                f"index {int(index[r, s])}, the lowest index of the tie is {int(sub.index[r, s])}"
            )
            found += _found("wrong_tie", (index != sub.index) & slot.tie, lowest, rows)
        if variant.accuracy in JUDGED_PROBABILITIES:
            nan = ~torch.isfinite(p) & torch.isfinite(slot.truth)
            describe = lambda r, s: f"topk_p {p[r, s]:.6g} where softmax is {slot.truth[r, s]:.6g}"  # noqa: E731
            found += _found("nan_prob", nan, describe, rows)
            limit = f"{variant.accuracy}: within {parity.tolerance(variant.accuracy, logits.dtype)[0]:.2g}"
            found += _found("wrong_prob", ~nan & ~slot.p_ok, describe, rows, f" ({limit} relative)")
    if not found:
        return PASS
    found.sort(key=lambda item: list(FINDINGS).index(item[0]))
    return Verdict("FAIL", found[0][0], "; ".join(f"{FINDINGS[kind]}: {detail}" for kind, detail in found))


# Triton's CPU interpreter (`TRITON_INTERPRET=1`) runs kernels in numpy and converts bf16 subnormals to
# float32 wrongly, so a correct kernel picks the wrong token on a row of bf16 subnormals. A failed call that
# launched interpreted kernels on bf16 logits is judged again without its subnormal rows: if the rest
# passes, its row is a skip naming the interpreter. Torch ops convert bf16 correctly: no excuse for them.
INTERPRETER_MODULE = "triton.runtime.interpreter"
INTERPRETER_REASON = (
    "Triton's CPU interpreter converts bf16 subnormals to float32 wrongly (a load-and-store kernel gives "
    "1.14e-38 for 5.79e-39): run it on a GPU"
)


@contextlib.contextmanager
def interpreted_launches() -> Iterator[list[int]]:
    """The Triton kernels the block launched in the interpreter, in the yielded one-item list. Triton is never
    imported here (a second import of its extension aborts the process: pytest's in-process runs drop it
    from `sys.modules`); a block that imports it (to launch a kernel) counts at least one."""
    count = [0]
    module = sys.modules.get(INTERPRETER_MODULE) if kernels.interpreting() else None
    if module is None:
        yield count
        count[0] = int(kernels.interpreting() and INTERPRETER_MODULE in sys.modules)
        return
    original = module.InterpretedFunction.run  # the simulated GPU's own wrapper, where it is installed

    def run(self, *args, **kwargs):
        count[0] += 1
        return original(self, *args, **kwargs)

    with mock.patch.object(module.InterpretedFunction, "run", run):
        yield count


def excused(
    verdict: Verdict, launched: int, variant: Variant, logits: torch.Tensor, k: int, outputs: tuple
) -> Verdict:
    """`verdict` on a call that `launched` interpreted kernels, or a skip naming the interpreter when it
    failed on bf16 logits and its rows without a subnormal, judged again, pass."""
    if verdict.status != "FAIL" or not launched or logits.dtype != torch.bfloat16:
        return verdict
    host = logits.cpu()
    x = host.float().abs()
    subnormal = ((x > 0) & (x < torch.finfo(logits.dtype).tiny)).any(dim=-1)
    rest = ~subnormal
    if not bool(subnormal.any()) or judge(variant, host[rest], k, outputs[0][rest], outputs[1][rest]) != PASS:
        return verdict
    rows = ", ".join(str(r) for r in subnormal.nonzero().flatten().tolist())
    calls = f"its calls launched {launched} interpreted Triton kernel(s)"
    what = f"FAIL {FINDINGS[verdict.finding]} on subnormal rows {rows}"
    return Verdict("skip", detail=f"{INTERPRETER_REASON} ({calls}; {what})")

"""`perfsuite check`: the conformance battery for any top-k selector, built-in or an engine's own.

    from perfsuite import conformance
    conformance.run("pkg.module:topk", "cuda")  -> DataFrame, one row per (case, dtype, k)

`cases` holds the inputs (misaligned and tiny vocabularies with k up to V, poisoned row padding, offset
data pointers, non-finite and degenerate rows, bit-level float patterns, grammar-style masks, far and
split-crossing ties, huge and subnormal values, B = 0, int64 addressing, a graph capture), `judge` the
verdict on one selection, `consistency` the repeat and batch-invariance checks, `streams` the side stream
the calls run on, `interpreter` what Triton's CPU interpreter is to blame for, `graph` the
capture-and-replay case, `battery` the loop and the tables.

Verdicts. Each (case, dtype, k) is "pass", "FAIL" with the first thing that went wrong, or "skip" with
the reason (a dtype the selector does not declare: "not claimed"; a graph case without a GPU; memory
the int64 case cannot have; a failure Triton's CPU interpreter caused, below). What can go wrong, judged
in this order against float64 truth (`perfsuite.correctness.parity.reference` and `parity.tolerance`):
  crash                  the call raised (the exception, one line)
  wrong output shape or dtype
  out-of-vocabulary index  an index outside [0, V), in any row
  wrong top-k            an index named twice in a row, or a slot whose logit is not the reference's (a
                         tie of it is fine; a "rounded" selector may also pick a token whose probability
                         rounding merged with the reference's)
  wrong tie              the right logit at another index than the lowest one, when the selector claims
                         lowest-index ties
  NaN against the declared policy   on a row holding a NaN, when the selector declares `nan`:
                         "largest" (NaN above every number, +inf included: torch.argmax) or "smallest"
                         (below every number, -inf included: SGLang), an index other than the policy's
                         order gives (NaNs tie with one another; the tie rule as above)
  NaN where a number was due   a NaN or inf `topk_p` where the softmax is a number
  wrong probability      `topk_p` off the float64 softmax at its own index: "exact" within fp32
                         rounding, "rounded" within one ulp of the input dtype; "inexact" and indices-only
                         selectors are judged on their indices only
  graph replay differs / host sync in capture   (the graph case, on a GPU)
  work on another stream (wrong_stream)   on a GPU every eager call runs on a fresh side stream; on the
                         simulated GPU, which records each kernel's stream, a kernel elsewhere (the
                         default stream) fails it; on a real GPU, a call that leaves another stream current
  differs from call to call (not_repeatable)   the case is called twice on the same logits: the two
                         answers must be bitwise equal (column `repeat`)
  depends on the batch (batch_variant)   cases marked `batch_check` are also called on their rows
                         reversed and on row 0 alone: every row's indices the same, its `topk_p` within
                         the tolerance above (columns `batch_invariant`, `batch_max_dp`: the largest
                         difference)

Triton's interpreter. Under `TRITON_INTERPRET=1` bf16 subnormals are converted wrongly: a call that
launched an interpreted Triton kernel on bf16 logits and failed only on rows holding a subnormal (the
others judged again pass) is a "skip" whose reason names the interpreter and the failure it caused.

Non-finite rows. A row with a NaN or a +inf, or with every logit -inf, has no softmax: on such a row
the indices are judged for being inside [0, V) and distinct, and a NaN row's order by the declared NaN
policy (none for "unspecified", the default); `topk_p` (NaN propagating, or anything else) is not
judged. -inf entries in a row that also has a finite value are a vocabulary mask: the row is judged in
full, a masked token that makes the top-k has probability 0, and a row with fewer finite logits than k
has them first, then distinct masked tokens. fp8 logits are judged against their exact float32 upcast.
"""

from perfsuite.correctness.conformance.battery import (
    battery_dtype,
    console,
    counts,
    frame,
    gpu_available,
    rows,
    run,
)
from perfsuite.correctness.conformance.battery_patterns import Case, catalogue, select
from perfsuite.correctness.conformance.judge import FINDINGS, Verdict, judge

__all__ = [
    "FINDINGS",
    "Case",
    "Verdict",
    "battery_dtype",
    "catalogue",
    "console",
    "counts",
    "frame",
    "gpu_available",
    "judge",
    "rows",
    "run",
    "select",
]

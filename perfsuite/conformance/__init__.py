"""`perfsuite check`: the conformance battery for any top-k selector, built-in or an engine's own.

    from perfsuite import conformance
    conformance.run("pkg.module:topk", "cuda")  -> DataFrame, one row per (case, dtype, k)

`cases` holds the inputs (misaligned and tiny vocabularies, poisoned row padding, offset data pointers,
non-finite and degenerate rows, far and split-crossing ties, huge and subnormal values, B = 0, int64
addressing, a graph capture), `judge` the verdict on one selection, `graph` the capture-and-replay case,
`battery` the loop and the tables.

Verdicts. Each (case, dtype, k) is "pass", "FAIL" with the first thing that went wrong, or "skip" with
the reason (a dtype the selector does not declare: "not claimed"; a graph case without a GPU; memory
the int64 case cannot have). What can go wrong, judged in this order against float64 truth
(`perfsuite.correctness.parity.reference` and `parity.tolerance`):
  crash                  the call raised (the exception, one line)
  wrong output shape or dtype
  out-of-vocabulary index  an index outside [0, V), in any row
  wrong top-k            an index named twice in a row, or a slot whose logit is not the reference's (a
                         tie of it is fine; a "rounded" selector may also pick a token whose probability
                         rounding merged with the reference's)
  wrong tie              the right logit at another index than the lowest one, when the selector claims
                         lowest-index ties
  NaN where a number was due   a NaN or inf `topk_p` where the softmax is a number
  wrong probability      `topk_p` off the float64 softmax at its own index: "exact" within fp32
                         rounding, "rounded" within one ulp of the input dtype; "inexact" and indices-only
                         selectors are judged on their indices only
  graph replay differs / host sync in capture   (the graph case, on a GPU)

Non-finite rows. A row with a NaN or a +inf, or with every logit -inf, has no softmax: on such a row
only the indices are judged, and only for being inside [0, V) and distinct; which token is picked and
what `topk_p` holds (NaN propagating, or anything else) is not judged. -inf entries in a row that also
has a finite value are a vocabulary mask: the row is judged in full, and a masked token that makes the
top-k has probability 0. fp8 logits are judged against their exact float32 upcast.
"""

from perfsuite.conformance.battery import console, counts, dtype_of, frame, gpu_available, rows, run
from perfsuite.conformance.battery_cases import Case, catalogue, select
from perfsuite.conformance.judge import FINDINGS, Verdict, judge

__all__ = [
    "FINDINGS",
    "Case",
    "Verdict",
    "catalogue",
    "console",
    "counts",
    "dtype_of",
    "frame",
    "gpu_available",
    "judge",
    "rows",
    "run",
    "select",
]

"""`perfsuite check`: the conformance battery for any top-k selector, built-in or an engine's own.

    from perfsuite.correctness import conformance
    conformance.run("pkg.module:topk", "cuda")  -> DataFrame, one row per (case, dtype, k)

`battery_patterns` holds the inputs, `judge` the verdict on one selection (and what Triton's CPU
interpreter is to blame for), `consistency` the repeat, batch and stream checks, `graph_replay` the graph
case, `battery` the loop and the tables. What each case probes and each finding means: docs/selectors.md.
"""

from perfsuite.correctness.conformance.battery import battery_dtype, console, frame, gpu_available, rows, run
from perfsuite.correctness.conformance.battery_patterns import select

__all__ = ["battery_dtype", "console", "frame", "gpu_available", "rows", "run", "select"]

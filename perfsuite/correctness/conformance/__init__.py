"""`perfsuite check`: the conformance battery for any top-k selector (`run("pkg.module:topk", "cuda")`: a row
per case, dtype and k). `battery_patterns`: the inputs; `judge`: the verdict on one selection; `consistency`:
repeat, batch and stream checks; `graph_replay`: the graph case; `battery`: the loop and the tables."""

from perfsuite.correctness.conformance.battery import battery_dtype, console, frame, rows, run
from perfsuite.correctness.conformance.battery_patterns import select

__all__ = ["battery_dtype", "console", "frame", "rows", "run", "select"]

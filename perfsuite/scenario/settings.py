"""The measurement settings a scenario gives every case: how it is timed (`[timing]`) and how its logits
are made (`[inputs]`). Below the scenario file and the case kinds (kernel, draft, tensor parallel), which
all take them."""

from __future__ import annotations

from dataclasses import dataclass

from perfsuite.scenario import inputs
from perfsuite.scenario.logits_files import LogitsSource


@dataclass(frozen=True)
class Timing:
    """How each case is timed."""

    warmup: int = 10  # untimed calls first (compilation, caches, clocks)
    reps: int = 100  # timed samples per case, at most
    max_seconds: float = 2.0  # per case: stop sampling after this long, 5 samples taken (bounds huge cases)
    l2: str = "cold"  # cold: flush the cache before each sample (bandwidth roofline); hot: no flush
    graph_unroll: int = 20  # calls captured in one graph for replay timing (capped on ROCm)
    threads: int = 1  # torch's CPU threads (0: torch's default, one per core); see perfsuite.measure.threads


@dataclass(frozen=True)
class Inputs:
    """How logits are generated, or read from files."""

    seed: int = 0  # generated logits' seed; which rows of a file a case takes
    row_pad: int = 0  # >0: logits are a row-strided view of a wider buffer with poisoned padding
    scale: float = inputs.DEFAULT_SCALE
    files: tuple[LogitsSource, ...] = ()  # [inputs.files]: the `file:NAME` kinds, inspected at load

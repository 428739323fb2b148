"""The measurement settings a scenario gives every case: how it is timed (`[timing]`, torch's CPU threads
among them) and how its logits are made (`[inputs]`). Below the scenario file and the case kinds (kernel,
draft, tensor parallel), which all take them.

Threads (`[timing] threads`, `--threads`): the default is one. On a CPU, perfsuite compares selectors; one
thread gives each the same core, needs no idle cores, and does not collapse when other work shares the
machine: OpenMP threads that wait for busy cores made one op 20-30x slower on a shared 2-core machine
(15.8 ms with torch's default of two threads, 0.67 ms with one). On a GPU the threads only run the host
side (launches, parity checks). `threads = 0` keeps torch's default (one per core) for a dedicated
many-core machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

TORCH_DEFAULT_THREADS = torch.get_num_threads()


def apply_threads(threads: int) -> int:
    """Use `threads` CPU threads in torch's intra-op pool (0: torch's default); returns those in effect.
    Processes started afterwards (torchrun workers, the counter tool) inherit it through OMP_NUM_THREADS."""
    if threads < 0:
        raise ValueError(f"threads: expected 0 (torch's default) or more, got {threads}")
    torch.set_num_threads(threads or TORCH_DEFAULT_THREADS)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    return torch.get_num_threads()


@dataclass(frozen=True)
class Timing:
    """How each case is timed."""

    warmup: int = 10  # untimed calls first (compilation, caches, clocks)
    reps: int = 100  # timed samples per case, at most
    max_seconds: float = 2.0  # per case: stop sampling after this long, 5 samples taken (bounds huge cases)
    l2: str = "cold"  # cold: flush the cache before each sample (bandwidth roofline); hot: no flush
    graph_unroll: int = 20  # calls captured in one graph for replay timing (capped on ROCm)
    threads: int = 1  # torch's CPU threads (0: torch's default, one per core); see apply_threads

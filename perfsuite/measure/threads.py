"""torch's CPU threads, a setting of every run (`[timing] threads`, `--threads`).

The default is one thread. On a CPU, perfsuite compares selectors; one thread gives each the same
core, needs no idle cores, and does not collapse when other work shares the machine: OpenMP threads that
wait for busy cores made one op 20-30x slower on a shared 2-core machine (15.8 ms with torch's default of
two threads, 0.67 ms with one). On a GPU the threads only run the host side (launches, parity checks).
`threads = 0` keeps torch's default (one per core) for a dedicated many-core machine.
"""

from __future__ import annotations

import os

import torch

TORCH_DEFAULT = torch.get_num_threads()


def apply(threads: int) -> int:
    """Use `threads` CPU threads in torch's intra-op pool (0: torch's default); returns those in effect.
    Processes started afterwards (torchrun workers, the counter tool) inherit it through OMP_NUM_THREADS."""
    if threads < 0:
        raise ValueError(f"threads: expected 0 (torch's default) or more, got {threads}")
    torch.set_num_threads(threads or TORCH_DEFAULT)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    return torch.get_num_threads()

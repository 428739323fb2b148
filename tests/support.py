"""Helpers shared by the tests."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import pytest
import torch

from perfsuite import simulated_gpu

HAS_GPU = torch.cuda.is_available()  # a real GPU, or the simulated one for the whole run (the env switch)
REAL_GPU = HAS_GPU and simulated_gpu.active() is None
DEVICE = torch.device("cuda:0" if HAS_GPU else "cpu")
needs_gpu = pytest.mark.skipif(
    not HAS_GPU, reason="needs a CUDA or ROCm GPU (torch.cuda.is_available() is False)"
)
needs_real_gpu = pytest.mark.skipif(
    not REAL_GPU,
    reason="needs a real CUDA or ROCm GPU: the simulated GPU's figures are the host's, not a GPU's",
)


def stable_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """Independent canonical top-k indices: a stable descending sort of the whole row."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices[:, :k]


LONG_SWEEP = """
name = "long"
device = "cpu"
[sweep]
variants = ["full_softmax", "identity", "argmax_ones"]
dtypes = ["bfloat16", "float32"]
vocab = [1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500, 5000, 5500, 6000, 6500, 7000, 7500, 8000, 8500]
batch = [1, 2, 3, 4, 5, 6, 7, 8]
topk = [1, 2, 3, 4]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 3
max_seconds = 0.01
"""
"""Minutes of CPU cases: the sweep the interruption tests stop long before its end."""
LONG_SWEEP_CASES = 3 * 2 * 16 * 8 * 4


def sigterm_once_started(process: subprocess.Popen, started: Callable[[], bool]) -> tuple[object, object]:
    """Send SIGTERM to `process` as soon as `started()` holds (checked every 0.1 s, at most 5 minutes),
    while it still runs; its (stdout, stderr). The process is killed if anything goes wrong."""
    try:
        for _ in range(3000):
            if process.poll() is not None or started():
                break
            time.sleep(0.1)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        return process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()

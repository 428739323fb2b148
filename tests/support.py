"""Helpers shared by the tests."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from perfsuite import simulated_gpu
from perfsuite.compare.match import SECONDS
from perfsuite.measure import timing
from perfsuite.results.write import ResultsLog, to_frame, write_tables

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


# --- rows and run folders as a run writes them (compare's tests) -------------------------------------

CASE = {"path": "eager", "dtype": "bfloat16", "batch": 1, "topk": 1, "logits": "gaussian", "l2": "cold",
        "device": "NVIDIA H200", "backend": "cuda", "status": "ok", "reason": ""}  # fmt: skip


def row(variant: str, vocab: int, median: float, *, spread: float = 0.02, **extra: object) -> dict:
    accuracy = {"full_softmax": "rounded", "argmax_ones": "inexact"}.get(variant, "exact")
    return {
        **CASE,
        "case_id": f"{variant}/eager/bfloat16/V{vocab}/B1/k1/gaussian",
        "variant": variant,
        "accuracy": accuracy,
        "vocab": vocab,
        "median_us": median,
        "p20_us": median * (1 - spread),
        "p80_us": median * (1 + spread),
        "verdict": "inexact" if accuracy == "inexact" else "pass",
        "bytes_model": vocab * 2,
        **extra,
    }


def measured(variant: str, vocab: int, seconds: np.ndarray, run: str = "run-a", **extra: object) -> dict:
    """A row as a run writes it: median, p20/p80, spread and unstable from `seconds` (as timing does)."""
    samples = timing.Samples(tuple(float(s) for s in seconds), "host perf_counter")
    return {
        **row(variant, vocab, samples.median_us),
        "p20_us": samples.p20_us,
        "p80_us": samples.p80_us,
        "samples": len(seconds),
        "spread": samples.spread,
        "unstable": samples.unstable,
        "run": run,
        "settings": "abc123def456",
        **extra,
    }


def with_seconds(r: dict, seconds: np.ndarray) -> dict:
    """The row with its rounds' samples, as `load_side` gives them."""
    return {**r, SECONDS: tuple(seconds)}


def write_run(
    folder: Path, cases: Sequence[tuple[dict, np.ndarray] | tuple[dict, np.ndarray, np.ndarray]]
) -> Path:
    """A run folder as `perfsuite run` leaves it: results.csv and samples.jsonl, one entry per case
    (row, seconds) or (row, seconds, the in-turn reference's seconds: ref_seconds); returns results.csv."""
    csv_path = write_tables(to_frame([r for r, *_ in cases]), folder)[0]
    log = ResultsLog(folder / "samples.jsonl")
    for r, seconds, *ref in cases:
        entry = {"case_id": r["case_id"], "run": r["run"], "seconds": [float(s) for s in seconds]}
        if ref:
            entry["ref_seconds"] = [float(s) for s in ref[0]]
        log.append(entry)
    return csv_path

"""The pytest-benchmark front end: same scenarios, same samplers, results readable by the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import HAS_GPU

from perfsuite import simulated_gpu
from perfsuite.report import build_report, load_results

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = """
[[sweep]]
variants = ["full_softmax", "identity"]
paths = ["eager", "graph"]
dtypes = ["float32"]
vocab = [2000]
batch = [2]
topk = [1, 3]
logits = ["peaked"]
[timing]
warmup = 1
reps = 4
"""


@pytest.mark.parametrize("simulated", [False, True], ids=["here", "simulated-h200"])
def test_benchmarks_record_the_samplers_times_and_every_result_column(tmp_path, simulated):
    if simulated and HAS_GPU:
        pytest.skip("a GPU is present: the simulated run is for machines without one")
    env = {**os.environ, simulated_gpu.ENV: "h200"} if simulated else None
    scenario = tmp_path / "bench.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "benchmarks"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--scenario",
            str(scenario),
            "--benchmark-json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    benches = data["benchmarks"]
    if HAS_GPU or simulated:
        assert len(benches) == 8
        assert all(b["extra_info"]["simulated"] == simulated for b in benches)
    else:  # the graph cases are skipped, with the reason
        assert (
            len(benches) == 4 and "SKIPPED [4]" in proc.stdout and "needs a CUDA or ROCm GPU" in proc.stdout
        )
    for bench in benches:
        info, stats = bench["extra_info"], bench["stats"]
        assert stats["rounds"] == 4 and info["samples"] == 4
        assert abs(stats["median"] * 1e6 - info["median_us"]) < 1e-6  # pytest-benchmark saw our samples
        assert info["verdict"] == "pass" and info["bytes_model"] > 0
        assert bench["options"]["timer"] == "perfsuite.timing.SampleClock"
    frame = load_results(out)
    assert len(frame) == len(benches) and set(frame["variant"]) == {"full_softmax", "identity"}
    assert build_report(frame, tmp_path / "bench.html").stat().st_size > 0

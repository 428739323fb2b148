"""`scripts/gpu_check.sh` dry-run on this CPU (Triton interpreter, tiny scenarios): it runs once, on a lent
GPU with minutes of device time, so every stage but the full test suite and the draft loop runs here first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from perfsuite import kernels

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"

pytestmark = [
    pytest.mark.skipif(not kernels.triton_installed(), reason=kernels.NO_TRITON),
    # on a GPU the script runs for real (its "tests" stage runs this file): a dry run would cost device time
    pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU dry run of the GPU check"),
]

SWEEP = """
name = "gpu-check-dry-run"
device = "cpu"
[sweep]
variants = ["full_softmax", "identity", "argmax_ones", "triton_auto"]
dtypes = ["bfloat16"]
vocab = [4500]
batch = [2]
topk = [1]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 3
max_seconds = 0.01
"""


def _run(tmp_path: Path, stages: str) -> subprocess.CompletedProcess:
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(SWEEP)
    env = {
        **os.environ,
        "STAGES": stages,
        "SCENARIO": str(sweep),
        "TUNE_SCENARIO": str(sweep),
        "PYTHON": sys.executable,
        kernels.INTERPRET_ENV: "1",
    }
    env.pop("PERFSUITE_PLANS", None)
    command = ["bash", str(SCRIPT), str(tmp_path / "out")]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)


STAGES = ["machine", "kernels", "tune", "sweep", "summary", "tp"]


def test_every_stage_but_the_suite_runs_and_writes_its_files(tmp_path):
    done = _run(tmp_path, " ".join(STAGES))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    for name in ("machine.txt", "kernels.csv", "tuned.json", "tune.csv", "results.csv", "summary.md"):
        assert (out / name).stat().st_size > 0, name
    assert "GPU visible" in (out / "tp-skipped.txt").read_text()
    assert "## Tuned plans" in (out / "summary.md").read_text()  # the tune stage's table joins the summary
    stages = (out / "stages.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in stages] == [f"-- {stage}" for stage in STAGES]
    assert all(": exit 0," in line for line in stages)
    results = pd.read_csv(out / "results.csv")
    assert set(results["variant"]) == {"full_softmax", "identity", "argmax_ones", "triton_auto"}
    assert (results["status"] == "ok").all()
    launch = results.set_index("variant")["launch"]
    assert launch["triton_auto"].endswith("(heuristic)") and pd.isna(launch["full_softmax"])


def test_an_unknown_stage_stops_with_status_2(tmp_path):
    done = _run(tmp_path, "machine benchmark")
    assert done.returncode == 2
    assert "unknown stage benchmark" in done.stderr

"""`python -m perfsuite.kernels.warm`: one launch per Triton specialisation of a scenario, made in worker
processes. Here the workers run the kernels in Triton's interpreter (nothing is compiled or cached on a
CPU, but the machinery is the GPU's: planning, deduplication, the pool, the budget, the signals)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perfsuite import kernels, variants
from perfsuite.inputs import dtype_of, make_logits
from perfsuite.kernels import plan as plans
from perfsuite.scenario import expand, load

if not kernels.triton_installed():
    pytest.skip(kernels.NO_TRITON, allow_module_level=True)

from perfsuite.kernels import topk_softmax as ts
from perfsuite.kernels import warm

ROOT = Path(__file__).parents[1]

TINY = """
name = "tiny"
device = "cpu"
[sweep]
variants = ["identity", "triton_fused", "triton_split", "triton_auto"]
dtypes = ["bfloat16", "float32"]
vocab = [300, 4100]
batch = [1, 2]
topk = [1, 4]
logits = ["gaussian"]
[inputs]
row_pad = 3
"""

ENDLESS = """
name = "endless"   # minutes per launch in the interpreter: only a budget or a signal ends it
device = "cpu"
[sweep]
variants = ["triton_fused"]
dtypes = ["float32"]
vocab = [262144]
batch = [64]
topk = [8]
logits = ["gaussian"]
"""


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return path


def _warm(path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, kernels.INTERPRET_ENV: "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "perfsuite.kernels.warm", str(path), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_every_specialisation_is_launched_once_in_worker_processes(tmp_path):
    path = _scenario(tmp_path, TINY)
    units, launches = warm.warm_units(expand(load(path)), plans.hardware(torch.device("cpu")))
    assert len({u.key for u in units}) == len(units) < launches
    assert {u.kernel for u in units} == {"fused", "partials", "merge"}
    done = _warm(path, "--jobs", "2")
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    assert f"{len(units)} specialisations" in out and "2 workers started" in out
    assert f"warm: {len(units)} of {len(units)} specialisations" in out and "0 failed; done" in out
    for unit in units:
        assert unit.describe() in out


@pytest.fixture
def recorded(monkeypatch) -> list[tuple]:
    """Launches record their compile key (and check their pointers' alignment) instead of running."""
    keys: list[tuple] = []

    def record(launch: ts.Launch, *tensors: torch.Tensor) -> None:
        assert all(t.data_ptr() % ts.ALIGN_BYTES == 0 for t in tensors)
        keys.append(launch.compile_key(tensors[0].dtype))

    monkeypatch.setattr(ts.Launch, "__call__", record)
    return keys


def test_the_workers_launches_are_the_runs(tmp_path, recorded):
    """A unit's launch compiles under the unit's key, and the variants' own calls on the cases' logits
    (row-strided: `row_pad`) compile under keys the units cover: Triton's cache keys are the run's."""
    cases = expand(load(_scenario(tmp_path, TINY)))
    units, _ = warm.warm_units(cases, plans.hardware(torch.device("cpu")))
    for unit in units:
        recorded.clear()
        warm.make_launch(unit, torch.device("cpu"))
        assert recorded == [unit.key]
    recorded.clear()
    for case in cases:
        if case.variant in warm.plan_functions():
            logits = make_logits("gaussian", case.batch, case.vocab, dtype_of(case.dtype), row_pad=3)
            variants.get(case.variant)(logits, case.topk)
    assert set(recorded) == {u.key for u in units}


def test_the_gpu_check_compiles_23_specialisations():
    """scenarios/gpu_check.toml's 288 Triton cases (416 launches) on a 132-SM GPU with heuristic plans
    compile 23 kernels (38 before the split counts, index offsets and merge part counts were left
    unspecialised). A change to the plans or the sweep that moves this number is worth a look."""
    cases = expand(load(ROOT / "scenarios" / "gpu_check.toml"))
    units, launches = warm.warm_units(cases, plans.Hardware(sms=132))
    kinds = {kind: sum(u.kernel == kind for u in units) for kind in ("fused", "partials", "merge")}
    assert (len(units), launches, kinds) == (23, 416, {"fused": 8, "partials": 8, "merge": 7})


def test_tune_adds_every_candidate_plan():
    from perfsuite.kernels import tuner

    hw = plans.Hardware(sms=132)
    cases = expand(load(ROOT / "scenarios" / "tune.toml"))
    units, _ = warm.warm_units(cases, hw, tune=True)
    keys = {u.key for u in units}
    assert len(keys) == len(units) > len(warm.warm_units(cases, hw)[0])
    for case in tuner.shapes_of(cases):
        dtype = dtype_of(case.dtype)
        for tunables in tuner.candidates(case.batch, case.vocab, case.topk, hw, dtype.itemsize):
            plan = tunables.plan_for(case.batch, case.vocab, case.topk, hw, dtype.itemsize)
            layout = ts.RowLayout.contiguous(case.vocab, dtype.itemsize)
            for launch in ts.plan_launches(case.batch, case.vocab, case.topk, plan, layout):
                assert launch.compile_key(dtype) in keys


def test_the_budget_stops_it_cleanly(tmp_path):
    done = _warm(_scenario(tmp_path, ENDLESS), "--jobs", "1", "--budget", "1")
    out, err = done.communicate(timeout=300)
    assert done.returncode == warm.EXIT_BUDGET, out + err
    assert "warm: 0 of 1 specialisations" in out and "stopped at the 1.0 s budget" in out
    assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_workers_and_exits_130(tmp_path, signum):
    running = _warm(_scenario(tmp_path, ENDLESS), "--jobs", "2")
    for line in running.stdout:
        if "workers started" in line:
            break
    running.send_signal(signum)
    out, err = running.communicate(timeout=300)
    assert running.returncode == warm.EXIT_INTERRUPTED, out + err
    assert "0 of 1 specialisations" in out and out.rstrip().endswith("interrupted")
    assert "Traceback" not in err


def test_without_a_gpu_there_is_nothing_to_warm(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(kernels.INTERPRET_ENV, raising=False)
    assert warm.main([str(_scenario(tmp_path, TINY))]) == warm.EXIT_OK
    assert "no GPU here (cpu): nothing to warm" in capsys.readouterr().out


def test_bad_input_is_one_message(tmp_path, capsys):
    assert warm.main([str(tmp_path / "missing.toml")]) == warm.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("warm: ") and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exited:
        warm.main([str(tmp_path / "missing.toml"), "--jobs", "0"])
    assert exited.value.code == 2 and "--jobs must be at least 1" in capsys.readouterr().err

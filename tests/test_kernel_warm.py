"""`perfsuite warm`: one launch per Triton specialisation of a scenario, made in worker
processes. Here the workers run the kernels in Triton's interpreter (nothing is compiled or cached on a
CPU, but the machinery is the GPU's: planning, deduplication, the pool, the budget, the signals)."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from perfsuite import cli, kernels, variants
from perfsuite.core import exits
from perfsuite.core.dtypes import dtype_of
from perfsuite.kernels import plan as plans
from perfsuite.scenario.inputs import make_logits
from perfsuite.scenario.load import expand, load

if not kernels.triton_installed():
    pytest.skip(kernels.NO_TRITON, allow_module_level=True)

from perfsuite.kernels import topk_softmax as ts
from perfsuite.tools import tuning, warm

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

DRAFT = """
name = "tiny-draft"
device = "cpu"
sweep = []
[[draft]]
variants = ["triton_auto", "identity"]
dtypes = ["bfloat16"]
vocab = 300
hidden = 16
batch = [1, 2]
topk = [1, 2]
num_steps = 2
upcast = ["fp32", "none"]
logits = "head"
"""
TOTAL_KEYS = 244  # 243 before the battery's batch axis (issue 40)


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / f"{text.split(chr(34))[1]}.toml"
    path.write_text(text)
    return path


def _warm(path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, kernels.INTERPRET_ENV: "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "perfsuite", "warm", str(path), *args]  # as scripts/gpu_check.sh
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _sweep(cases: list, hw: plans.Hardware, tune: bool = False) -> tuple[list[warm.Warmup], int]:
    """The distinct units of the cases' sweep (with `tune`, the candidates' first), and their launches."""
    sources = [warm.candidate_units(cases, hw)] if tune else []
    sources.append(warm.sweep_units(cases, hw))
    return warm.distinct(*sources), sum(len(s) for s in sources)


def test_every_specialisation_is_launched_once_in_worker_processes(tmp_path):
    path = _scenario(tmp_path, TINY)
    hw = plans.hardware(torch.device("cpu"))
    units, launches = _sweep(expand(load(path)), hw)
    assert len({u.key for u in units}) == len(units) < launches
    assert {u.launch.kernel for u in units} == {"fused", "partials", "merge"}
    path = _scenario(tmp_path, TINY.replace('"tiny"', '"tiny-fp32"').replace('"bfloat16", ', ""))  # cheaper
    units = warm.distinct(*warm.scenario_units(load(path), hw))  # the edge-case matrix's too
    assert {u.launch.kernel for u in units} == {"fused", "partials", "merge"}
    done = _warm(path, "--jobs", "2")
    out, err = done.communicate(timeout=600)
    assert done.returncode == 0, out + err
    assert f"{len(units)} specialisations" in out and "2 workers started" in out
    assert f"warm: {len(units)} of {len(units)} specialisations" in out and "0 failed; done" in out
    for unit in units:
        assert unit.describe() in out


def test_the_workers_launches_are_the_runs(tmp_path, recorded):
    """A unit's launch compiles under the unit's key, and the variants' own calls on the cases' logits
    (row-strided: `row_pad`) compile under keys the units cover: Triton's cache keys are the run's."""
    cases = expand(load(_scenario(tmp_path, TINY)))
    units, _ = _sweep(cases, plans.hardware(torch.device("cpu")))
    for unit in units:
        recorded.clear()
        warm.make_launch(unit, torch.device("cpu"))
        assert recorded == [unit.key]
    recorded.clear()
    for case in cases:
        if tuning.variant_plan(case.variant):
            logits = make_logits("gaussian", case.batch, case.vocab, dtype_of(case.dtype), row_pad=3)
            variants.get(case.variant)(logits, case.topk)
    assert set(recorded) == {u.key for u in units}


def test_the_argmax_units_launch_the_argmax_kernels(tmp_path, recorded):
    """triton_argmax's units (fused, split partials and merge) launch under their own keys, and the
    variant's calls on the cases' logits compile under keys the units cover."""
    text = TINY.replace('"identity", "triton_fused", "triton_split", "triton_auto"', '"triton_argmax"')
    cases = expand(load(_scenario(tmp_path, text.replace("topk = [1, 4]", "topk = [1]"))))
    units, _ = _sweep(cases, plans.hardware(torch.device("cpu")))
    assert {u.launch.kernel for u in units} >= {"argmax", "argmax_partials", "argmax_merge"}
    for unit in units:
        recorded.clear()
        warm.make_launch(unit, torch.device("cpu"))
        assert recorded == [unit.key], unit.describe()
    recorded.clear()
    for case in cases:
        logits = make_logits("gaussian", case.batch, case.vocab, dtype_of(case.dtype), row_pad=3)
        variants.get(case.variant)(logits, case.topk)
    assert set(recorded) == {u.key for u in units}


def test_the_gpu_check_compiles_23_specialisations():
    """scenarios/gpu_check.toml's 288 Triton cases (416 launches) on a 132-SM GPU with heuristic plans
    compile 23 kernels (38 before the split counts, index offsets and merge part counts were left
    unspecialised); with triton_argmax's cases at k 1, 33 (480 launches). A change to the plans or the
    sweep that moves this number is worth a look."""
    cases = expand(load(ROOT / "scenarios" / "gpu_check.toml"))
    units, launches = _sweep(cases, plans.Hardware(sms=132))
    kinds = {kind: sum(u.launch.kernel == kind for u in units) for kind in ("fused", "partials", "merge")}
    assert (len(units), launches, kinds) == (33, 480, {"fused": 8, "partials": 8, "merge": 7})
    argmax = {kind: sum(u.launch.kernel == kind for u in units) for kind in ("argmax", "argmax_partials")}
    assert argmax == {"argmax": 4, "argmax_partials": 4}  # triton_argmax at k 1, and 2 argmax_merge


def test_tune_adds_every_candidate_plan():
    hw = plans.Hardware(sms=132)
    cases = expand(load(ROOT / "scenarios" / "tune.toml"))
    units, _ = _sweep(cases, hw, tune=True)
    keys = {u.key for u in units}
    assert len(keys) == len(units) > len(_sweep(cases, hw)[0])
    for case in tuning.shapes_of(cases):
        dtype = dtype_of(case.dtype)
        for tunables in tuning.candidates(case.batch, case.vocab, case.topk, hw, dtype.itemsize):
            plan = tunables.plan_for(case.batch, case.vocab, case.topk, hw, dtype.itemsize)
            layout = ts.RowLayout.contiguous(case.vocab, dtype.itemsize)
            for launch in ts.plan_launches(case.batch, case.vocab, case.topk, plan, layout):
                assert launch.compile_key(dtype) in keys


def test_the_budget_stops_it_cleanly(tmp_path):
    done = _warm(_scenario(tmp_path, ENDLESS), "--jobs", "1", "--budget", "1")
    out, err = done.communicate(timeout=300)
    assert done.returncode == exits.EXIT_BUDGET, out + err
    # the endless launch first, then the edge-case matrix's two (k 1 and 4)
    assert "warm: 0 of 3 specialisations" in out and "stopped at the 1.0 s budget" in out
    assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_workers_and_exits_130(tmp_path, signum):
    running = _warm(_scenario(tmp_path, ENDLESS), "--jobs", "2")
    for line in running.stdout:
        if "workers started" in line:
            break
    running.send_signal(signum)
    out, err = running.communicate(timeout=300)
    assert running.returncode == exits.EXIT_INTERRUPTED, out + err
    # the endless launch never ends; the edge-case matrix's two may finish first
    assert re.search(r"warm: [0-2] of 3 specialisations", out) and out.rstrip().endswith("interrupted")
    assert "Traceback" not in err


def test_without_a_gpu_there_is_nothing_to_warm(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(kernels.INTERPRET_ENV, raising=False)
    assert cli.main(["warm", str(_scenario(tmp_path, TINY))]) == exits.EXIT_OK
    assert "no GPU here (cpu): nothing to warm" in capsys.readouterr().out


def test_bad_input_is_one_message(tmp_path, capsys):
    assert cli.main(["warm", str(tmp_path / "missing.toml")]) == exits.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("warm: ") and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as exited:
        cli.main(["warm", str(tmp_path / "missing.toml"), "--jobs", "0"])
    assert exited.value.code == 2 and "argument --jobs: expected an integer >= 1" in capsys.readouterr().err
    assert cli.main(["warm"]) == exits.EXIT_USAGE
    assert capsys.readouterr().err == (
        "warm: nothing to warm: give a SCENARIO, --candidates SCENARIO or --check SELECTOR\n"
    )


def test_the_battery_plan_is_what_the_battery_launches(recorded):
    """`perfsuite check --quick` on the Triton selectors launches exactly the keys the compile plan
    derives from the battery's inputs (row-strided, shifted and int64-strided views, every dtype)."""
    from perfsuite.correctness.conformance import battery

    cpu, hw = torch.device("cpu"), plans.hardware(torch.device("cpu"))
    names = ["triton_auto", "triton_fused", "triton_split"]
    units = warm.battery_units(names, hw, cpu, quick=True)
    for name in names:
        list(battery.rows(name, cpu, quick=True))  # the launches record their key and do nothing
    assert set(recorded) == {u.key for u in units}
    scans = [u.launch.scalars for u in units if "shift" in u.launch.scalars]
    shifts = {scalars["shift"] for scalars in scans}
    assert len(shifts) > 1 and any(s["stride_row"] > 2**31 for s in scans)  # offsets and int64 addressing
    for unit in warm.distinct(units):
        recorded.clear()
        warm.make_launch(unit, cpu)  # one row of the geometry has the key of the battery's rows
        assert recorded == [unit.key], unit.describe()


def test_the_edge_case_matrix_and_draft_plans_are_what_they_launch(tmp_path, recorded):
    from perfsuite.cases.draft.draft_runner import _reuses_outputs
    from perfsuite.cases.draft.draft_table import expand_draft
    from perfsuite.cases.draft.head import DraftHead
    from perfsuite.cases.draft.loop import DraftLoop
    from perfsuite.correctness import edge_cases
    from perfsuite.correctness.edge_cases import EDGE_TOPK

    cpu, hw = torch.device("cpu"), plans.hardware(torch.device("cpu"))
    scenario = load(_scenario(tmp_path, TINY))
    names = ["identity", "triton_fused", "triton_split", "triton_auto"]  # TINY's
    edge_cases.matrix([torch.bfloat16, torch.float32], EDGE_TOPK, names, cpu)
    assert set(recorded) == {u.key for u in warm.edge_matrix_units(scenario, hw)} != set()
    recorded.clear()
    draft = load(_scenario(tmp_path, DRAFT))
    for case in expand_draft(draft):
        select = variants.get(case.variant).select
        _reuses_outputs(select, case, cpu)
        tokens = torch.zeros(case.batch, case.loop.num_draft_tokens, dtype=torch.int64)
        hidden = torch.zeros(
            case.batch, case.loop.num_draft_tokens, case.head.hidden, dtype=case.head.torch_dtype
        )
        loop = DraftLoop(DraftHead(case.head), functools.partial(_fake, select), case.loop)
        loop.decode(*loop.extend(tokens, hidden))
    assert set(recorded) == {u.key for u in warm.draft_units(draft, hw)} != set()


def _fake(select, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`select`'s launches (recorded, not run), then outputs a draft loop can use."""
    select(logits, k)
    rows = logits.shape[0]
    return torch.full((rows, k), 1.0 / k), torch.arange(k).expand(rows, k).contiguous()


def test_keys_warmed_before_are_left_out(tmp_path):
    path, keys = _scenario(tmp_path, TINY), tmp_path / "keys.jsonl"
    from perfsuite import cli

    args = cli.parser().parse_args(["warm", str(path), "--keys", str(keys)])
    units, launches = warm.planned(args, torch.device("cpu"))
    assert units and launches >= len(units)
    for unit in units[:3]:
        warm._keep_key(keys, (unit, 0.1, ""))
    warm._keep_key(keys, (units[3], 0.1, "RuntimeError: failed"))  # a failed launch warmed nothing
    left, _ = warm.planned(args, torch.device("cpu"))
    assert [u.key for u in left] == [u.key for u in units[3:]]


def test_the_stages_compile_plans_on_the_h200():
    """The distinct kernel keys of the GPU check's real stages on the H200's plan hardware (heuristic
    plans): the compile counts scripts/gpu_check.sh and the README state."""
    hw, cuda = plans.Hardware(sms=132), torch.device("cuda")
    tune = warm.candidate_units(expand(load(ROOT / "scenarios" / "tune.toml")), hw)
    sweep = warm.scenario_units(load(ROOT / "scenarios" / "gpu_check.toml"), hw)
    draft = warm.draft_units(load(ROOT / "scenarios" / "draft_gpu.toml"), hw)
    battery = ["triton_auto", "triton_fused", "triton_split", "triton_argmax"]  # gpu_check.sh's CHECK_TRITON
    check = warm.battery_units(battery, hw, cuda, quick=True)
    counts = [len(warm.distinct(s)) for s in (tune, *sweep, draft, check)]
    assert counts == [105, 33, 12, 0, 11, 130]  # the battery's: 128 before its batch axis (issue 40)
    assert len(warm.distinct(tune, *sweep, draft, check)) == TOTAL_KEYS

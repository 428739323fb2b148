"""`scripts/gpu_check.sh` on this CPU: it runs once, on a lent GPU with minutes of device time, so every stage
runs here first (tiny scenarios, Triton's interpreter), and so do its pack (at most 8 files of at most
MAX_BYTES, names the device can return), its budgets (SIGINT, then the pack) and its own signals."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from support import LONG_SWEEP, LONG_SWEEP_CASES, sigterm_once_started

from perfsuite import kernels
from perfsuite.kernels import launch_log

ROOT = Path(__file__).parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
MAX_FILES = 8
RETURNED_NAME = re.compile(r"[A-Za-z0-9._-]+")  # what the device machine brings back from $OUT
needs_triton = pytest.mark.skipif(not kernels.triton_installed(), reason=kernels.NO_TRITON)
# on a GPU the script runs for real (its "tests" stage is the GPU tests): a dry run would cost device time
cpu_dry_run = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU dry run of the GPU check")

TIMING = """
[timing]
warmup = 1
reps = 3
max_seconds = 0.01
"""
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
"""
TUNE = """
name = "tune-dry-run"
device = "cpu"
[sweep]
variants = ["triton_auto"]
dtypes = ["bfloat16"]
vocab = [300]
batch = [2]
topk = [1]
logits = ["gaussian"]
"""
DRAFT = """
name = "draft-dry-run"
device = "cpu"
sweep = []
[[draft]]
variants = ["full_softmax", "identity"]
paths = ["eager", "graph"]
dtypes = ["bfloat16"]
vocab = 512
hidden = 32
batch = 2
topk = 2
num_steps = 2
logits = "head"
cycles = 2
"""
A_TEST = "def test_the_tests_stage_runs_pytest():\n    assert sum([1, 2]) == 3\n"


def _scenario(folder: Path, name: str, text: str) -> str:
    path = folder / f"{name}.toml"
    path.write_text(text + TIMING)
    return str(path)


def _long_sweep(folder: Path) -> str:
    path = folder / "long.toml"
    path.write_text(LONG_SWEEP)
    return str(path)


def _env(tmp_path: Path, stages: str, **extra: str) -> dict[str, str]:
    (tmp_path / "test_tiny.py").write_text(A_TEST)
    env = {
        **os.environ,
        "STAGES": stages,
        "SCENARIO": _scenario(tmp_path, "sweep", SWEEP),
        "TUNE_SCENARIO": _scenario(tmp_path, "tune", TUNE),
        "DRAFT_SCENARIO": _scenario(tmp_path, "draft", DRAFT),
        "TESTS": str(tmp_path / "test_tiny.py"),
        # the battery on two cases (one the graph capture), Triton's fused kernel for the Triton part
        "CHECK_ARGS": "--case vocab_7 --case graph_replay --dtype float32",
        "CHECK_TRITON": "triton_fused",
        "PYTHON": sys.executable,
        "TMPDIR": str(tmp_path),  # the scratch folder: gone after the pack
        kernels.INTERPRET_ENV: "1",
        **extra,
    }
    env.pop("PERFSUITE_PLANS", None)
    return env


def _run(tmp_path: Path, stages: str, **extra: str) -> subprocess.CompletedProcess:
    command = ["bash", str(SCRIPT), str(tmp_path / "out")]
    env = _env(tmp_path, stages, **extra)
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)


def _stages(out: Path) -> dict[str, str]:
    """The stage table of summary.md: stage -> status."""
    rows = re.findall(
        r"^\| (\w+) \| ([^|]+) \| [^|]+ \| \d+ \| \d+ \|$", (out / "summary.md").read_text(), re.M
    )
    return dict(rows)


def _assert_returnable(out: Path, max_bytes: int = 15 << 20) -> list[str]:
    """OUT_DIR as the device machine brings it back: at most 8 plain files, small, with plain names."""
    entries = sorted(out.iterdir())
    assert len(entries) <= MAX_FILES, [p.name for p in entries]
    for path in entries:
        assert path.is_file() and not path.is_symlink(), path
        assert RETURNED_NAME.fullmatch(path.name), path.name
        assert path.stat().st_size <= max_bytes, (path.name, path.stat().st_size)
    return [p.name for p in entries]


@needs_triton
@cpu_dry_run
def test_every_stage_runs_and_the_pack_is_returnable(tmp_path):
    stages = "machine warm kernels tune rewarm sweep summary draft check tests tp"
    # an H200's budgets, on a CPU that may be shared with other tests: each stage's cap raised (the
    # budgets themselves are tested apart)
    done = _run(tmp_path, stages, BUDGET_S="3000", **{f"{s.upper()}_S": "400" for s in stages.split()})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    names = _assert_returnable(out)
    expected = {"summary.md", "results.csv", "report.html", "tuned.json", "tune.csv", "kernels.csv"}
    assert expected | {"draft.csv", "logs.tar.gz"} == set(names)
    stages = _stages(out)
    assert list(stages) == [
        *("machine", "warm", "kernels", "tune", "rewarm", "sweep", "summary", "draft", "check", "tests", "tp")
    ]
    assert stages["tp"].startswith("skipped: 0 GPU visible")
    assert stages["warm"] == "ok" or stages["warm"].startswith("skipped: perfsuite/tools/warm.py is not")
    assert all(
        stages[s] == "ok"
        for s in ("machine", "kernels", "tune", "rewarm", "sweep", "summary", "draft", "check", "tests")
    )
    assert not list(tmp_path.glob("gpu-check.*")), "the scratch folder is removed after the pack"
    summary = (out / "summary.md").read_text()
    assert "## Tuned plans" in summary and "measured copy" in summary  # the summary stage and the machine
    results = pd.read_csv(out / "results.csv")
    assert set(results["variant"]) == {"full_softmax", "identity", "argmax_ones", "triton_auto"}
    # on the CPU Triton runs in its interpreter: checked, never timed (issue 11)
    interpreted = results["variant"] == "triton_auto"
    assert (results.loc[~interpreted, "status"] == "ok").all()
    assert (results.loc[interpreted, "status"] == "skipped").all()
    assert (results.loc[interpreted, "reason"] == kernels.NOT_TIMED).all()
    # the tune stage's table is filed under this CPU's name, and no table applies to a device without a GPU
    # name: on a GPU the sweep's triton_auto rows say "(tuned)"
    assert results.set_index("variant")["launch"]["triton_auto"].endswith("(heuristic)")
    assert len(pd.read_csv(out / "tune.csv")) >= 2 and '"entries"' in (out / "tuned.json").read_text()
    assert set(pd.read_csv(out / "kernels.csv")["target"]) == {"sm_90"}  # no GPU here: the H100/H200 target
    assert len(pd.read_csv(out / "draft.csv")) == 4
    with tarfile.open(out / "logs.tar.gz") as logs:
        members = {m.name.removeprefix("./") for m in logs.getmembers() if m.isfile()}
    asm = [m for m in members if m.startswith("kernels/asm/sm_90/")]
    assert {Path(m).suffix for m in asm} == {".ttgir", ".ptx", ".sass"}  # many files, one archive
    stage_logs = {f"logs/{s}.log" for s in stages}
    assert stage_logs | {"sweep/results.jsonl", "sweep/edge_cases.csv", "tests/junit.xml"} <= members
    assert {"check/torch.csv", "check/triton.csv"} <= members  # the battery's rows
    assert "Conformance battery" in (tmp_path / "out" / "summary.md").read_text()
    assert "1 passed" in (out / "summary.md").read_text()  # the tests stage's pytest line


def test_a_stage_over_its_budget_is_stopped_and_what_it_measured_is_packed(tmp_path):
    # the sweep gets SIGINT after 25 s, far from done; the summary then finds the total budget spent.
    # A small MAX_BYTES: a file over it is packed gzipped, or left out, and summary.md says which
    limits = {"SWEEP_S": "25", "GRACE_S": "15", "PACK_S": "5", "BUDGET_S": "46", "MAX_BYTES": "300000"}
    done = _run(tmp_path, "sweep summary", SCENARIO=_long_sweep(tmp_path), **limits)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    names = _assert_returnable(out, max_bytes=300000)
    stages = _stages(out)
    assert stages == {
        "sweep": "stopped at its budget (SIGINT)",
        "summary": "not run: the total budget is spent",
    }
    results = next(out / n for n in ("results.csv", "results.csv.gz") if n in names)
    assert 1 <= len(pd.read_csv(results)) < LONG_SWEEP_CASES  # what the sweep measured before its SIGINT
    summary = (out / "summary.md").read_text()
    for name in ("report.html", "logs.tar.gz"):  # packed, packed gzipped, or named as left out
        assert name in names or f"{name}.gz" in names or f"- {name} " in summary, name


def test_sigterm_to_the_script_stops_the_stage_and_packs(tmp_path):
    env = _env(tmp_path, "sweep summary", SCENARIO=_long_sweep(tmp_path))
    command = ["bash", str(SCRIPT), str(tmp_path / "out")]
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = sigterm_once_started(  # once the sweep logged its first row
        process, lambda: any(p.stat().st_size for p in tmp_path.glob("gpu-check.*/work/sweep/results.jsonl"))
    )
    assert process.returncode == 130, stdout.decode()[-3000:] + stderr.decode()[-3000:]
    out = tmp_path / "out"
    _assert_returnable(out)
    assert _stages(out) == {"sweep": "interrupted"}  # the summary never started
    assert 1 <= len(pd.read_csv(out / "results.csv")) < LONG_SWEEP_CASES


def test_an_unknown_stage_stops_with_status_2(tmp_path):
    done = _run(tmp_path, "machine benchmark")
    assert done.returncode == 2
    assert "unknown stage benchmark" in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"SWEEP_S": "2m"}, "SWEEP_S must be a whole number"),
        ({}, "holds notes.txt, which this check did not"),
    ],
)
def test_bad_settings_and_a_folder_of_other_files_stop_with_status_2(tmp_path, setting, message):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("someone else's")
    done = _run(tmp_path, "machine", **setting)
    assert done.returncode == 2 and message in done.stderr
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


@needs_triton
@cpu_dry_run
def test_the_whole_check_runs_on_the_simulated_h200(tmp_path):
    """The GPU check end to end as on the H200 (`PERFSUITE_SIMULATED_GPU=h200`): the GPU branches of every
    stage, graph cases cold, the tuned table driving the sweep's triton_auto, and what comes back."""
    on_the_gpu = {
        name: _scenario(tmp_path, f"sim-{name}", text.replace('device = "cpu"', 'device = "auto"'))
        for name, text in (("sweep", SWEEP), ("tune", TUNE), ("draft", DRAFT))
    }
    graph_sweep = on_the_gpu["sweep"]
    with_argmax = Path(graph_sweep).read_text().replace('"triton_auto"]', '"triton_auto", "triton_argmax"]')
    Path(graph_sweep).write_text(  # and a k 8 shape: the cost of exactness at k = 1 and k > 1
        with_argmax.replace("[sweep]\n", '[[sweep]]\npaths = ["eager", "graph"]\n')
        + '[[sweep]]\nvariants = ["full_softmax", "triton_auto"]\npaths = ["graph"]\ndtypes = ["bfloat16"]\n'
        + 'vocab = [4500]\nbatch = [2]\ntopk = [8]\nlogits = ["gaussian"]\n'
        + '[[sweep]]\nvariants = ["triton_auto"]\npaths = ["graph"]\ndtypes = ["bfloat16"]\n'
        + 'vocab = [300]\nbatch = [2]\ntopk = [1]\nlogits = ["gaussian"]\n'  # the tune stage's shape
    )
    draft = Path(on_the_gpu["draft"])  # a Triton selector in the draft loop: fp32 [B, V] and [B * k, V]
    draft.write_text(draft.read_text().replace('"identity"]', '"identity", "triton_auto"]'))
    launches = tmp_path / "launches.jsonl"
    env = _env(tmp_path, "machine warm kernels tune rewarm sweep summary draft check tests tp")
    env.update(
        SCENARIO=graph_sweep,
        TUNE_SCENARIO=on_the_gpu["tune"],
        DRAFT_SCENARIO=on_the_gpu["draft"],
        # the battery's layouts that change a kernel's key: below a tile, a shifted view, padded rows
        CHECK_ARGS="--dtype float16 "
        + " ".join(f"--case {case}" for case in ("vocab_7", "offset_3", "padded_rows_1031", "graph_replay")),
        CHECK_TRITON="triton_fused triton_split",
        PERFSUITE_SIMULATED_GPU="h200",
        PERFSUITE_LAUNCH_LOG=str(launches),
        BUDGET_S="3000",  # the stages' budgets are an H200's: the simulation interprets Triton on 2 cores
        **{f"{stage}_S": "400" for stage in ("MACHINE", "WARM", "KERNELS", "TUNE", "REWARM", "SWEEP")},
        SUMMARY_S="400",
        **{f"{stage}_S": "400" for stage in ("DRAFT", "CHECK", "TESTS", "TP")},
    )
    command = ["bash", str(SCRIPT), str(tmp_path / "out")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out"
    assert len(_assert_returnable(out)) == MAX_FILES
    stages = _stages(out)
    assert stages["tp"].startswith("skipped: 1 GPU visible")
    assert all(status == "ok" for stage, status in stages.items() if stage != "tp"), stages
    results = pd.read_csv(out / "results.csv")
    assert (results["status"] == "ok").all() and results["simulated"].all()
    assert set(results["path"]) == {"eager", "graph"}
    assert set(results["device"]) == {"NVIDIA H200 (simulated)"}
    auto = results[results["variant"] == "triton_auto"].set_index("vocab")["launch"]
    assert auto[300].endswith("(tuned)")  # the shape the tune stage measured; 4500 lies 3.9 octaves away
    assert auto[4500].str.endswith("(heuristic)").all()
    assert '"device": "NVIDIA H200 (simulated)"' in (out / "tuned.json").read_text()
    draft = pd.read_csv(out / "draft.csv")
    assert set(draft["path"]) == {"eager", "graph"} and (draft["status"] == "ok").all()
    with tarfile.open(out / "logs.tar.gz") as logs:  # the battery captured and replayed in a graph
        checked = pd.read_csv(logs.extractfile("./check/torch.csv"))
    replayed = checked[checked["case"] == "graph_replay"]
    assert len(replayed) and set(replayed["verdict"]) == {"pass"}, replayed
    text = (out / "summary.md").read_text()
    assert "(simulated)" in text
    # it opens with the cost of exactness, every cell present, labelled simulated
    assert next(line for line in text.splitlines() if line.startswith("## ")) == "## Cost of exactness"
    exactness = text.split("## Cost of exactness")[1].split("\n## ")[0]
    assert "Simulated: NVIDIA H200 (simulated)" in exactness
    one, several = (
        part.split("### k > 1")[0] for part in exactness.split("### k = 1")[1].split("### k > 1", 1)
    )
    for table, ratios in ((one, ["exact/argmax", "exact/full_softmax"]), (several, ["exact/full_softmax"])):
        header, *rows = [
            [c.strip() for c in line.split("|")[1:-1]]
            for line in table.splitlines()
            if line.startswith("| ") and "---" not in line
        ]
        assert header[0] == "device" and all(r in header for r in ratios), header
        assert rows and all(len(row) == len(header) and all(row) for row in rows), rows  # every cell
        assert all(row[0] == "NVIDIA H200 (simulated)" for row in rows)
    assert_every_launch_was_warmed_first(launch_log.read(launches), list(stages))


def assert_every_launch_was_warmed_first(entries: list[launch_log.LoggedLaunch], stages: list[str]) -> None:
    """The compile plan's proof (issue 19): each stage launches only kernel keys (with their pointers'
    alignment) that a warm worker launched in an earlier stage. The tests stage is exempt: its kernels
    (odd tiles and splits of the kernels' own tests) compile in parallel pytest workers instead."""
    warmed: set[str] = set()
    launched = {stage: set() for stage in stages}
    for entry in entries:
        assert entry.stage in launched, entry
        (warmed if entry.warmed else launched[entry.stage]).add((entry.stage, entry.key))
    assert {stage for stage, _ in warmed} <= {"warm", "rewarm"}
    for stage in ("tune", "sweep", "draft", "check"):
        assert launched[stage], f"the {stage} stage launched no Triton kernel: the proof proves nothing"
    before: set[str] = set()
    for stage in stages:
        if stage in ("warm", "rewarm"):
            assert not launched[stage], f"{stage} launched outside its workers"
        elif stage != "tests":
            cold = {key for _, key in launched[stage]} - before
            assert not cold, (
                f"the {stage} stage launched {len(cold)} keys not warmed before it: {sorted(cold)}"
            )
        before |= {key for s, key in warmed if s == stage}


def test_the_proof_fails_on_a_key_warmed_late_or_never():
    """The per-stage assertion itself: a key warmed only after the stage that launches it fails."""
    entry, stages = launch_log.LoggedLaunch, ["warm", "tune", "rewarm", "sweep", "draft", "check", "tests"]
    warmed = [entry("warm", True, "a"), entry("rewarm", True, "b")]
    launched = [entry(s, False, "a") for s in ("tune", "draft", "check")] + [entry("sweep", False, "b")]
    assert_every_launch_was_warmed_first([*warmed, *launched, entry("tests", False, "odd")], stages)
    with pytest.raises(AssertionError, match="the tune stage launched 1 keys not warmed"):
        assert_every_launch_was_warmed_first([*warmed, *launched, entry("tune", False, "b")], stages)
    with pytest.raises(AssertionError, match="the check stage launched 1 keys"):
        assert_every_launch_was_warmed_first([*warmed, *launched, entry("check", False, "c")], stages)


def test_the_stage_budgets_fit_the_total_and_the_machine_gets_30_s():
    text = SCRIPT.read_text()
    defaults = {name: int(value) for name, value in re.findall(r"\b([A-Z]+_S)=\$\{\1:-(\d+)\}", text)}
    stages = re.search(r'^ALL_STAGES="([^"]+)"', text, re.M).group(1).split()
    budgets = {stage: defaults[f"{stage.upper()}_S"] for stage in stages}
    assert budgets["machine"] == 30
    # tp runs only with more than one GPU, on what is left
    assert sum(b for stage, b in budgets.items() if stage != "tp") == 445
    assert 445 + defaults["GRACE_S"] + defaults["PACK_S"] <= defaults["BUDGET_S"] == 480
    header = text.split("set -uo pipefail")[0]
    for stage, budget in budgets.items():  # the header's stage lines state the same budgets
        assert re.search(rf"^#   {stage} +{budget} s ", header, re.M), stage

"""The pytest-benchmark front end: same scenarios, same samplers, results readable by the report."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import HAS_GPU

from perfsuite import cli, kernels, simulated_gpu
from perfsuite.report import build_report
from perfsuite.results import run_dir
from perfsuite.results.run import Run, load_run
from perfsuite.scenario.load import load

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
TINY = """
name = "tiny"
[[sweep]]
variants = ["identity", "full_softmax", "triton_auto"]
paths = ["eager"]
dtypes = ["float32", "bfloat16"]
vocab = [1000]
batch = [2]
topk = [1]
logits = ["peaked"]
[timing]
warmup = 1
reps = 5
max_seconds = 0.05
threads = 1
"""
PARAMS = ("variant", "path", "dtype", "vocab", "batch", "topk", "logits")


def front_end(*args: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m pytest benchmarks ARGS` in a fresh process (its own session, threads and storage)."""
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(ROOT / "benchmarks"),
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=env,
    )


def _failed(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.parametrize("simulated", [False, True], ids=["here", "simulated-h200"])
def test_benchmarks_record_the_samplers_times_and_every_result_column(tmp_path, simulated):
    if simulated and HAS_GPU:
        pytest.skip("a GPU is present: the simulated run is for machines without one")
    scenario = tmp_path / "bench.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "bench.json"
    proc = front_end(
        "--scenario",
        str(scenario),
        "--benchmark-json",
        str(out),
        env={simulated_gpu.ENV: "h200"} if simulated else None,
    )
    assert proc.returncode == 0, _failed(proc)
    data = json.loads(out.read_text())
    benches = data["benchmarks"]
    if HAS_GPU or simulated:
        assert len(benches) == 8
        assert all(b["extra_info"]["simulated"] == simulated for b in benches)
    else:  # the graph cases are skipped, with the reason
        assert (
            len(benches) == 4 and "SKIPPED [4]" in proc.stdout and "needs a CUDA or ROCm GPU" in proc.stdout
        )
    assert data["machine_info"]["perfsuite"]["simulated"] == simulated
    for bench in benches:
        info, stats = bench["extra_info"], bench["stats"]
        assert stats["rounds"] == 4 and info["samples"] == 4
        assert abs(stats["median"] * 1e6 - info["median_us"]) < 1e-6  # pytest-benchmark saw our samples
        assert info["verdict"] == "pass" and info["bytes_model"] > 0
        assert bench["options"]["timer"] == "perfsuite.measure.timing.SampleClock"
        assert info["threads"] == 1  # the scenario's default [timing] threads
    frame = load_run([out]).frame
    assert len(frame) == len(benches) and set(frame["variant"]) == {"full_softmax", "identity"}
    assert build_report(Run.of(frame), tmp_path / "bench.html").stat().st_size > 0


@dataclasses.dataclass
class Recipe:
    """The compare recipe of benchmarks/test_selection.py, run in a fresh folder (its `.benchmarks/`)."""

    folder: Path
    scenario: Path
    base: subprocess.CompletedProcess
    new: subprocess.CompletedProcess

    def saved(self, name: str) -> dict:
        (path,) = (self.folder / ".benchmarks").glob(f"*/*_{name}.json")
        return json.loads(path.read_text())

    def path(self, name: str) -> str:
        (path,) = (self.folder / ".benchmarks").glob(f"*/*_{name}.json")
        return str(path)


@pytest.fixture(scope="module")
def recipe(tmp_path_factory) -> Recipe:
    """Save a run (`--scenario-threads 2` over the scenario's threads = 1, grouped by dtype), then run
    again with the scenario's threads, compared with it (grouped by variant). The folder is the working
    directory, as in the recipe: pytest-benchmark names a storage outside it only by crashing (its issue
    217) when the two runs' machine_info differ, as here (their threads)."""
    folder = tmp_path_factory.mktemp("recipe")
    scenario = folder / "tiny.toml"
    scenario.write_text(TINY)
    common = ("--scenario", str(scenario))
    base = front_end(
        *common,
        "--scenario-threads",
        "2",
        "--benchmark-save=base",
        "--benchmark-group-by=param:dtype",
        cwd=folder,
    )
    assert base.returncode == 0, _failed(base)
    new = front_end(
        *common,
        "--benchmark-save=new",
        "--benchmark-compare",
        "--benchmark-compare-fail=median:1000%",  # the recipe must work; the timing is not under test
        "--benchmark-group-by=param:variant",
        cwd=folder,
    )
    return Recipe(folder, scenario, base, new)


def test_benchmarks_are_parametrized_by_the_case_primitives(recipe):
    data = recipe.saved("base")
    assert "UNSERIALIZABLE" not in json.dumps(data)
    benches = data["benchmarks"]
    assert benches and all(set(b["params"]) == set(PARAMS) for b in benches)
    for bench in benches:
        params, info = bench["params"], bench["extra_info"]
        assert params == {name: info[name] for name in PARAMS}
        assert bench["name"] == f"test_selection[{info['case_id']}]"
        assert isinstance(params["vocab"], int) and params["vocab"] == 1000 and params["batch"] == 2
    assert {b["params"]["dtype"] for b in benches} == {"float32", "bfloat16"}
    assert {b["params"]["variant"] for b in benches} >= {"identity", "full_softmax"}


def test_group_by_a_case_parameter(recipe):
    for dtype in ("float32", "bfloat16"):
        assert f"benchmark 'dtype={dtype}': " in recipe.base.stdout, _failed(recipe.base)
    for variant in ("identity", "full_softmax"):
        assert f"benchmark 'variant={variant}': " in recipe.new.stdout, _failed(recipe.new)
    assert "benchmark 'dtype=" not in recipe.new.stdout


def test_threads_in_effect_in_every_row_and_the_machine_info(recipe):
    for name, threads in (("base", 2), ("new", 1)):  # --scenario-threads 2; the scenario's threads = 1
        data = recipe.saved(name)
        entry = data["machine_info"]["perfsuite"]
        assert entry["threads"] == threads
        assert entry["backend"] in ("cpu", "cuda", "rocm") and entry["device"] and entry["cpu_model"]
        assert entry["cores"] >= 1 and entry["torch"] and entry["triton"]
        assert "cpu_quota" in entry and entry["simulated"] is False
        assert entry["load_avg_start"] >= 0
        assert all(b["extra_info"]["threads"] == threads for b in data["benchmarks"])


def test_rows_carry_the_run_settings_and_machine_busy_columns(recipe):
    fingerprints = {}
    for name, threads in (("base", 2), ("new", 1)):
        data = recipe.saved(name)
        scenario = load(recipe.scenario)
        scenario = dataclasses.replace(scenario, timing=dataclasses.replace(scenario.timing, threads=threads))
        infos = [b["extra_info"] for b in data["benchmarks"]]
        expected = run_dir.fingerprint(run_dir.settings_of(scenario, infos[0]["device"]))
        assert (
            {info["settings"] for info in infos}
            == {expected}
            == {data["machine_info"]["perfsuite"]["settings"]}
        )
        labels = {info["run"] for info in infos}
        assert len(labels) == 1 and labels.pop().startswith("pytest-benchmark ")
        for info in infos:
            assert math.isnan(info["other_cores"]) or info["other_cores"] >= 0
            assert info["load_avg"] >= 0 and info["timestamp"]
        fingerprints[name] = expected
    assert fingerprints["base"] != fingerprints["new"]  # the threads are a setting


def test_save_then_compare_recipe(recipe, capsys):
    assert recipe.new.returncode == 0, _failed(recipe.new)
    assert "Comparing against benchmarks from" in recipe.new.stdout + recipe.new.stderr
    assert "0001_base" in recipe.new.stdout + recipe.new.stderr
    assert Path(recipe.path("new")).name.startswith("0002_")
    # their threads differ, so pytest-benchmark says their machine_info does (the load average is left out)
    assert "machine_info is different" in recipe.new.stdout + recipe.new.stderr
    base, new = recipe.path("base"), recipe.path("new")
    assert cli.main(["compare", base, new, "--fail-on", "900%"]) == 0  # no parity regression, files read
    printed = capsys.readouterr().out
    count = len(recipe.saved("new")["benchmarks"])
    assert f"{count} cases matched" in printed
    out = recipe.folder / "bench.html"
    assert cli.main(["report", base, new, "--out", str(out)]) == 0
    assert out.stat().st_size > 0
    frame = load_run([new]).frame
    assert len(frame) == count and set(frame["threads"]) == {1}


def test_triton_on_the_cpu_is_not_timed(recipe):
    if HAS_GPU:
        pytest.skip("a GPU is present: the Triton variants are timed there")
    for proc, name in ((recipe.base, "base"), (recipe.new, "new")):
        variants = {b["params"]["variant"] for b in recipe.saved(name)["benchmarks"]}
        assert variants == {"identity", "full_softmax"}
        assert "SKIPPED [2]" in proc.stdout and "interpreter" in proc.stdout, _failed(proc)
        assert kernels.NOT_TIMED in proc.stdout


def test_compare_leaves_the_load_average_out_of_machine_info(monkeypatch):
    spec = importlib.util.spec_from_file_location("benchmarks_conftest", ROOT / "benchmarks" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, conftest)  # its dataclass looks its module up
    spec.loader.exec_module(conftest)
    now = {"perfsuite": {"threads": 1, "load_avg_start": 0.25}}
    saved = {"machine_info": {"perfsuite": {"threads": 1, "load_avg_start": 3.5}}, "benchmarks": []}
    wrapper = conftest.pytest_benchmark_compare_machine_info(None, None, now, saved)
    next(wrapper)  # the other implementations (pytest-benchmark's warning) run here
    compared = (dict(now["perfsuite"]), dict(saved["machine_info"]["perfsuite"]))
    with pytest.raises(StopIteration):
        wrapper.send(None)
    assert compared == ({"threads": 1}, {"threads": 1})
    assert now["perfsuite"]["load_avg_start"] == 0.25
    assert saved["machine_info"]["perfsuite"]["load_avg_start"] == 3.5

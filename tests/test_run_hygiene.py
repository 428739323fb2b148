"""Numbers a reader can trust (issue 11): threads as a setting, the machine's state, variants sampled in
turn with paired speedups, raw samples, and a run folder that never mixes or loses runs."""

from __future__ import annotations

import json
from pathlib import Path

import filelock
import pandas as pd
import pytest
import torch

from perfsuite import cli, kernels
from perfsuite.cases import protocol
from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core import machine, settings
from perfsuite.core.settings import Timing
from perfsuite.measure import memory, timing
from perfsuite.results import run_dir
from perfsuite.results.run import load_run
from perfsuite.results.write import ResultsLog

SCENARIO = """
name = "hygiene"
device = "cpu"  # CPU expectations
[[sweep]]
variants = ["full_softmax", "argmax_ones", "identity"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [1000]
batch = [2]
topk = [1, 4]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 9
max_seconds = 0.2
{extra}
"""


@pytest.fixture(autouse=True)
def keep_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def scenario_file(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "hygiene.toml"
    path.write_text(SCENARIO.format(extra=extra))
    return path


def run(tmp_path: Path, *args: str, extra: str = "") -> tuple[int, Path]:
    out = tmp_path / "out"
    code = cli.main(["run", str(scenario_file(tmp_path, extra)), "--out", str(out), "--no-progress", *args])
    return code, out


def test_a_run_records_threads_machine_state_paired_speedups_and_raw_samples(tmp_path, capsys):
    code, out = run(tmp_path, "--label", "first")
    assert code == 0
    frame = load_run([out]).frame
    assert (frame["threads"] == 1).all() and torch.get_num_threads() == 1  # the default: one thread
    assert frame["run"].eq("first").all() and frame["settings"].nunique() == 1
    for column in ("cpu_model", "cores", "other_cores", "load_avg", "spread", "unstable"):
        assert frame[column].notna().all(), column
    assert (frame["spread"] >= 0).all()
    assert (frame["unstable"] == (frame["spread"] > timing.UNSTABLE_SPREAD)).all()
    # the three variants of a shape were sampled in turn: every speedup is a median of paired ratios
    assert frame["speedup_method"].eq("paired").all()
    assert (frame["speedup_p20"] <= frame["speedup_vs_full"] + 1e-12).all()
    assert (frame["speedup_vs_full"] <= frame["speedup_p80"] + 1e-12).all()
    assert frame.loc[frame["variant"] == "full_softmax", "speedup_vs_full"].eq(1.0).all()
    samples = {row["case_id"]: row for row in ResultsLog(out / "samples.jsonl").read()}
    assert set(samples) == set(frame["case_id"])
    for row in frame.itertuples():
        seconds = samples[row.case_id]["seconds"]
        assert len(seconds) == row.samples and samples[row.case_id]["run"] == "first"
        assert pd.Series(seconds).median() * 1e6 == pytest.approx(row.median_us)
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["label"] == "first" and manifest["settings_fingerprint"] == frame["settings"].iloc[0]
    assert manifest["settings"]["timing"]["threads"] == 1 and "other_cores" in manifest["end"]
    printed = capsys.readouterr().out
    assert "fastest exact" in printed and "fastest" in printed  # the compact table `run` ends with


def test_threads_setting_and_override(tmp_path):
    code, out = run(tmp_path, extra="threads = 2")
    assert code == 0 and (load_run([out]).frame["threads"] == 2).all()
    code, out = run(tmp_path, "--threads", "1", extra="threads = 2")
    assert code == 0 and (load_run([out]).frame["threads"] == 1).all()


def test_bad_threads_are_usage_errors(tmp_path, capsys):
    assert run(tmp_path, extra="threads = -1")[0] == 2
    assert "[timing].threads" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run(tmp_path, "--threads", "many")
    assert exc.value.code == 2


def test_only_selects_cases_by_glob(tmp_path):
    code, out = run(tmp_path, "--only", "identity/*/k4/*")
    frame = load_run([out]).frame
    assert code == 0 and list(frame["case_id"]) == ["identity/eager/float32/V1000/B2/k4/gaussian"]


def test_a_rerun_moves_the_earlier_run_aside_and_never_mixes_it_in(tmp_path, capsys):
    run(tmp_path, "--label", "run-before")
    (tmp_path / "out" / "draft.csv").write_text("stale draft rows\n")  # e.g. from an older scenario
    code, out = run(tmp_path, "--label", "new", "--only", "argmax_ones/*")
    assert code == 0
    assert "earlier run: its files moved to" in capsys.readouterr().err
    kept = out / "earlier" / "run-before"
    assert (
        (kept / "results.csv").exists()
        and (kept / "samples.jsonl").exists()
        and (kept / "draft.csv").exists()
    )
    assert len(pd.read_csv(kept / "results.csv")) == 6
    frame = load_run([out]).frame
    assert set(frame["run"]) == {"new"} and len(frame) == 2
    assert not (out / "draft.csv").exists()  # the older file never leaks into the new report
    page = (out / "report.html").read_text()
    assert page.count("run-before") == 1 and "files moved to" in page  # only the note says where it went


def test_resume_refuses_a_log_of_other_settings(tmp_path, capsys):
    run(tmp_path, "--only", "full_softmax/*")
    log = (tmp_path / "out" / "results.jsonl").read_text()
    capsys.readouterr()
    code, _ = run(tmp_path, "--resume", extra='l2 = "hot"')
    err = capsys.readouterr().err
    assert code == 2 and "cannot --resume" in err and 'timing.l2: "cold" -> "hot"' in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "out" / "results.jsonl").read_text() == log  # nothing lost


def test_resume_drops_a_torn_last_line_with_a_warning(tmp_path, capsys):
    run(tmp_path, "--only", "full_softmax/*")
    log = tmp_path / "out" / "results.jsonl"
    log.write_text(log.read_text() + '{"case_id": "argmax_ones/eager/flo')  # a write cut short
    code, out = run(tmp_path, "--resume")
    assert code == 0 and "dropped a torn last line" in capsys.readouterr().err
    frame = load_run([out]).frame
    assert len(frame) == 6 and frame["case_id"].is_unique and frame["run"].nunique() == 1


def test_a_second_run_into_a_locked_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    with filelock.FileLock(str(out / run_dir.LOCK)):
        code, _ = run(tmp_path)
    assert code == 2 and "another perfsuite run is writing here" in capsys.readouterr().err
    assert not (out / "results.jsonl").exists()


def test_memory_fit_honours_the_cgroup_limit(tmp_path, monkeypatch):
    (tmp_path / "memory.max").write_text(str(3 << 30))
    (tmp_path / "memory.current").write_text(str(1 << 30))
    monkeypatch.setattr(machine, "CGROUP", tmp_path)
    assert machine.host_available_bytes() <= 2 << 30
    assert memory.available_bytes(torch.device("cpu")) <= 2 << 30
    assert memory.fits(3 << 30, torch.device("cpu")) is not None
    (tmp_path / "memory.max").write_text("max")
    assert machine.memory_limit_left() is None


def test_cpu_quota_and_other_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "CGROUP", tmp_path)
    (tmp_path / "cpu.max").write_text("150000 100000")
    assert machine.cpu_quota() == 1.5
    (tmp_path / "cpu.max").write_text("max 100000")
    assert machine.cpu_quota() is None
    start = machine.CpuSnapshot(wall=10.0, busy=100.0, own=5.0)
    end = machine.CpuSnapshot(wall=12.0, busy=104.0, own=6.0)  # 4 s busy, 1 s of it ours, over 2 s
    assert machine.other_cores(start, end) == 1.5
    assert "shared" in machine.sharing_note(1.5, 2.0, 3.0)
    assert machine.sharing_note(0.1, 0.2, 1.0) == ""


class FakeSampler(timing.Sampler):
    """Returns fixed figures and records the order it was sampled in."""

    def __init__(self, name: str, seconds: float, order: list[str], broken: bool = False):
        self.name, self.seconds, self.order, self.broken = name, seconds, order, broken

    def sample(self) -> float:
        if self.broken:
            raise RuntimeError(f"{self.name} broke")
        self.order.append(self.name)
        return self.seconds


def test_samplers_take_turns_and_each_round_starts_one_later():
    order: list[str] = []
    samplers = [FakeSampler(n, s, order) for n, s in (("a", 1.0), ("b", 2.0), ("c", 4.0))]
    samples = timing.measure_in_turn(samplers, Timing(warmup=0, reps=3))
    assert order == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert [s.median_us for s in samples] == [1e6, 2e6, 4e6]
    ratio = timing.paired_ratio(samples[2], samples[0])
    assert (ratio.median, ratio.p20, ratio.p80) == (4.0, 4.0, 4.0)


def test_a_broken_sampler_leaves_the_others_measured_alone():
    order: list[str] = []
    samplers = [FakeSampler("a", 1.0, order), FakeSampler("b", 1.0, order, broken=True)]
    first, second = timing.measure_each(samplers, Timing(warmup=0, reps=3))
    assert isinstance(first, timing.Samples) and len(first.seconds) == 3
    assert isinstance(second, RuntimeError)


def test_paired_ratio_spread_follows_the_rounds():
    base = timing.Samples((1.0, 2.0, 1.0, 2.0, 1.0), "x")
    other = timing.Samples((0.5, 1.0, 0.5, 1.0, 0.5), "x")  # twice as fast in every round
    assert timing.paired_ratio(base, other) == timing.Ratio(2.0, 2.0, 2.0)
    noisy = timing.Samples((0.01, 0.02, 0.01, 0.02, 0.01), "x")
    assert noisy.spread == pytest.approx(1.0) and noisy.unstable


def test_a_case_that_breaks_in_a_group_leaves_the_others_paired(tmp_path):
    from perfsuite.measure.device import detect
    from perfsuite.measure.environment import environment
    from perfsuite.scenario.load import expand, load

    scenario = load(scenario_file(tmp_path))
    info = detect("cpu")
    runner = KernelRunner(info, environment(info, scenario.name))
    group = [c for c in expand(scenario) if c.topk == 1]
    original = runner.prepare_timed

    def prepare(case):
        if case.variant == "argmax_ones":
            raise RuntimeError("kernel exploded")
        return original(case)

    runner.prepare_timed = prepare
    rows = {row["variant"]: row for row in runner.run_in_turn(group)}
    assert rows["argmax_ones"]["status"] == "error" and "exploded" in rows["argmax_ones"]["reason"]
    assert rows["identity"]["status"] == "ok" and rows["identity"]["speedup_method"] == "paired"
    assert len(rows["identity"][protocol.SAMPLES]) == rows["identity"]["samples"]


def test_triton_in_the_interpreter_is_not_timed(monkeypatch):
    monkeypatch.setattr(kernels, "interpreting", lambda: True)
    assert kernels.untimed(torch.device("cpu")) == kernels.NOT_TIMED
    assert kernels.untimed(torch.device("meta")) is None
    from perfsuite.measure.device import detect
    from perfsuite.scenario.load import Case

    runner = KernelRunner(detect("cpu"), {})
    if kernels.triton_installed():  # a Triton variant checked in the interpreter is a skipped row
        assert runner.skip_reason(Case("s", "triton_auto", "eager", "float32", 1000, 2, 1, "gaussian")) == (
            kernels.NOT_TIMED
        )
    assert runner.skip_reason(Case("s", "identity", "eager", "float32", 1000, 2, 1, "gaussian")) is None


def test_threads_apply_and_restore_the_default():
    assert settings.apply_threads(1) == 1
    assert settings.apply_threads(0) == settings.TORCH_DEFAULT_THREADS
    with pytest.raises(ValueError):
        settings.apply_threads(-1)


def test_gpu_state_reads_nvidia_smi_and_is_empty_where_not_readable(monkeypatch):
    from perfsuite.measure import environment
    from perfsuite.measure.device import DeviceInfo

    h200 = DeviceInfo("cuda", "cuda:0", "NVIDIA H200", "CUDA 13.0", 4800.0, 50 << 20, "sm_90")
    asked: list[list[str]] = []

    def smi(command: list[str]) -> str:
        asked.append(command)
        return "1980, 3201, 1980, 41, 118.52"

    monkeypatch.setattr(environment, "_first_line_of", smi)
    state = environment.gpu_state(h200)
    assert state == {
        "sm_mhz": "1980",
        "mem_mhz": "3201",
        "max_sm_mhz": "1980",
        "temp_c": "41",
        "power_w": "118.52",
    }
    assert asked[0][0] == "nvidia-smi" and "--id=0" in asked[0]
    monkeypatch.setattr(environment, "_first_line_of", lambda command: "")
    assert environment.gpu_state(h200) == {}  # no nvidia-smi: nothing, never a crash
    simulated = DeviceInfo(
        "cuda", "cuda:0", "NVIDIA H200 (simulated)", "CUDA 13.0", 4800.0, 1, simulated=True
    )
    assert environment.gpu_state(simulated) == {}

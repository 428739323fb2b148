"""`perfsuite profile` and `perfsuite call`: trace layout, the per-kernel table, GPU trace attribution."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch

from perfsuite import cli, simulated_gpu
from perfsuite.core import exits
from perfsuite.scenario.load import expand, load
from perfsuite.simulated_gpu import runtime
from perfsuite.tools.profiling import (
    FLUSH_RANGE,
    load_events,
    profile_scenario,
    range_name,
    run_name,
    select_cases,
    summarize,
)

DATA = Path(__file__).parent / "data"
SCENARIO = """
name = "tiny"
device = "cpu"  # CPU expectations: on a GPU box this file still tests the CPU
[[sweep]]
variants = ["full_softmax", "identity"]
paths = ["eager", "graph"]
dtypes = ["bfloat16"]
vocab = [1000]
batch = [3]
topk = [1, 4]
logits = ["near_ties"]
[timing]
warmup = 1
reps = 3
max_seconds = 0.05
"""
TRACE_FILE = re.compile(r"^[^/]+\.\d+\.pt\.trace\.json$")
COLD = """
name = "cold"
device = "cpu"  # the GPU test overrides it with --device cuda:0
[[sweep]]
variants = ["full_softmax"]
paths = ["eager"]
dtypes = ["bfloat16"]
vocab = [1000]
batch = [3]
topk = [4]
logits = ["near_ties"]
[timing]
warmup = 1
reps = 3
l2 = "cold"
threads = 2
"""
COLD_CASE = "full_softmax/eager/bfloat16/V1000/B3/k4/near_ties"
FLUSH_OPS = {"aten::sum"}  # the read-only flush (timing.CacheFlush), on a CPU (and the simulated GPU)
HTA_RANK = re.compile(r'"rank":\s+(\d+)')  # how HTA finds a trace file's rank (hta.common.trace_file)


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO)
    return path


def test_profile_writes_a_tensorboard_run_per_case_and_the_kernel_table(scenario_file, tmp_path, capsys):
    out = tmp_path / "prof"
    assert cli.main(["profile", str(scenario_file), "--out", str(out), "--calls", "2"]) == 0
    printed = capsys.readouterr().out
    cases = pd.read_csv(out / "cases.csv")
    assert len(cases) == 8 and set(cases["status"]) == {"ok", "skipped"}
    skipped = cases[cases["status"] == "skipped"]
    assert (skipped["path"] == "graph").all() and skipped["reason"].str.contains("GPU").all()
    ok = cases[cases["status"] == "ok"]
    for row in ok.itertuples():
        folder = out / row.run  # TensorBoard: <logdir>/<run>/<worker>.<ts>.pt.trace.json
        traces = list(folder.iterdir())
        assert len(traces) == 1 and TRACE_FILE.match(traces[0].name), traces
        assert row.trace == f"{row.run}/{traces[0].name}"
        names = {e.get("name") for e in json.loads(traces[0].read_text())["traceEvents"]}
        assert f"perfsuite.{row.variant}.eager" in names
        assert row.calls == 2 and row.kernels_per_call >= 1
    assert sorted(ok["run"]) == sorted(p.name for p in out.iterdir() if p.is_dir())
    kernels = pd.read_csv(out / "kernels.csv")
    assert set(kernels["case_id"]) == set(ok["case_id"])
    assert kernels["activity"].str.startswith("cpu ops").all()
    softmax = kernels[kernels["case_id"] == "full_softmax/eager/bfloat16/V1000/B3/k1/near_ties"]
    assert "aten::_softmax" in set(softmax["kernel"]) and "aten::softmax" not in set(softmax["kernel"])
    for _, part in kernels.groupby("case_id"):
        assert part["share"].sum() == pytest.approx(1.0)
        assert (part["mean_us"] * part["calls"]).to_numpy() == pytest.approx(part["total_us"].to_numpy())
    # the console's table names each case's top op, the one that took most of its time (under load that may
    # be another aten op than _softmax: the printed top must be the table's)
    top = ok.set_index("case_id").loc["full_softmax/eager/bfloat16/V1000/B3/k1/near_ties", "top_kernel"]
    assert "CPU run" in printed and top in printed and "kernels.csv" in printed


@pytest.fixture
def cold_file(tmp_path: Path) -> Path:
    path = tmp_path / "cold.toml"
    path.write_text(COLD)
    return path


@pytest.fixture
def one_thread(monkeypatch) -> Iterator[None]:
    """Start from one torch thread, and give the test's caller back the threads it had."""
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # settings.apply_threads sets it; restored after the test
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _trace(out: Path, run: str) -> tuple[dict, pd.DataFrame, str]:
    """The case's trace: its JSON, its complete events and its text."""
    (path,) = (out / run).glob("*.pt.trace.json")
    text = path.read_text()
    return json.loads(text), load_events(path), text


def _ops_inside(events: pd.DataFrame, name: str) -> list[set[str]]:
    """Per range called `name`: the names of the CPU ops that start inside it, on its thread."""
    ops = events[events["cat"] == "cpu_op"]
    ranges = events[(events["cat"] == "user_annotation") & (events["name"] == name)]
    return [
        set(ops[(ops["tid"] == r.tid) & (ops["ts"] >= r.ts) & (ops["ts"] <= r.ts + r.dur)]["name"])
        for r in ranges.itertuples()
    ]


def test_a_cold_profile_flushes_in_its_own_range_with_hta_metadata_and_the_scenarios_threads(
    cold_file, tmp_path, one_thread
):
    out = tmp_path / "prof"
    outcome = profile_scenario(load(cold_file), out, calls=2)
    assert torch.get_num_threads() == 2  # the scenario's [timing] threads, applied
    cases = pd.read_csv(out / "cases.csv")
    (row,) = cases.itertuples()
    assert row.status == "ok" and row.case_id == COLD_CASE and row.l2 == "cold" and row.threads == 2
    data, events, text = _trace(out, row.run)

    flushes = _ops_inside(events, FLUSH_RANGE)
    calls = _ops_inside(events, "perfsuite.full_softmax.eager")
    assert len(flushes) == len(calls) == 2  # one flush before each profiled call
    assert all(ops & FLUSH_OPS for ops in flushes)
    assert all("aten::_softmax" in ops and not ops & FLUSH_OPS for ops in calls)
    ranges = events[events["cat"] == "user_annotation"]
    ranges = ranges[ranges["name"].isin([FLUSH_RANGE, "perfsuite.full_softmax.eager"])].sort_values("ts")
    assert list(ranges["name"]) == [FLUSH_RANGE, "perfsuite.full_softmax.eager"] * 2
    ends = (ranges["ts"] + ranges["dur"]).to_numpy()
    assert (ends[:-1] <= ranges["ts"].to_numpy()[1:]).all()  # the ranges do not overlap

    assert data["distributedInfo"] == {"backend": "gloo", "rank": 0, "world_size": 1}
    assert [int(m) for m in HTA_RANK.findall(text)] == [0]
    meta = data["perfsuite"]
    expected = {"case_id": COLD_CASE, "variant": "full_softmax", "path": "eager", "l2": "cold", "threads": 2}
    assert {k: meta[k] for k in (*expected, "scenario")} == {**expected, "scenario": "cold"}
    assert meta["device"] == row.device and meta["calls"] == 2 and meta["flush_range"] == FLUSH_RANGE
    assert not any(isinstance(v, (dict, list)) for v in meta.values())  # HTA's reader skips nested maps

    kernels = pd.read_csv(out / "kernels.csv")
    assert not set(kernels["kernel"]) & FLUSH_OPS
    assert set(kernels["kernel"]) >= {"aten::_softmax", "aten::topk"}
    assert kernels["share"].sum() == pytest.approx(1.0)
    assert row.kernel_us_per_call == pytest.approx(kernels["total_us"].sum() / 2)
    sums = events[(events["name"] == "aten::sum")]
    sums = sums[sums["ts"].between(ranges["ts"].min(), ranges["ts"].max())]
    assert len(sums) == 2 and row.excluded_flush_kernels_per_call >= 1  # the sum's leaf ops
    assert 0 < row.excluded_flush_us_per_call <= sums["dur"].sum() / 2  # they run inside the sum
    assert (kernels["excluded_flush_us_per_call"] == row.excluded_flush_us_per_call).all()
    assert (kernels["threads"] == 2).all() and outcome.cases["threads"].tolist() == [2]


def test_hta_loads_a_profile_folder(cold_file, tmp_path, one_thread):
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        pytest.skip("HolisticTraceAnalysis not installed")
    out = tmp_path / "prof"
    profile_scenario(load(cold_file), out, calls=1)
    (run,) = pd.read_csv(out / "cases.csv")["run"]
    analysis = TraceAnalysis(trace_dir=str(out / run))
    assert analysis.t.get_ranks() == [0]
    meta = analysis.t.meta_data[0]
    assert meta["distributedInfo"]["world_size"] == 1 and meta["perfsuite"]["case_id"] == COLD_CASE
    analysis.get_gpu_kernel_breakdown(visualize=False)


def test_gpu_profile_and_call_flush_in_their_own_nvtx_range(gpu, cold_file, tmp_path, one_thread):
    """On the GPU (the simulated H200 without one): the flush is a range of its own in the trace and in
    NVTX, outside the case's range, and none of its work is in kernels.csv."""
    simulated = simulated_gpu.active() is not None
    log = runtime.state().log if simulated else []
    log.clear()
    assert cli.main(["call", str(cold_file), COLD_CASE, "--device", "cuda:0", "--calls", "2"]) == 0
    assert torch.get_num_threads() == 2
    selection = "perfsuite.full_softmax.eager"
    if simulated:
        pushed = [(k, d) for k, d in log if k in ("range_push", "range_pop")]
        pairs = [(k, name) for name in (FLUSH_RANGE, selection) for k in ("range_push", "range_pop")]
        assert pushed == pairs * 2
    out = tmp_path / "prof"
    command = ["profile", str(cold_file), "--out", str(out), "--device", "cuda:0", "--calls", "2"]
    assert cli.main(command) == 0
    (row,) = pd.read_csv(out / "cases.csv").itertuples()
    assert row.status == "ok" and row.threads == 2, row.reason
    data, events, _ = _trace(out, row.run)
    assert data["distributedInfo"] == {"backend": "nccl", "rank": 0, "world_size": 1}
    assert data["perfsuite"]["simulated"] is simulated
    flushes, calls = _ops_inside(events, FLUSH_RANGE), _ops_inside(events, selection)
    assert len(flushes) == len(calls) == 2
    assert all(ops & FLUSH_OPS for ops in flushes) and not any(ops & FLUSH_OPS for ops in calls)
    if simulated:
        assert [d for k, d in log if k == "range_push"].count(FLUSH_RANGE) == 2 + 3  # call, then profile
    kernels = pd.read_csv(out / "kernels.csv")
    assert kernels["share"].sum() == pytest.approx(1.0) and row.excluded_flush_kernels_per_call >= 1
    assert not kernels["kernel"].str.contains("sum_functor|aten::sum|FillFunctor|aten::fill_").any()


def test_profile_only_and_bad_input(scenario_file, tmp_path, capsys):
    out = tmp_path / "one"
    assert cli.main(["profile", str(scenario_file), "--out", str(out), "--only", "identity/eager/*k1*"]) == 0
    (case_id,) = pd.read_csv(out / "cases.csv")["case_id"]
    assert case_id == "identity/eager/bfloat16/V1000/B3/k1/near_ties"
    # no case profiled (graph capture needs a GPU): kernels.csv is its header alone
    assert cli.main(["profile", str(scenario_file), "--out", str(out), "--only", "identity/graph"]) == 0
    assert list(pd.read_csv(out / "kernels.csv").columns)[:5] == [
        "case_id",
        "run",
        "device",
        "activity",
        "kernel",
    ]
    assert cli.main(["profile", str(scenario_file), "--out", str(out), "--only", "nothing-like-this"]) == 2
    assert "no case matches" in capsys.readouterr().err


def test_run_and_range_names_are_safe_and_distinct(scenario_file):
    cases = expand(load(scenario_file))
    runs = [run_name(c) for c in cases]
    assert len(set(runs)) == len(runs)
    assert all(re.fullmatch(r"[A-Za-z0-9_.=-]+", r) for r in runs)
    assert runs[0] == "full_softmax-eager-bfloat16-V1000-B3-k1-near_ties"
    assert all("/" not in range_name(c) and "@" not in range_name(c) for c in cases)
    assert [c.case_id for c in select_cases(cases, "identity/graph")] == [
        "identity/graph/bfloat16/V1000/B3/k1/near_ties",
        "identity/graph/bfloat16/V1000/B3/k4/near_ties",
    ]


def test_gpu_trace_keeps_the_kernels_launched_inside_the_range():
    """A kineto CUDA trace: the cache flush before each call is launched outside the range and left out."""
    table, case = summarize(load_events(DATA / "cuda_trace.pt.trace.json"), "perfsuite.full_softmax.eager")
    assert case["activity"] == "device kernels" and case["calls"] == 2
    assert case["kernels_per_call"] == 2 and case["kernel_us_per_call"] == pytest.approx(42.0)
    assert list(table["calls"]) == [2, 2] and list(table["per_call"]) == [1.0, 1.0]
    assert "cunn_SoftMaxForward" in table.loc[0, "kernel"] and "MaxOps" in table.loc[1, "kernel"]
    assert table.loc[0, "share"] == pytest.approx(30 / 42) and table["share"].sum() == pytest.approx(1.0)
    assert not table["kernel"].str.contains("FillFunctor").any()
    assert case["range_us_per_call"] == pytest.approx(60.0) and case["top_share"] == table.loc[0, "share"]
    assert math.isnan(case["excluded_flush_us_per_call"])  # no flush range in this trace


def _flush_range(ts: float, dur: float) -> dict:
    return {"name": FLUSH_RANGE, "cat": "user_annotation", "ts": ts, "dur": dur, "pid": "1", "tid": "1"}


def test_the_flush_is_left_out_of_the_selection_even_without_its_range():
    """A CPU trace without the selection's range counts every leaf op, but never the flush's."""
    host = {"pid": "1", "tid": "1", "correlation": None}
    events = pd.DataFrame(
        [
            {**_flush_range(0.0, 60.0), "correlation": None},
            {"name": "aten::zero_", "cat": "cpu_op", "ts": 1.0, "dur": 58.0, **host},
            {"name": "aten::fill_", "cat": "cpu_op", "ts": 2.0, "dur": 56.0, **host},
            {"name": "aten::topk", "cat": "cpu_op", "ts": 70.0, "dur": 4.0, **host},
            {"name": "aten::sort", "cat": "cpu_op", "ts": 80.0, "dur": 6.0, **host},
        ]
    )
    table, case = summarize(events, "perfsuite.identity.eager")
    assert list(table["kernel"]) == ["aten::sort", "aten::topk"] and case["calls"] == 0
    assert case["kernel_us_per_call"] == 10.0 and table["share"].sum() == pytest.approx(1.0)
    assert case["excluded_flush_kernels_per_call"] == 1.0 and case["excluded_flush_us_per_call"] == 56.0


def test_gpu_flush_kernels_are_counted_apart_from_the_selection():
    """The flush's kernels, launched inside `perfsuite.cache_flush`, are summed apart per call."""
    host = {"pid": "1", "tid": "1"}
    gpu = {"pid": "0", "tid": "7"}
    selection = {"name": "perfsuite.identity.eager", "cat": "user_annotation", **host}
    launch = {"name": "cudaLaunchKernel", "cat": "cuda_runtime", "dur": 1.0, **host}
    events = pd.DataFrame(
        [
            {**_flush_range(0.0, 100.0), "correlation": None},
            {**launch, "ts": 1.0, "correlation": 1},
            {"name": "FillFunctor", "cat": "kernel", "ts": 5.0, "dur": 90.0, **gpu, "correlation": 1},
            {**selection, "ts": 110.0, "dur": 20.0, "correlation": None},
            {**launch, "ts": 111.0, "correlation": 2},
            {"name": "k_topk", "cat": "kernel", "ts": 115.0, "dur": 8.0, **gpu, "correlation": 2},
            {**_flush_range(200.0, 100.0), "correlation": None},
            {**launch, "ts": 201.0, "correlation": 3},
            {"name": "FillFunctor", "cat": "kernel", "ts": 205.0, "dur": 92.0, **gpu, "correlation": 3},
            {**selection, "ts": 310.0, "dur": 20.0, "correlation": None},
            {**launch, "ts": 311.0, "correlation": 4},
            {"name": "k_topk", "cat": "kernel", "ts": 315.0, "dur": 10.0, **gpu, "correlation": 4},
        ]
    )
    table, case = summarize(events, "perfsuite.identity.eager")
    assert list(table["kernel"]) == ["k_topk"] and table["share"].tolist() == [1.0]
    assert case["calls"] == 2 and case["kernel_us_per_call"] == 9.0 and case["top_kernel"] == "k_topk"
    # the two flushes (90 and 92 us), one kernel each
    assert case["excluded_flush_kernels_per_call"] == 1.0 and case["excluded_flush_us_per_call"] == 91.0


def test_graph_replay_kernels_carry_the_launch_correlation():
    host, gpu = {"pid": "1", "tid": "1"}, {"pid": "0", "tid": "7"}
    events = pd.DataFrame(
        [
            {"name": "perfsuite.identity.graph", "cat": "user_annotation", "ts": 0.0, "dur": 10.0, **host},
            {
                "name": "cudaGraphLaunch",
                "cat": "cuda_runtime",
                "ts": 1.0,
                "dur": 5.0,
                **host,
                "correlation": 7,
            },
            {"name": "k_max", "cat": "kernel", "ts": 20.0, "dur": 3.0, **gpu, "correlation": 7},
            {"name": "k_exp", "cat": "kernel", "ts": 24.0, "dur": 5.0, **gpu, "correlation": 7},
            {"name": "k_other", "cat": "kernel", "ts": 40.0, "dur": 9.0, **gpu, "correlation": 8},
        ]
    )
    table, case = summarize(events, "perfsuite.identity.graph")
    assert list(table["kernel"]) == ["k_exp", "k_max"] and case["kernels_per_call"] == 2


def test_without_correlation_ids_the_device_work_inside_the_range_counts():
    host = {"pid": "1", "tid": "1", "correlation": None}
    gpu = {"pid": "0", "tid": "7", "correlation": None}
    events = pd.DataFrame(
        [
            {"name": "flush", "cat": "kernel", "ts": 0.0, "dur": 50.0, **gpu},
            {"name": "perfsuite.identity.eager", "cat": "user_annotation", "ts": 100.0, "dur": 40.0, **host},
            {"name": "hipLaunchKernel", "cat": "cuda_runtime", "ts": 101.0, "dur": 2.0, **host},
            {"name": "k_max", "cat": "kernel", "ts": 110.0, "dur": 3.0, **gpu},
            {"name": "k_exp", "cat": "kernel", "ts": 120.0, "dur": 5.0, **gpu},
            {"name": "flush", "cat": "kernel", "ts": 150.0, "dur": 50.0, **gpu},
        ]
    )
    table, case = summarize(events, "perfsuite.identity.eager")
    assert list(table["kernel"]) == ["k_exp", "k_max"] and case["kernel_us_per_call"] == 8.0


def test_load_events_rejects_a_broken_file(tmp_path):
    bad = tmp_path / "x.pt.trace.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a readable trace"):
        load_events(bad)


def test_call_runs_one_case_and_reports_skips(scenario_file, capsys):
    case = "identity/eager/bfloat16/V1000/B3/k4/near_ties"
    assert cli.main(["call", str(scenario_file), case, "--calls", "2"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == {"case_id": case, "range": "perfsuite.identity.eager", "calls": 2}
    assert cli.main(["call", str(scenario_file), case.replace("eager", "graph")]) == 3
    assert "skipped: graph capture needs" in capsys.readouterr().err
    assert cli.main(["call", str(scenario_file), "identity/eager/nope"]) == 2
    assert "no case 'identity/eager/nope'" in capsys.readouterr().err


def test_an_interrupted_profile_writes_the_tables_of_the_cases_done(scenario_file, tmp_path, monkeypatch):
    from perfsuite.tools import profiling

    real, done = profiling.profile_case, []

    def stop_at_the_third(runner, case, out_dir, calls):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(case.case_id)
        return real(runner, case, out_dir, calls)

    monkeypatch.setattr(profiling, "profile_case", stop_at_the_third)
    out = tmp_path / "prof"
    command = ["profile", str(scenario_file), "--out", str(out), "--calls", "1"]
    assert cli.main(command) == exits.EXIT_INTERRUPTED
    assert list(pd.read_csv(out / "cases.csv")["case_id"]) == done
    assert (out / "kernels.csv").exists()

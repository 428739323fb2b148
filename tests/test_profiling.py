"""`perfsuite profile` and `perfsuite call`: trace layout, the per-kernel table, GPU trace attribution."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.profiling import load_events, range_name, run_name, select_cases, summarize
from perfsuite.scenario import expand, load

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
    assert "CPU run" in printed and "aten::_softmax" in printed and "kernels.csv" in printed


def test_profile_only_and_bad_input(scenario_file, tmp_path, capsys):
    out = tmp_path / "one"
    assert cli.main(["profile", str(scenario_file), "--out", str(out), "--only", "identity/eager/*k1*"]) == 0
    assert list(pd.read_csv(out / "cases.csv")["case_id"]) == [
        "identity/eager/bfloat16/V1000/B3/k1/near_ties"
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
    summary = summarize(load_events(DATA / "cuda_trace.pt.trace.json"), "perfsuite.full_softmax.eager")
    table = summary.table
    assert summary.activity == "device kernels" and summary.calls == 2
    assert summary.kernels_per_call == 2 and summary.kernel_us_per_call == pytest.approx(42.0)
    assert list(table["calls"]) == [2, 2] and list(table["per_call"]) == [1.0, 1.0]
    assert "cunn_SoftMaxForward" in table.loc[0, "kernel"] and "MaxOps" in table.loc[1, "kernel"]
    assert table.loc[0, "share"] == pytest.approx(30 / 42) and table["share"].sum() == pytest.approx(1.0)
    assert not table["kernel"].str.contains("FillFunctor").any()
    assert summary.range_us_per_call == pytest.approx(60.0)


def test_graph_replay_kernels_carry_the_launch_correlation():
    host = {"pid": "1", "tid": "1"}
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
            {
                "name": "k_max",
                "cat": "kernel",
                "ts": 20.0,
                "dur": 3.0,
                "pid": "0",
                "tid": "7",
                "correlation": 7,
            },
            {
                "name": "k_exp",
                "cat": "kernel",
                "ts": 24.0,
                "dur": 5.0,
                "pid": "0",
                "tid": "7",
                "correlation": 7,
            },
            {
                "name": "k_other",
                "cat": "kernel",
                "ts": 40.0,
                "dur": 9.0,
                "pid": "0",
                "tid": "7",
                "correlation": 8,
            },
        ]
    )
    summary = summarize(events, "perfsuite.identity.graph")
    assert list(summary.table["kernel"]) == ["k_exp", "k_max"] and summary.kernels_per_call == 2


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
    summary = summarize(events, "perfsuite.identity.eager")
    assert list(summary.table["kernel"]) == ["k_exp", "k_max"] and summary.kernel_us_per_call == 8.0


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
    from perfsuite import profiling

    real, done = profiling.profile_case, []

    def stop_at_the_third(runner, case, out_dir, calls):
        if len(done) == 2:
            raise KeyboardInterrupt
        done.append(case.case_id)
        return real(runner, case, out_dir, calls)

    monkeypatch.setattr(profiling, "profile_case", stop_at_the_third)
    out = tmp_path / "prof"
    command = ["profile", str(scenario_file), "--out", str(out), "--calls", "1"]
    assert cli.main(command) == cli.EXIT_INTERRUPTED
    assert list(pd.read_csv(out / "cases.csv")["case_id"]) == done
    assert (out / "kernels.csv").exists()

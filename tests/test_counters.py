"""Measured HBM bytes: ncu / rocprofv3 CSV parsing, the collector's runs and skips, flags, run --counters."""

from __future__ import annotations

import math
import stat
import sys
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.core import dtypes
from perfsuite.measure.device import DeviceInfo
from perfsuite.report import build_report
from perfsuite.results import columns
from perfsuite.results.columns import flagged
from perfsuite.results.run import Run
from perfsuite.results.write import to_frame
from perfsuite.scenario.load import Case, Timing
from perfsuite.tools.counters import (
    CounterCollector,
    CountersError,
    Measured,
    find_tool,
    parse_ncu_csv,
    parse_rocprof_csv,
    row_values,
)

COLUMNS = columns.table_columns("results.csv", run=True)
WRITTEN = columns.table_columns("results.csv")

DATA = Path(__file__).parent / "data"
H200 = DeviceInfo("cuda", "cuda:0", "NVIDIA H200", "CUDA 12.8", 4800.0, 64 << 20, "sm_90", llc_bytes=60 << 20)
MI300X = DeviceInfo(
    "rocm", "cuda:0", "AMD Instinct MI300X", "HIP 6.4", 5300.0, 256 << 20, "gfx942", llc_bytes=256 << 20
)
CPU = DeviceInfo("cpu", "cpu", "cpu-x86_64", "cpu", None, 32 << 20)
CASE = Case("t", "full_softmax", "eager", "bfloat16", 151936, 64, 1, "gaussian")


# ---------------------------------------------------------------------------------------------- parsing


def test_ncu_raw_page_base_units():
    measured = parse_ncu_csv((DATA / "ncu_raw.csv").read_text())
    assert measured.kernels == 2
    assert measured.read == 19_451_904 + 19_449_856 and measured.write == 19_447_808 + 1_536


def test_ncu_raw_page_with_chatter_and_scaled_units():
    text = """==PROF== Connected to process 48213 (/usr/bin/python3.12)
"ID","Process ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum"
"","","","Mbyte","Kbyte"
"0","48213","kernel_a","19.45","1.54"
"1","48213","kernel_b","0.50","768"
==PROF== Disconnected from process 48213"""
    measured = parse_ncu_csv(text)
    assert measured.read == pytest.approx(19.95e6) and measured.write == pytest.approx(769_540)


def test_ncu_details_page():
    measured = parse_ncu_csv((DATA / "ncu_details.csv").read_text())
    assert measured.kernels == 2
    assert measured.read == pytest.approx(19.45e6) and measured.write == pytest.approx(1540 + 768)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n", "no kernel"),
        ("hello\n", "no CSV table"),
        ('"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","k","5"\n', "lacks dram__bytes"),
        ('"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum"\n"","","parsec","byte"\n'
         '"0","k","1","2"\n', "unknown byte unit"),
    ],
)  # fmt: skip
def test_ncu_output_without_figures_is_a_reason(text, message):
    with pytest.raises(CountersError, match=message):
        parse_ncu_csv(text)


def test_rocprofv3_counter_collection_kib():
    measured = parse_rocprof_csv((DATA / "rocprofv3_counter_collection.csv").read_text())
    assert measured.kernels == 2
    assert measured.read == (18994 + 18994) * 1024 and measured.write == (18992 + 1.5) * 1024


def test_rocprofv3_without_counters_is_a_reason():
    with pytest.raises(CountersError, match="FETCH_SIZE"):
        parse_rocprof_csv("Dispatch_Id,Kernel_Name,Counter_Name,Counter_Value\n1,k,SQ_WAVES,4\n")
    with pytest.raises(CountersError, match="Counter_Name"):
        parse_rocprof_csv("a,b\n1,2\n")


# ---------------------------------------------------------------------------------------------- flags


def test_row_values_and_the_20_percent_flag():
    row = row_values(Measured(100.0, 50.0, 2), 100.0, "ncu")
    assert row["bytes_measured"] == 150 and row["bytes_measured_vs_model"] == 1.5
    assert row["bytes_measured_vs_uncached"] == 1.5  # no uncached figure given: the model's
    assert row_values(Measured(100.0, 50.0, 2), 100.0, "ncu", 300.0)["bytes_measured_vs_uncached"] == 0.5
    skipped = row_values(None, 100.0, "skipped: no ncu")
    assert math.isnan(skipped["bytes_measured"]) and skipped["counters"] == "skipped: no ncu"
    frame = pd.DataFrame({"bytes_measured_vs_model": [1.0, 1.19, 1.21, 0.79, math.nan, "0.5"]})
    assert list(flagged(frame)) == [False, False, True, True, False, True]
    assert set(row) <= set(COLUMNS)


# ---------------------------------------------------------------------------------------------- tools


def _executable(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!{sys.executable}\n{script}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


FAKE_NCU = f"""
import pathlib, sys
args = sys.argv[1:]
log = pathlib.Path(__file__).with_name("calls.txt")
log.open("a").write(" ".join(args) + "\\n")
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.1.1.0 (build 35528883)")
elif "--import" in args:
    sys.stdout.write(pathlib.Path({str(DATA / "ncu_raw.csv")!r}).read_text())
elif "PERMISSION" in str(pathlib.Path(__file__).parent):
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access GPU Performance Counters")
    sys.exit(1)
else:
    pathlib.Path(args[args.index("--export") + 1]).write_text("report")
"""
FAKE_ROCPROF = f"""
import pathlib, sys
args = sys.argv[1:]
pathlib.Path(__file__).with_name("calls.txt").open("a").write(" ".join(args) + "\\n")
if args == ["--version"]:
    print("rocprofv3 version: 1.0.0")
else:
    out = pathlib.Path(args[args.index("--output-directory") + 1]) / "host" / "4242"
    out.mkdir(parents=True, exist_ok=True)
    name = args[args.index("--output-file") + 1] + "_counter_collection.csv"
    (out / name).write_text(pathlib.Path({str(DATA / "rocprofv3_counter_collection.csv")!r}).read_text())
"""


@pytest.fixture
def no_tools_on_path(monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    for name in ("PERFSUITE_NCU", "PERFSUITE_ROCPROFV3"):
        monkeypatch.delenv(name, raising=False)
    return empty


def test_missing_tools_and_cpus_are_reasons(no_tools_on_path, tmp_path):
    with pytest.raises(CountersError, match="need a GPU"):
        find_tool("cpu")
    with pytest.raises(CountersError, match=r"Nsight Compute \(ncu\) not found"):
        find_tool("cuda")
    with pytest.raises(CountersError, match=r"rocprofv3 .* not found"):
        find_tool("rocm")
    row = CounterCollector(H200, "s.toml", tmp_path)(CASE)
    assert math.isnan(row["bytes_measured"]) and math.isnan(row["bytes_measured_vs_model"])
    assert row["counters"].startswith("skipped: Nsight Compute (ncu) not found")


def test_ncu_collector_runs_the_case_under_ncu_in_its_nvtx_range(no_tools_on_path, tmp_path):
    _executable(no_tools_on_path, "ncu", FAKE_NCU)
    collector = CounterCollector(H200, "scenarios/x.toml", tmp_path / "counters")
    row = collector(CASE)
    assert row["bytes_measured"] == 19_451_904 + 19_449_856 + 19_447_808 + 1_536
    assert row["bytes_read_measured"] == 19_451_904 + 19_449_856
    # B 64 x V 151936 bf16: the probabilities (19 MB) stay in the 60 MiB L2 beside the logits, so the
    # cache-aware model is the ideal traffic plus the upcast; the uncached one counts them twice more
    model, uncached = _model(CASE, H200.llc_bytes), _model(CASE)
    assert model < uncached / 2
    assert row["bytes_measured_vs_model"] == pytest.approx(row["bytes_measured"] / model)
    assert row["bytes_measured_vs_uncached"] == pytest.approx(row["bytes_measured"] / uncached)
    note = "ncu 2025.1.1.0 kernel replay, no cache control (after perfsuite's flush): 2 kernels"
    assert row["counters"] == note
    calls = (no_tools_on_path / "calls.txt").read_text().splitlines()
    profile = next(c for c in calls if "--nvtx" in c)
    assert "--nvtx-include perfsuite.full_softmax.eager/" in profile
    assert "--metrics dram__bytes_read.sum,dram__bytes_write.sum" in profile
    assert "--replay-mode kernel --cache-control none" in profile  # ncu's own flush would split the call
    assert "--clock-control none" in profile  # ncu would lock the clocks at base
    assert f"-m perfsuite call scenarios/x.toml {CASE.case_id} --device cuda:0" in profile
    assert any("--import" in c and "--page raw" in c for c in calls)
    folder = tmp_path / "counters" / "full_softmax-eager-bfloat16-V151936-B64-k1-gaussian"
    assert (folder / "counters.ncu-rep").exists() and (folder / "counters.csv").exists()
    hot = Case(**{**CASE.__dict__, "timing": Timing(l2="hot")})
    collector(hot)
    assert "--cache-control none" in (no_tools_on_path / "calls.txt").read_text().splitlines()[-2]


def test_ncu_without_counter_permission_is_a_reason(tmp_path, monkeypatch, no_tools_on_path):
    bin_dir = tmp_path / "PERMISSION"
    _executable(bin_dir, "ncu", FAKE_NCU)
    monkeypatch.setenv("PERFSUITE_NCU", str(bin_dir / "ncu"))
    row = CounterCollector(H200, "s.toml", tmp_path / "c")(CASE)
    assert math.isnan(row["bytes_measured"]) and "ERR_NVGPUCTRPERM" in row["counters"]


def test_rocprofv3_collector_counts_the_roctx_region(no_tools_on_path, tmp_path):
    _executable(no_tools_on_path, "rocprofv3", FAKE_ROCPROF)
    row = CounterCollector(MI300X, "s.toml", tmp_path / "counters")(CASE)
    assert row["bytes_read_measured"] == 2 * 18994 * 1024 and row["bytes_write_measured"] == 18993.5 * 1024
    assert row["counters"] == "rocprofv3 1.0.0 FETCH_SIZE + WRITE_SIZE: 2 dispatches"
    call = next(c for c in (no_tools_on_path / "calls.txt").read_text().splitlines() if "--pmc" in c)
    assert "--pmc FETCH_SIZE WRITE_SIZE --selected-regions" in call and call.endswith("--roctx-region")


def test_a_tool_that_fails_or_hangs_is_a_reason(tmp_path, monkeypatch):
    import subprocess

    def failing(command, **kwargs):
        return subprocess.CompletedProcess(command, 9, "", "==ERROR== something broke\n")

    def hanging(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    tool_path = _executable(tmp_path / "bin", "ncu", "print('Version 1')")
    for run, message in (
        (failing, "ncu exited 9: ==ERROR== something broke"),
        (hanging, "ncu took over 5 s"),
    ):
        monkeypatch.setenv("PERFSUITE_NCU", str(tool_path))
        row = CounterCollector(H200, "s.toml", tmp_path / "c", timeout_s=5, run=run)(CASE)
        assert row["counters"] == f"skipped: {message}"


def _model(case: Case, cache_bytes: int = 0) -> int:
    from perfsuite import variants

    traffic = variants.get(case.variant).traffic(
        case.batch, case.vocab, case.topk, dtypes.dtype_of(case.dtype)
    )
    return traffic.hbm(cache_bytes)


# ---------------------------------------------------------------------------------------------- integration


def test_run_with_counters_on_a_cpu_records_why(tmp_path, capsys):
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'name = "c"\ndevice = "cpu"\n[sweep]\nvariants = ["full_softmax", "identity"]\n'
        'dtypes = ["float32"]\nvocab = [500]\n'
        'batch = [2]\ntopk = [1]\nlogits = ["gaussian"]\n[timing]\nwarmup = 0\nreps = 3\nmax_seconds = 0.01\n'
    )
    out = tmp_path / "out"
    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress", "--counters"]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert list(frame.columns) == WRITTEN
    cols = WRITTEN
    assert cols.index("bytes_measured") == cols.index("bytes_ideal") + 1
    assert frame["bytes_measured"].isna().all() and frame["counters"].str.contains("need a GPU").all()
    assert "counters: nothing measured" in capsys.readouterr().out
    html = (out / "report.html").read_text()
    assert 'id="traffic"' in html and "Not measured: 2 cases: skipped: hardware counters need a GPU" in html


def test_run_without_counters_leaves_the_columns_empty(tmp_path):
    frame = to_frame([{"variant": "identity", "status": "ok", "median_us": 1.0}])
    assert frame["counters"].isna().all()
    html = build_report(Run.of(frame), tmp_path / "r.html").read_text()
    assert 'id="traffic"' not in html


def test_report_flags_measured_bytes_off_the_model(tmp_path):
    base = {"device": "NVIDIA H200", "backend": "cuda", "path": "eager", "dtype": "bfloat16", "vocab": 151936,
            "batch": 64, "topk": 1, "logits": "gaussian", "l2": "cold", "status": "ok", "median_us": 10.0,
            "counters": "ncu kernel replay: 2 kernels"}  # fmt: skip
    rows = [
        {**base, "variant": "full_softmax", "accuracy": "rounded", "bytes_model": 100e6,
         "bytes_measured": 99e6, "bytes_read_measured": 60e6, "bytes_write_measured": 39e6,
         "bytes_measured_vs_model": 0.99},
        {**base, "variant": "identity", "accuracy": "exact", "bytes_model": 100e6, "bytes_measured": 140e6,
         "bytes_read_measured": 100e6, "bytes_write_measured": 40e6, "bytes_measured_vs_model": 1.4},
    ]  # fmt: skip
    out = tmp_path / "results.csv"
    to_frame(rows).to_csv(out, index=False)
    assert cli.main(["report", str(out), "--out", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    traffic = html[html.index('<section id="traffic">') : html.index('<section id="parity">')]
    assert (
        "2 cases, 1 flagged (listed first)." in traffic
        and 'class="loss" title="model off by &gt; 20 %">1.4<' in traffic
    )
    assert "134 MiB" in traffic  # 140e6 bytes
    assert "<th>uncached model</th>" in traffic and "<th>measured / uncached</th>" in traffic
    summary = html[html.index('<section id="summary">') : html.index('<section id="plots">')]
    assert "Measured HBM bytes: 2 cases; 1 differ from the bytes model by more than 20 %" in summary


def test_cpu_collector_never_runs_a_tool(tmp_path):
    def never(*args, **kwargs):
        raise AssertionError("no tool on a CPU")

    row = CounterCollector(CPU, "s.toml", tmp_path, run=never)(CASE)
    assert row["counters"].startswith("skipped: hardware counters need a GPU")

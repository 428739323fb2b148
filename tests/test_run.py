"""`perfsuite run / list / report` end to end on the CPU: files, schema, statuses, exit codes, resume."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from perfsuite import cli, variants
from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.core import strict_json
from perfsuite.measure import memory
from perfsuite.results import columns
from perfsuite.results.run import load_run
from perfsuite.variants.base import Variant

SCENARIO = """
name = "tiny"
device = "cpu"  # CPU expectations: on a GPU box this file still tests the CPU
[[sweep]]
variants = {variants}
paths = ["eager", "graph"]
dtypes = ["bfloat16"]
vocab = [1000]
batch = [0, 3]
topk = [1, 4]
logits = ["near_ties"]
[timing]
warmup = 1
reps = 3
max_seconds = 0.05
"""
BASIC = ["full_softmax", "argmax_ones", "identity"]


def scenario_file(tmp_path: Path, names=BASIC) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO.format(variants=json.dumps(names)))
    return path


def run(tmp_path: Path, *extra: str, names=BASIC) -> tuple[int, Path]:
    out = tmp_path / "out"
    code = cli.main(["run", str(scenario_file(tmp_path, names)), "--out", str(out), "--no-progress", *extra])
    return code, out


def test_run_writes_every_file_with_the_schema(tmp_path, capsys):
    code, out = run(tmp_path)
    assert code == 0
    for name in ("results.csv", "results.json", "results.jsonl", "edge_cases.csv", "report.html"):
        assert (out / name).stat().st_size > 0, name
    frame = pd.read_csv(out / "results.csv")
    assert list(frame.columns) == columns.table_columns("results.csv")  # the run's columns: in run.json
    assert len(frame) == 3 * 2 * 2 * 2
    graph = frame[frame["path"] == "graph"]
    assert (
        set(graph["status"]) == {"skipped"} and graph["reason"].str.contains("needs a CUDA or ROCm GPU").all()
    )
    eager = frame[(frame["path"] == "eager") & (frame["batch"] == 3)]
    assert set(eager["status"]) == {"ok"} and (eager["median_us"] > 0).all()
    assert set(eager[eager["variant"] == "identity"]["verdict"]) == {"pass"}
    assert set(eager[eager["variant"] == "argmax_ones"]["verdict"]) == {"inexact"}
    assert (eager[eager["variant"] == "full_softmax"]["speedup_vs_full"] == 1.0).all()
    assert (eager["bytes_model"] >= eager["bytes_ideal"]).all() and (eager["peak_temp_bytes"] >= 0).all()
    assert set(frame[frame["batch"] == 0]["verdict"].dropna()) <= {"n/a"}
    constants = json.loads((out / "run.json").read_text())["constants"]
    assert constants["backend"] == "cpu" and constants["torch"] == torch.__version__
    loaded = load_run([out]).frame  # the loader joins them back to every row
    assert loaded["backend"].eq("cpu").all() and loaded["torch"].eq(torch.__version__).all()
    assert json.loads((out / "results.json").read_text())[0]["case_id"]
    assert "report.html" in capsys.readouterr().out


def broken_select(logits: torch.Tensor, k: int):
    p, idx = variants.get("identity").select(logits, k)
    return p * 1.01, idx


def crashing_select(logits: torch.Tensor, k: int):
    raise RuntimeError("kernel exploded\nsecond line")


@pytest.fixture
def extra_variants(monkeypatch):
    registry = {name: variants.get(name) for name in variants.names()}
    for name, select in (("broken", broken_select), ("crashing", crashing_select)):
        base = variants.get("identity")
        registry[name] = Variant(name, select, "exact", base.traffic, name)
    monkeypatch.setattr(variants, "_REGISTRY", registry)


def test_an_exact_variant_failing_parity_exits_1_after_writing_everything(tmp_path, extra_variants, capsys):
    code, out = run(tmp_path, names=["identity", "broken"])
    assert code == 1
    frame = load_run([out]).frame
    broken = frame[(frame["variant"] == "broken") & (frame["status"] == "ok") & (frame["batch"] == 3)]
    assert set(broken["verdict"]) == {"fail"} and (out / "report.html").exists()
    assert "PARITY FAILURE" in capsys.readouterr().err


WRONG_ARGMAX = """
import torch

def wrong_argmax(logits, k):
    return torch.topk(logits, k, dim=-1, largest=False).indices  # the smallest logits: wrong tokens

wrong_argmax.__perfsuite_selector__ = {"accuracy": "exact", "outputs": "indices"}
"""


def test_an_indices_only_selector_with_wrong_indices_fails_the_run(tmp_path, monkeypatch, capsys):
    """An argmax kernel claims no probabilities (judged "inexact" at best) but its indices still count:
    a wrong index is a parity failure and exit status 1, like an exact variant's."""
    (tmp_path / "wrong_kernels.py").write_text(WRONG_ARGMAX)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out = run(tmp_path, names=["identity", "wrong_kernels:wrong_argmax"])
    assert code == 1
    frame = load_run([out]).frame
    wrong = frame[(frame["variant"] == "wrong_kernels:wrong_argmax") & (frame["status"] == "ok")]
    assert set(wrong[wrong["batch"] == 3]["verdict"]) == {"fail"}
    assert set(wrong["accuracy"]) == {"inexact"}
    assert "PARITY FAILURE" in capsys.readouterr().err


def test_a_crashing_case_is_recorded_and_the_sweep_goes_on(tmp_path, extra_variants):
    code, out = run(tmp_path, names=["crashing", "identity"])
    assert code == 0
    frame = load_run([out]).frame
    crashed = frame[(frame["variant"] == "crashing") & (frame["path"] == "eager") & (frame["batch"] == 3)]
    assert set(crashed["status"]) == {"error"}
    assert crashed["reason"].eq("RuntimeError: kernel exploded").all()
    assert set(frame[(frame["variant"] == "identity") & (frame["path"] == "eager")]["status"]) == {"ok"}


def test_shapes_that_do_not_fit_are_skipped_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1000)
    code, out = run(tmp_path)
    frame = load_run([out]).frame
    assert code == 0
    eager = frame[(frame["path"] == "eager") & (frame["batch"] == 3)]
    assert set(eager["status"]) == {"skipped"} and eager["reason"].str.contains("GiB of cpu memory").all()


def test_interrupted_runs_keep_their_rows_and_resume(tmp_path, monkeypatch):
    original = KernelRunner.run_in_turn
    calls = {"groups": 0, "rows": 0}

    def interrupt_third(self, cases):
        calls["groups"] += 1
        if calls["groups"] == 3:
            raise KeyboardInterrupt
        rows = original(self, cases)
        calls["rows"] += len(rows)
        return rows

    monkeypatch.setattr(KernelRunner, "run_in_turn", interrupt_third)
    code, out = run(tmp_path)
    assert code == 130
    assert 0 < calls["rows"] == len(load_run([out]).frame) and (out / "report.html").exists()
    monkeypatch.setattr(KernelRunner, "run_in_turn", original)
    code, out = run(tmp_path, "--resume")
    frame = load_run([out]).frame
    assert code == 0 and len(frame) == 24 and frame["case_id"].is_unique
    assert frame["run"].nunique() == 1  # a resumed run is the same run


def test_resume_needs_out(tmp_path, capsys):
    assert cli.main(["run", str(scenario_file(tmp_path)), "--resume"]) == 2
    assert "--resume needs --out" in capsys.readouterr().err


def test_list_and_report_commands(tmp_path, capsys):
    assert cli.main(["list", str(scenario_file(tmp_path))]) == 0
    listed = capsys.readouterr().out
    assert "24 kernel cases" in listed and "identity/graph/bfloat16/V1000/B3/k4/near_ties" in listed
    _, out = run(tmp_path)
    rebuilt = tmp_path / "again.html"
    assert (
        cli.main(
            [
                "report",
                str(out / "results.csv"),
                "--edge-cases",
                str(out / "edge_cases.csv"),
                "--out",
                str(rebuilt),
            ]
        )
        == 0
    )
    assert rebuilt.stat().st_size > 0


def test_report_on_a_bad_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "nope.txt"
    bad.write_text("not results")
    assert cli.main(["report", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_variants_command(capsys):
    assert cli.main(["variants"]) == 0
    assert "argmax_ones" in capsys.readouterr().out


MIXED = """
name = "mixed"
device = "cpu"  # CPU expectations: on a GPU box this file still tests the CPU
[[sweep]]
variants = ["full_softmax", "identity"]
dtypes = ["float32"]
vocab = [300]
batch = [2]
topk = [2]
logits = ["ties"]
[[sweep]]
variants = ["allgather_full_softmax", "sharded_torch"]
dtypes = ["float32"]
vocab = [301]
batch = [2]
topk = [2]
logits = ["ties"]
tp = [2]
[draft]
variants = ["full_softmax", "argmax_ones"]
dtypes = ["float32"]
vocab = 64
hidden = 8
batch = 2
topk = 2
num_steps = 2
logits = "head"
cycles = 2
kernels = false
selection_share = false
[timing]
warmup = 1
reps = 3
max_seconds = 0.05
l2 = "hot"
"""


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory) -> tuple[Path, str]:
    """`perfsuite run` of MIXED (every kind, a torchrun of two ranks), once: its folder and its stdout."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.toml"
    path.write_text(MIXED)
    out, printed = path.parent / "out", io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    return out, printed.getvalue()


def test_one_run_covers_kernels_tensor_parallel_and_the_draft_loop(mixed_run):
    out, printed = mixed_run
    frame = load_run([out]).frame
    assert set(frame["tp"]) == {1, 2} and set(frame["status"]) == {"ok"}, frame[["case_id", "reason"]]
    tp = frame[frame["tp"] == 2].set_index("variant")
    assert set(tp["verdict"]) == {"pass"} and tp.loc["allgather_full_softmax", "speedup_vs_full"] == 1.0
    assert (tp["comm_bytes_model"] > 0).all()  # extra columns of tensor-parallel rows are kept
    draft = pd.read_csv(out / "draft.csv")
    assert set(draft["variant"]) == {"full_softmax", "argmax_ones"} and set(draft["status"]) == {"ok"}
    page = (out / "report.html").read_text()
    assert 'id="tp"' in page and 'id="draft"' in page and 'id="summary"' in page
    counts = [line for line in printed.splitlines() if re.match(r"\d+ ", line)]
    edge_rows = len(pd.read_csv(out / "edge_cases.csv"))
    assert counts == ["4 cases: 4 ok", "2 draft cases: 2 ok", f"{edge_rows} edge-case matrix rows"]
    doubled = [line for line in printed.splitlines() if re.search(r"\b(\w+) \1\b", line)]
    assert not doubled, doubled


def strict_loads(text: str) -> object:
    """`json.loads` refusing NaN and infinities, as jq, JavaScript's JSON.parse and dashboards do."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_every_json_file_a_run_writes_is_strict_json(mixed_run):
    out, _ = mixed_run
    written = sorted(p for p in out.rglob("*") if p.suffix in (".json", ".jsonl"))
    expected = {"run.json", "results.json", "results.jsonl", "samples.jsonl", "draft.jsonl"}
    assert expected | {"edge_cases.jsonl", "tp2.jsonl", "env.json"} <= {p.name for p in written}
    for path in written:
        text = path.read_text(encoding="utf-8")
        for document in text.splitlines() if path.suffix == ".jsonl" else [text]:
            if document.strip():
                strict_loads(document)  # raises on NaN, Infinity, -Infinity
    constants = strict_loads((out / "run.json").read_text())["constants"]
    assert constants["copy_sm_mhz"] is None and constants["peak_gbps"] is None  # a CPU has neither: null
    assert strict_loads((out / "tp" / "env.json").read_text())["copy_sm_mhz"] is None


def test_files_from_before_with_nan_still_load(mixed_run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(mixed_run[0], old)
    manifest = json.loads((old / "run.json").read_text())
    manifest["constants"]["peak_gbps"] = math.nan
    (old / "run.json").write_text(json.dumps(manifest))  # NaN, as perfsuite wrote it before
    rows = (old / "results.jsonl").read_text().splitlines()
    (old / "results.jsonl").write_text("\n".join(line.replace("null", "NaN") for line in rows) + "\n")
    assert "NaN" in (old / "results.jsonl").read_text()
    frame = load_run([old]).frame
    assert len(frame) == 4 and frame["peak_gbps"].isna().all()


def test_strict_json_writes_null_for_missing_values_and_numbers_for_scalars():
    value = {"nan": math.nan, "inf": [math.inf, -math.inf, 1.5], "np": np.float32("nan"), "i": np.int64(3),
             "t": torch.tensor(2.5), "b": np.bool_(True), "path": Path("a/b")}  # fmt: skip
    text = strict_json.dumps(value)
    assert strict_loads(text) == {"nan": None, "inf": [None, None, 1.5], "np": None, "i": 3, "t": 2.5,
                                  "b": True, "path": "a/b"}  # fmt: skip

"""The column registry (perfsuite.results.columns): every column written is registered, typed on reading,
carried by compare where marked, documented in docs/columns.md; a new column is its registry line plus
its producer."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.cases.kernel.kernel_runner import KernelRunner
from perfsuite.compare.match import compare, load_side
from perfsuite.results import columns
from perfsuite.results.columns import Column
from perfsuite.results.run import load_run

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = """
name = "cols"
device = "cpu"
[[sweep]]
variants = ["full_softmax", "identity"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [300]
batch = [2]
topk = [2]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 5
max_seconds = 0.05
"""


def test_the_column_page_is_generated_from_the_registry():
    page = (ROOT / "docs" / "columns.md").read_text(encoding="utf-8")
    assert page == columns.DOC_HEAD + columns.markdown(), "regenerate: python -m perfsuite.results.columns"


def test_booleans_and_numbers_are_typed_in_one_place():
    frame = pd.DataFrame({"unstable": ["True", "false", "", "1"], "vocab": ["7", "8", "9", "10"],
                          "tp": [None, "2", None, "1"], "variant": [1.0, "x", None, "y"]})  # fmt: skip
    typed = columns.typed(frame)
    assert typed["unstable"].tolist()[:2] == [True, False] and typed["unstable"].isna().tolist()[2]
    assert typed["vocab"].dtype == "int64" and typed["tp"].tolist() == [1, 2, 1, 1]  # tp's default: 1
    assert typed["variant"].tolist()[:2] == ["1", "x"]


def test_a_new_column_is_a_registry_line_and_its_producer(tmp_path, monkeypatch):
    """A column added the way a contributor adds one (a registry entry, a producer writing it) is in
    results.csv, typed when loaded, carried by compare, and shown in the report."""
    new = Column("flush_count", "int", "flushes before the samples", "", columns.KT, compare=True)
    monkeypatch.setattr(columns, "COLUMNS", (*columns.COLUMNS, new))
    monkeypatch.setitem(columns.BY_NAME, new.name, new)
    original = KernelRunner.figures
    monkeypatch.setattr(KernelRunner, "figures", lambda *a: {**original(*a), "flush_count": 3})
    scenario = tmp_path / "cols.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "out"
    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress"]) == 0
    assert "flush_count" in pd.read_csv(out / "results.csv").columns
    loaded = load_run([out]).frame
    assert loaded["flush_count"].dtype == "int64" and (loaded["flush_count"] == 3).all()
    table = compare(load_side(out), load_side(out)).table
    assert (table["base_flush_count"] == 3).all() and (table["new_flush_count"] == 3).all()
    assert "<th>flush_count</th>" in (out / "report.html").read_text(encoding="utf-8")


def test_every_column_a_run_writes_is_registered(tmp_path):
    """Every kind's rows (kernel and draft here; tensor parallel in test_run) and the edge cases."""
    scenario = tmp_path / "cols.toml"
    draft = (
        '[draft]\nvariants = ["full_softmax"]\nvocab = 64\nhidden = 8\nbatch = 2\ntopk = 2\nnum_steps = 2\n'
    )
    scenario.write_text(SCENARIO + draft + "cycles = 1\nkernels = false\nselection_share = false\n")
    out = tmp_path / "out"
    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress"]) == 0
    written = set()
    for name in ("results.csv", "draft.csv", "edge_cases.csv"):
        written |= set(pd.read_csv(out / name).columns)
    for name in ("results.jsonl", "draft.jsonl"):
        written |= {k for line in (out / name).read_text().splitlines() for k in json.loads(line)}
    written |= set(json.loads((out / "run.json").read_text())["constants"])
    assert written - set(columns.registered()) == set()


@pytest.mark.parametrize("table_file", ["results.csv", "draft.csv"])
def test_every_kind_table_puts_the_run_columns_in_run_json_only(table_file):
    assert not set(columns.table_columns(table_file)) & set(columns.RUN_COLUMNS)
    assert set(columns.table_columns(table_file, run=True)) >= {"device", "format_version"}


def test_a_run_folder_written_by_the_format_3_perfsuite_loads_reports_and_compares(tmp_path, capsys):
    """tests/data/format3-run: a tiny run (kernel, draft and edge-case rows) written by perfsuite 2279660,
    every column on every row, the float64 parity columns still named *_ref."""
    old = ROOT / "tests" / "data" / "format3-run"
    run = load_run([old])
    assert set(run.tables) == {"results.csv", "draft.csv", "edge_cases.csv"}
    frame = run.frame
    assert (frame["format_version"] == 3).all() and frame["device"].notna().all()
    assert frame["idx_exact_f64"].notna().any() and "idx_exact_ref" not in frame  # its old name read
    assert run.tables["draft.csv"]["tok_diff_f64"].notna().any()
    for table_file in ("results.csv", "draft.csv"):  # each old *_ref column's values under its new name
        written = pd.read_csv(old / table_file)
        renamed = {ref: f64 for ref, f64 in columns.RENAMED.items() if ref in written}
        assert len(renamed) >= 4, renamed
        for ref, f64 in renamed.items():
            assert run.tables[table_file][f64].tolist() == written[ref].tolist(), f64
    assert frame["p_relerr_f64"].nunique() > 1  # not one repeated value: the rows' own
    side = load_side(old)  # the per-round samples and the reference's, read from samples.jsonl
    assert [len(s or ()) for s in side["ref_seconds"]] == side["samples"].tolist() == [5] * len(frame)
    same = compare(side, load_side(old)).table
    assert len(same) == len(frame) and same["witness"].eq("vs reference, 5/5 rounds").all()  # not p20/p80
    assert cli.main(["report", str(old), "--out", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="edge-cases"' in page and "Draft loop" in page
    assert cli.main(["compare", str(old), str(old)]) == 0
    assert cli.main(["summary", str(old)]) == 0 and "Fastest variants" in capsys.readouterr().out

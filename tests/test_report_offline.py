"""The report without plotly (a GPU box without network): every table, a note in place of each figure.

Each check runs perfsuite's command line in a subprocess in which `import plotly` fails, as it does where
plotly is not installed; the same inputs rendered here, with plotly, give the page to compare against.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_report import synthetic_rows

from perfsuite import cli
from perfsuite.report import build_report, plots_available
from perfsuite.results.run import load_run
from perfsuite.results.write import ResultsLog, to_frame, write_tables

WITHOUT_PLOTLY = (
    "import runpy, sys; sys.modules['plotly'] = None; "  # `import plotly` now raises ModuleNotFoundError
    "sys.argv[0] = 'perfsuite'; runpy.run_module('perfsuite', run_name='__main__')"
)
NOT_INSTALLED = "plotly is not installed"
MISSING_FIGURE = "plot not drawn, plotly is missing"
TINY_SCENARIO = """
name = "tiny"
device = "cpu"

[[sweep]]
variants = ["identity"]
paths = ["eager"]
dtypes = ["float32"]
vocab = [96]
batch = [2]
topk = [1]
logits = ["gaussian"]

[timing]
warmup = 1
reps = 3
max_seconds = 0.5
"""


def perfsuite_without_plotly(*args: str) -> subprocess.CompletedProcess[str]:
    """`perfsuite ARGS` in a fresh interpreter that cannot import plotly."""
    command = [sys.executable, "-c", WITHOUT_PLOTLY, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def tables(page: str) -> list[str]:
    return re.findall(r"<table.*?</table>", page, flags=re.DOTALL)


def section(page: str, section_id: str) -> str:
    start = page.index(f'<section id="{section_id}">')
    return page[start : page.index("</section>", start)]


def tensor_parallel_rows() -> list[dict[str, object]]:
    """One tp = 2 shape: all-gather then select at 50 us, merge partials at 20 us."""
    shape = {"tp": 2, "path": "eager", "dtype": "bfloat16", "vocab": 32000, "batch": 4, "topk": 1}
    return [
        {**shape, "variant": variant, "accuracy": "exact", "status": "ok", "logits": "gaussian",
         "device": "NVIDIA H200", "median_us": us, "comm_bytes_model": comm}
        for variant, us, comm in (("allgather_full_softmax", 50.0, 256000), ("sharded_torch", 20.0, 64))
    ]  # fmt: skip


def draft_rows() -> pd.DataFrame:
    base = {"device": "cpu-x86_64", "dtype": "float32", "vocab": 256, "hidden": 16, "batch": 2, "topk": 1,
            "num_steps": 2, "num_draft_tokens": 3, "logits": "head", "path": "eager", "trees": 8,
            "kernels_per_cycle": 40.0, "launches_per_cycle": 40.0, "kernels_unit": "aten ops"}  # fmt: skip
    return pd.DataFrame(
        [
            {**base, "variant": "full_softmax", "status": "ok", "cycle_median_us": 900.0,
             "cycle_p20_us": 880.0, "cycle_p80_us": 950.0, "tok_diff_base": 0.0, "consumer_vs_base": "same"},
            {**base, "variant": "argmax_ones", "status": "ok", "cycle_median_us": 700.0,
             "cycle_p20_us": 690.0, "cycle_p80_us": 720.0, "tok_diff_base": 0.0,
             "consumer_vs_base": "scores differ (same tokens)"},
            {**base, "variant": "identity", "path": "graph", "status": "skipped",
             "reason": "graph capture needs a CUDA or ROCm GPU"},
        ]
    )  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run's folder as `perfsuite run` leaves it: results, edge cases and draft rows."""
    folder = tmp_path_factory.mktemp("run")
    write_tables(to_frame([*synthetic_rows(), *tensor_parallel_rows()]), folder)
    edges = [
        {"pattern": "all_nan", "description": "rows of NaN", "dtype": "bfloat16", "topk": 1, "variant": v,
         "index": index, "topk_p": p, "index_valid": True, "same_as_baseline": v == "full_softmax"}
        for v, index, p in (("full_softmax", "[0]", "[nan]"), ("argmax_ones", "[7]", "[1.0]"))
    ]  # fmt: skip
    pd.DataFrame(edges).to_csv(folder / "edge_cases.csv", index=False)
    draft_rows().to_csv(folder / "draft.csv", index=False)
    return folder


@pytest.fixture(scope="module")
def pages(run_dir: Path) -> tuple[str, str]:
    """(the report drawn without plotly, the same report drawn here with plotly)."""
    offline = run_dir / "offline.html"
    done = perfsuite_without_plotly("report", str(run_dir / "results.csv"), "--out", str(offline))
    assert done.returncode == 0, done.stderr[-3000:]
    assert offline.is_file() and "Traceback" not in done.stderr
    full = run_dir / "full.html"
    assert cli.main(["report", str(run_dir / "results.csv"), "--out", str(full)]) == 0
    return offline.read_text(encoding="utf-8"), full.read_text(encoding="utf-8")


def test_report_without_plotly_says_why_at_the_top(pages: tuple[str, str]) -> None:
    offline, _ = pages
    banner = re.search(r'<p class="banner" id="missing-plots">(.*?)</p>', offline, flags=re.DOTALL)
    assert banner, "no note about the missing plots"
    assert offline.index('id="missing-plots"') < offline.index("<section")  # before every section
    text = banner.group(1)
    assert NOT_INSTALLED in text and "pip install plotly" in text
    assert "scripts/fetch_wheels.sh" in text and "--find-links .whl" in text
    assert "perfsuite report DIR/results.csv" in text


def test_report_without_plotly_has_no_plotly_js(pages: tuple[str, str]) -> None:
    offline, full = pages
    assert "<script" not in offline and "plotly-graph-div" not in offline and "Plotly, Inc" not in offline
    assert "<script" in full and "plotly-graph-div" in full  # the same inputs do have plots with plotly


def test_report_without_plotly_keeps_every_table(pages: tuple[str, str]) -> None:
    offline, full = pages
    assert len(tables(full)) >= 10
    assert tables(offline) == tables(full)  # same tables, same cells, same order
    for section_id in ("summary", "plots", "parity", "tp", "draft", "edge-cases", "skipped", "results",
                       "environment"):  # fmt: skip
        assert f'<section id="{section_id}">' in offline, section_id


def test_report_without_plotly_shows_the_values(pages: tuple[str, str]) -> None:
    offline, _ = pages
    summary = section(offline, "summary")
    fastest = "fastest variant (any accuracy)"
    assert f"NVIDIA H200 · bfloat16: {fastest}: triton_fused (exact) in 8 of 8 cases" in summary
    assert f"cpu-x86_64 · bfloat16: {fastest}: argmax_ones (inexact) in 4 of 4 cases" in summary
    assert "Fastest exact variant: identity in 4 of 4 cases" in summary  # the CPU's, named as such
    assert ">4.2</td>" in summary  # argmax_ones' probability error against float64
    assert "triton needs a GPU" in section(offline, "skipped")
    assert "[7] / [1.0]" in section(offline, "edge-cases")
    assert "<td>2.5</td>" in section(offline, "tp")  # all-gather 50 us / merge partials 20 us
    draft = section(offline, "draft")
    assert "scores differ (same tokens)" in draft and "graph capture needs a CUDA or ROCm GPU" in draft
    assert "abc1234" in section(offline, "environment")


def test_report_without_plotly_has_a_note_per_figure(pages: tuple[str, str]) -> None:
    offline, full = pages
    figures = len(re.findall(r'class="plotly-graph-div"', full))
    assert figures >= 8
    assert offline.count(MISSING_FIGURE) == figures
    assert "latency (µs) · eager: " + MISSING_FIGURE in offline
    assert "speedup of identity over full_softmax: " + MISSING_FIGURE in offline
    assert "tp = 2: all-gather then select vs merge partials: " + MISSING_FIGURE in offline
    assert "Time per draft cycle: " + MISSING_FIGURE in offline
    assert "not drawn (" not in offline  # no figure builder failed


BUILD_WITHOUT_PLOTLY = (
    "import sys; sys.modules['plotly'] = None; "
    "from perfsuite.report import build_report; "
    "from perfsuite.results.run import load_run; "
    "results = sys.argv[1]; "
    "build_report(load_run([results]), sys.argv[2])"
)


def test_distribution_figure_becomes_a_note_without_plotly(tmp_path: Path) -> None:
    rows = [r for r in synthetic_rows() if r["device"] == "NVIDIA H200"]
    rows = [{**r, "run": "r1"} for r in rows]
    write_tables(to_frame(rows), tmp_path)
    log = ResultsLog(tmp_path / "samples.jsonl")
    for row in rows:
        if row["status"] == "ok":
            log.append({"case_id": row["case_id"], "run": "r1", "seconds": [row["median_us"] * 1e-6] * 5})
    offline, full = tmp_path / "offline.html", tmp_path / "full.html"
    command = [sys.executable, "-c", BUILD_WITHOUT_PLOTLY, str(tmp_path / "results.csv"), str(offline)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    page = offline.read_text(encoding="utf-8")
    assert f"distribution of the timed samples: {MISSING_FIGURE}" in page and "not drawn (" not in page
    build_report(load_run([tmp_path / "results.csv"]), full)
    drawn = full.read_text(encoding="utf-8")
    assert 'id="fig-distributions"' in drawn and "distribution of the timed samples: " not in drawn
    assert tables(page) == tables(drawn)


def test_compare_page_without_plotly(run_dir: Path, tmp_path: Path) -> None:
    base = pd.read_csv(run_dir / "results.csv")
    base = base[base["device"] == "NVIDIA H200"]
    new = base.assign(median_us=base["median_us"] * 1.2, p20_us=base["p20_us"] * 1.2)
    base.to_csv(tmp_path / "base.csv", index=False)
    new.to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "compare.html"
    done = perfsuite_without_plotly("compare", str(tmp_path / "base.csv"), str(tmp_path / "new.csv"),
                                    "--out", str(out))  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]  # 20 % slower everywhere: a regression
    page = out.read_text(encoding="utf-8")
    assert NOT_INSTALLED in page and "perfsuite compare BASE NEW --out FILE.html" in page
    assert "<script" not in page and "plotly-graph-div" not in page
    assert "FAIL:" in page and "<th>95 % interval</th>" in page and ">1.2</td>" in page
    assert page.count(MISSING_FIGURE) == 1


def test_run_without_plotly_writes_tables_and_report(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.toml"
    scenario.write_text(TINY_SCENARIO, encoding="utf-8")
    out = tmp_path / "run"
    done = perfsuite_without_plotly("run", str(scenario), "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("results.csv", "results.json", "edge_cases.csv", "report.html"):
        assert (out / name).is_file(), name
    results = pd.read_csv(out / "results.csv")
    assert list(results["variant"]) == ["identity"] and list(results["status"]) == ["ok"]
    assert results.loc[0, "vocab"] == 96 and results.loc[0, "median_us"] > 0
    assert "identity" in set(pd.read_csv(out / "edge_cases.csv")["variant"])
    page = (out / "report.html").read_text(encoding="utf-8")
    assert NOT_INSTALLED in page and "<script" not in page
    assert '<section id="parity">' in page and '<section id="edge-cases">' in page


def test_plots_available_says_what_is_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    assert plots_available() is None  # plotly is installed here
    monkeypatch.setitem(sys.modules, "plotly.express", None)  # installed, but a part does not import
    reason = plots_available.__wrapped__()  # uncached: look again
    assert reason is not None and reason.startswith("plotly cannot be imported (ModuleNotFoundError")
    assert "pip install plotly" in reason

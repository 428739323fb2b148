"""The report: loading result files back into the schema, and the HTML report built from synthetic rows."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pandas as pd
import plotly.offline
import pytest

from perfsuite.report import build_report, plots_available
from perfsuite.results import columns
from perfsuite.results.columns import FORMAT_VERSION
from perfsuite.results.columns import complete as coerce
from perfsuite.results.run import Run, load_run
from perfsuite.results.write import ResultsLog, to_frame, write_tables

COLUMNS = columns.table_columns("results.csv", run=True)


def load_results(path: Path) -> pd.DataFrame:
    return load_run([path]).frame


def load_many(paths: list[Path]) -> pd.DataFrame:
    return load_run(paths).frame


VARIANTS = {
    "full_softmax": ("rounded", 1.0),
    "argmax_ones": ("inexact", 0.4),
    "identity": ("exact", 0.7),
    "triton_fused": ("exact", 0.3),
    "triton_split": ("exact", 0.5),
}
DEVICES = {"NVIDIA H200": ("cuda", 4800.0, 4300.0), "cpu-x86_64": ("cpu", math.nan, math.nan)}


def synthetic_rows(
    vocabs=(32000, 151936), batches=(1, 64), dtypes=("float32", "bfloat16"), logits=("gaussian", "ties")
) -> list[dict[str, object]]:
    """Rows in the schema: 5 variants x 2 devices x 2 paths x shapes, with skipped and errored cases."""
    rng = random.Random(0)
    rows = []
    grid = itertools.product(DEVICES, VARIANTS, ("eager", "graph"), dtypes, vocabs, batches, logits)
    for device, variant, path, dtype, vocab, batch, kind in grid:
        backend, peak, copy = DEVICES[device]
        accuracy, factor = VARIANTS[variant]
        row: dict[str, object] = {
            "scenario": "smoke",
            "case_id": f"{variant}/{path}/{dtype}/{vocab}/{batch}/1/{kind}",
            "variant": variant,
            "accuracy": accuracy,
            "path": path,
            "backend": backend,
            "device": device,
            "dtype": dtype,
            "vocab": vocab,
            "batch": batch,
            "topk": 1,
            "logits": kind,
            "l2": "cold",
            "torch": "2.13.0",
            "triton": "3.4.0" if backend == "cuda" else None,
            "git_sha": "abc1234",
            "timestamp": "2025-01-01T00:00:00+00:00",
        }
        if backend == "cpu" and (path == "graph" or variant.startswith("triton")):
            reason = "graphs need a GPU" if path == "graph" else "triton needs a GPU"
            rows.append({**row, "status": "skipped", "reason": reason})
            continue
        if variant == "triton_split" and vocab == 151936 and batch == 64:
            rows.append({**row, "status": "error", "reason": "RuntimeError: out of resources: shared memory"})
            continue
        elements = vocab * batch
        median = (5 + elements * 2e-4 * (2 if dtype == "float32" else 1)) * factor * (1 + 0.05 * rng.random())
        gbps = elements * 2 / median / 1e3
        rows.append(
            {
                **row,
                "status": "ok",
                "reason": "",
                "median_us": median,
                "p20_us": median * 0.95,
                "p80_us": median * 1.1,
                "samples": 100,
                "timing": "device events" if backend == "cuda" else "host perf_counter",
                "bytes_model": elements * 2,
                "bytes_ideal": elements * 2,
                "gbps": gbps,
                "gbps_ideal": gbps,
                "peak_gbps": peak,
                "copy_gbps": copy,
                "pct_peak": 100 * gbps / peak,
                "pct_copy": 100 * gbps / copy,
                "peak_temp_bytes": elements * 4 if variant in ("full_softmax", "identity") else 0,
                "model_temp_bytes": elements
                * (2 if variant == "full_softmax" else 4 if variant == "identity" else 0),
                "verdict": {"rounded": "pass", "inexact": "inexact", "exact": "pass"}[accuracy],
                "problem": "topk_p off by up to 4.2 relative" if variant == "argmax_ones" else "",
                "idx_exact_f64": 0.99 if dtype == "bfloat16" and variant == "full_softmax" else 1.0,
                "idx_tie_f64": 0.995 if dtype == "bfloat16" and variant == "full_softmax" else 1.0,
                "top1_mismatch_f64": 0.005 * (kind == "ties") if variant == "full_softmax" else 0.0,
                "p_relerr_f64": 4.2 if variant == "argmax_ones" else 1e-7,
                "idx_exact_base": 1.0,
                "idx_tie_base": 1.0,
                "p_relerr_base": 0.0,
                "finite_rows": batch,
                "nonfinite_rows": 0,
            }
        )
    return rows


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return to_frame(synthetic_rows())


@pytest.fixture(scope="module")
def edge_cases() -> pd.DataFrame:
    rows = []
    for pattern, variant in itertools.product(("all_nan", "all_neg_inf", "ties"), VARIANTS):
        differs = pattern == "all_nan" and variant == "argmax_ones"
        rows.append(
            {
                "pattern": pattern,
                "description": f"rows of {pattern}",
                "dtype": "bfloat16",
                "topk": 1,
                "variant": variant,
                "index": "[0]" if not differs else "[7]",
                "topk_p": "[nan]" if not differs else "[1.0]",
                "index_valid": not (pattern == "all_neg_inf" and variant == "triton_split"),
                "same_as_baseline": not differs,
                "error": "ValueError: <boom>" if (pattern == "ties" and variant == "triton_fused") else "",
            }
        )
    for pattern in ("all_nan", "all_neg_inf", "ties"):  # a variant that cannot run here: one note, no column
        rows.append(
            {"pattern": pattern, "variant": "triton_auto", "index": "", "topk_p": "", "error": "no GPU"}
        )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- load


def test_csv_json_jsonl_round_trip(frame: pd.DataFrame, tmp_path: Path) -> None:
    frame = frame.assign(format_version=FORMAT_VERSION)  # as `ResultsLog.append` stamps every row
    csv_path, json_path = write_tables(frame, tmp_path)
    log = ResultsLog(tmp_path / "results.jsonl")
    for row in frame.to_dict("records"):
        log.append(row)
    expected = coerce(frame)
    for path in (csv_path, json_path, log.path):
        loaded = load_results(path)
        assert list(loaded.columns[: len(COLUMNS)]) == list(COLUMNS)
        pd.testing.assert_frame_equal(loaded, expected, check_dtype=True, obj=path.name)
    assert loaded["vocab"].dtype == "int64" and loaded["median_us"].dtype == "float64"
    assert load_results(tmp_path).shape == expected.shape  # a run directory


def test_text_columns_stay_text(tmp_path: Path) -> None:
    rows = [{"variant": "identity", "status": "ok", "triton": "3.10", "git_sha": "1234567", "vocab": 127}]
    write_tables(to_frame(rows), tmp_path)
    loaded = load_results(tmp_path / "results.csv")
    assert loaded.loc[0, "triton"] == "3.10" and loaded.loc[0, "git_sha"] == "1234567"
    assert loaded.loc[0, "vocab"] == 127 and math.isnan(loaded.loc[0, "median_us"])


def _benchmark_entry(name: str, extra: dict[str, object], median_s: float) -> dict[str, object]:
    stats = {"min": median_s * 0.9, "max": median_s * 2, "median": median_s, "q1": median_s * 0.95}
    stats |= {"q3": median_s * 1.05, "rounds": 50, "mean": median_s, "stddev": 0.0}
    return {"group": "draft-topk", "name": name, "fullname": f"benchmarks/x.py::{name}", "params": None,
            "extra_info": extra, "stats": stats}  # fmt: skip


def test_pytest_benchmark_json(frame: pd.DataFrame, tmp_path: Path) -> None:
    ok = frame[frame["status"] == "ok"].head(3).to_dict("records")
    with_median = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in ok[0].items()}
    without_median = {k: v for k, v in ok[1].items() if k != "median_us"}
    without_median["timing"] = None
    data = {
        "machine_info": {"node": "box"},
        "commit_info": {"id": "deadbeef"},
        "benchmarks": [
            _benchmark_entry("test_select[a]", with_median, 1e-3),
            _benchmark_entry("test_select[b]", without_median, 2.5e-6),
        ],
        "datetime": "2025-01-02T03:04:05",
        "version": "5.1.0",
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    loaded = load_results(path)
    assert len(loaded) == 2
    assert loaded.loc[0, "median_us"] == pytest.approx(ok[0]["median_us"])  # extra_info wins
    assert loaded.loc[1, "median_us"] == pytest.approx(2.5)  # stats.median, seconds -> us
    assert list(loaded["bench_name"]) == ["test_select[a]", "test_select[b]"]
    assert set(loaded["bench_group"]) == {"draft-topk"}
    assert loaded.loc[0, "variant"] == ok[0]["variant"] and loaded.loc[1, "vocab"] == ok[1]["vocab"]


def test_a_plain_pytest_benchmark_file_reads_as_rows_named_after_its_benchmarks(tmp_path: Path) -> None:
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"benchmarks": [_benchmark_entry("t", {}, 1e-6)]}), encoding="utf-8")
    row = load_results(path).iloc[0]
    assert row["variant"] == "benchmarks/x.py::t" and row["median_us"] == pytest.approx(1.0)
    assert row["p20_us"] == pytest.approx(0.95) and row["p80_us"] == pytest.approx(1.05)  # the quartiles


def test_load_many_concatenates(frame: pd.DataFrame, tmp_path: Path) -> None:
    paths = []
    for device, part in frame.groupby("device"):
        out = tmp_path / device.replace(" ", "_")
        paths.append(write_tables(part, out)[0 if len(paths) == 0 else 1])
    both = load_many(paths)
    assert len(both) == len(frame)
    assert set(both["device"]) == set(frame["device"])
    assert set(both["source"]) == {"results.csv", "results.json"}
    with pytest.raises(ValueError, match="no results files"):
        load_many([])


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("missing.csv", None, "no such file"),
        ("empty.csv", "", "empty file"),
        ("broken.json", '{"benchmarks": [', "not valid JSON"),
        ("other.json", '{"hello": 1}', "unrecognised JSON"),
        ("list.json", "[1, 2]", "not all objects"),
        ("lines.jsonl", '{"variant": "identity"}\nnot json\n', "line 2"),
        ("other.csv", "a,b\n1,2\n", "not a perfsuite results file"),
    ],
)
def test_bad_files_raise_value_error(tmp_path: Path, name: str, content: str | None, message: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        load_results(path)
    assert name in str(info.value)


def test_binary_file_raises_value_error(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    path.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(ValueError, match=r"results\.csv"):
        load_results(path)


# ---------------------------------------------------------------------------------------------- html


@pytest.fixture(scope="module")
def report_html(frame: pd.DataFrame, edge_cases: pd.DataFrame, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("report") / "report.html"
    path = build_report(Run.of(frame, edge_cases=edge_cases), out, environment={"runtime": "CUDA 12.8"})
    assert path == out and path.is_file()
    return path.read_text(encoding="utf-8")


def test_report_is_self_contained_with_plotly_once(report_html: str) -> None:
    assert plots_available() is None and 'id="missing-plots"' not in report_html  # no "plots missing" note
    plotly_js = plotly.offline.get_plotlyjs()
    assert report_html.count(plotly_js[:200]) == 1
    rest = report_html.replace(plotly_js, "")
    assert "<script src=" not in rest and "cdn.plot.ly" not in rest


def test_report_has_figures(report_html: str) -> None:
    for div in ("fig-top1-mismatch", "fig-latency-0", "fig-speedup-identity", "fig-speedup-argmax_ones",
                "fig-bandwidth-0", "fig-memory"):  # fmt: skip
        assert f'id="{div}"' in report_html, div
    assert "not drawn (" not in report_html  # no figure fell over


def test_report_sections_in_order(report_html: str) -> None:
    ids = ["summary", "plots", "parity", "edge-cases", "skipped", "results", "environment"]
    positions = [report_html.index(f'<section id="{i}">') for i in ids]
    assert positions == sorted(positions)


def test_report_summary_and_tables(report_html: str) -> None:
    summary = report_html[
        report_html.index('<section id="summary">') : report_html.index('<section id="plots">')
    ]
    assert "Fastest exact variant" in summary and "triton_fused" in summary  # the fastest exact one
    assert "max p_relerr_f64" in summary and "4.2" in summary  # what argmax_ones costs
    assert "different top token" in summary
    parity = report_html[
        report_html.index('<section id="parity">') : report_html.index('<section id="edge-cases">')
    ]
    assert "inexact" in parity and "min idx_tie_f64" in parity
    skipped = report_html[
        report_html.index('<section id="skipped">') : report_html.index('<section id="results">')
    ]
    assert "triton needs a GPU" in skipped and "graphs need a GPU" in skipped
    assert "out of resources: shared memory" in skipped
    assert skipped.count("<tr>") < 20  # grouped, not one row per case
    assert "<details>" in report_html and "CUDA 12.8" in report_html and "abc1234" in report_html


def test_report_edge_case_matrix(report_html: str) -> None:
    edge = report_html[
        report_html.index('<section id="edge-cases">') : report_html.index('<section id="skipped">')
    ]
    assert "all_neg_inf" in edge and "rows of ties" in edge
    assert 'class="differs"' in edge and "[7] / [1.0]" in edge
    assert 'class="invalid"' in edge
    assert 'class="error"' in edge and "&lt;boom&gt;" in edge and "<boom>" not in edge  # autoescaped
    assert "triton_auto: not run on any input (no GPU)" in edge and "<th>triton_auto</th>" not in edge


def test_report_all_skipped(frame: pd.DataFrame, tmp_path: Path) -> None:
    skipped = frame.copy()
    skipped["status"] = "skipped"
    skipped["reason"] = "no device"
    for column in ("median_us", "p20_us", "p80_us", "verdict", "top1_mismatch_f64", "pct_peak", "gbps"):
        skipped[column] = math.nan
    html = build_report(Run.of(skipped), tmp_path).read_text(encoding="utf-8")
    assert "no device" in html and "nothing to plot" in html and "not drawn (" not in html


def test_report_one_variant_one_device(frame: pd.DataFrame, tmp_path: Path) -> None:
    one = frame[(frame["variant"] == "identity") & (frame["device"] == "cpu-x86_64")].copy()
    one["speedup_vs_full"] = math.nan
    html = build_report(Run.of(one), tmp_path / "one.html").read_text(encoding="utf-8")
    assert 'id="fig-latency-0"' in html and "not drawn (" not in html
    assert "no variant has a full_softmax baseline" in html


def test_report_fills_speedups_and_survives_nan_columns(frame: pd.DataFrame, tmp_path: Path) -> None:
    sparse = frame.copy()
    for column in ("speedup_vs_full", "pct_peak", "pct_copy", "peak_temp_bytes", "model_temp_bytes"):
        sparse[column] = math.nan
    sparse["timestamp"] = None
    html = build_report(Run.of(sparse), tmp_path / "sparse.html", title="<sparse>").read_text(
        encoding="utf-8"
    )
    assert 'id="fig-speedup-identity"' in html  # speedups filled from full_softmax's medians
    assert "GB/s" in html and "Memory: no peak_temp_bytes" in html
    assert "&lt;sparse&gt;" in html and "not drawn (" not in html


def test_report_empty_frame(tmp_path: Path) -> None:
    html = build_report(Run.of(to_frame([])), tmp_path / "empty.html").read_text(encoding="utf-8")
    assert "No result rows: nothing to plot" in html and "not drawn (" not in html


# ------------------------------------------------------------------------- winners, runs, noise, samples

ACCURACY = {"full_softmax": "rounded", "argmax_ones": "inexact", "identity": "exact", "triton_auto": "exact"}


def case_rows(
    times: dict[str, float], *, run: str | None = "r1", device: str = "box", vocabs=(32000,), **extra
) -> list[dict[str, object]]:
    """One eager bfloat16 B=1 k=1 case per vocab and variant: `times[variant]` us (x the vocab's index + 1),
    p20/p80 5 % either side; `extra` columns on every row (a dict value: per variant)."""
    rows = []
    for i, vocab in enumerate(vocabs):
        for variant, us in times.items():
            median = us * (i + 1)
            row = {
                "case_id": f"{variant}/eager/bfloat16/V{vocab}/B1/k1/gaussian",
                "variant": variant, "accuracy": ACCURACY[variant], "path": "eager", "backend": "cpu",
                "device": device, "dtype": "bfloat16", "vocab": vocab, "batch": 1, "topk": 1,
                "logits": "gaussian", "l2": "cold", "status": "ok", "median_us": median,
                "p20_us": 0.95 * median, "p80_us": 1.05 * median, "samples": 50, "spread": 0.1,
                "unstable": False, "timing": "host perf_counter", "run": run,
            }  # fmt: skip
            row.update(
                {k: v.get(variant, row.get(k)) if isinstance(v, dict) else v for k, v in extra.items()}
            )
            rows.append(row)
    return rows


def section_of(page: str, section_id: str) -> str:
    start = page.index(f'<section id="{section_id}">')
    return page[start : page.index("</section>", start)]


def figure_of(page: str, name: str) -> str:
    """One figure's div, script and caption."""
    start = page.index(f'<div class="figure" id="figure-{name}">')
    ends = [page.find(end, start + 1) for end in ('<div class="figure"', "</section>")]
    return page[start : min(e for e in ends if e > 0)]


def in_json(text: str) -> str:
    """`text` as plotly writes it inside a figure's JSON (non-ASCII and <, > escaped)."""
    from plotly.io.json import to_json_plotly

    return to_json_plotly(text)[1:-1]


def test_summary_names_the_fastest_variant_whatever_its_accuracy(tmp_path: Path) -> None:
    """full_softmax wins: the summary says so; identity is only the fastest *exact* variant, 7x slower."""
    rows = case_rows({"full_softmax": 100.0, "argmax_ones": 150.0, "identity": 700.0}, vocabs=(32000, 151936))
    page = build_report(Run.of(to_frame(rows)), tmp_path / "r.html").read_text(encoding="utf-8")
    summary = section_of(page, "summary")
    assert "box · bfloat16: fastest variant (any accuracy): full_softmax (rounded) in 2 of 2 cases" in summary
    assert "Fastest exact variant: identity in 2 of 2 cases, median 0.14× against full_softmax" in summary
    assert "slower than full_softmax" in summary
    assert "the fastest variant of any accuracy in 0 of 2 cases" in summary
    assert "identity is the fastest" not in page and "is the fastest exact variant" not in page
    assert "<th>V=32000: fastest (any accuracy)</th><th>V=32000: fastest exact</th>" in summary
    assert ">full_softmax (rounded)</td>" in summary and ">identity 0.14×</td>" in summary


def test_summary_when_an_exact_variant_wins_everything(tmp_path: Path) -> None:
    rows = case_rows({"full_softmax": 100.0, "argmax_ones": 60.0, "identity": 50.0})
    summary = section_of(
        build_report(Run.of(to_frame(rows)), tmp_path / "r.html").read_text(encoding="utf-8"), "summary"
    )
    assert "fastest variant (any accuracy): identity (exact) in 1 of 1 cases" in summary
    assert "it is also the fastest variant of any accuracy in every case" in summary
    assert "faster than full_softmax" in summary


def test_unstable_cases_are_marked_in_tables_and_plots(tmp_path: Path) -> None:
    rows = case_rows(
        {"full_softmax": 100.0, "argmax_ones": 150.0, "identity": 700.0},
        unstable={"identity": True}, spread={"identity": 0.6},
    )  # fmt: skip
    page = build_report(Run.of(to_frame(rows)), tmp_path / "r.html").read_text(encoding="utf-8")
    summary = section_of(page, "summary")
    assert ">identity 0.14× ⚠</td>" in summary and ">full_softmax (rounded)</td>" in summary
    assert "unstable in 1 of 1 logits distributions" in summary  # the cell's tooltip
    results = section_of(page, "results")
    assert results.count('class="differs"') == 1 and "True ⚠" in results and "<th>spread</th>" in results
    assert '"circle-open"' in figure_of(page, "latency-0")  # the unstable point: an open ring
    banner = page[page.index('id="warnings"') : page.index("<nav>")]
    assert "1 of 3 measured cases are unstable" in banner


def test_a_stable_run_on_an_idle_machine_has_no_warnings(tmp_path: Path) -> None:
    rows = case_rows({"full_softmax": 100.0, "identity": 50.0}, other_cores=0.1)
    page = build_report(Run.of(to_frame(rows)), tmp_path / "r.html").read_text(encoding="utf-8")
    assert 'id="warnings"' not in page and "⚠ " not in section_of(page, "summary")


def test_shared_machine_warning_from_the_rows(tmp_path: Path) -> None:
    """`perfsuite report DIR/results.csv` without run.json: the rows' other_cores say it was shared."""
    from perfsuite.core.machine import SHARED_CORES

    busy = {"full_softmax": SHARED_CORES + 1.0, "identity": SHARED_CORES + 0.5, "argmax_ones": 0.0}
    rows = case_rows({"full_softmax": 100.0, "identity": 50.0, "argmax_ones": 40.0}, other_cores=busy)
    write_tables(to_frame(rows), tmp_path)
    frame = load_many([tmp_path / "results.csv"])
    page = build_report(Run.of(frame), tmp_path / "r.html").read_text(encoding="utf-8")
    banner = page[page.index('<div class="banner" id="warnings"') : page.index("<nav>")]
    assert page.index('id="warnings"') < page.index("<section")  # above everything else
    assert (
        f"shared machine: 2 of 3 cases were measured while other processes kept more than {SHARED_CORES:g}"
        in banner
    )
    assert "up to 1.5" in banner
    notes = ["the machine was shared: other processes kept <2.0> of 2 cores busy"]
    page = build_report(Run.of(frame, notes=notes), tmp_path / "n.html").read_text(encoding="utf-8")
    banner = page[page.index('id="warnings"') : page.index("<nav>")]
    assert "&lt;2.0&gt; of 2 cores" in banner and "shared machine: 2 of 3" in banner  # notes first, escaped
    assert banner.index("&lt;2.0&gt;") < banner.index("shared machine: 2 of 3")


def test_two_runs_of_one_device_stay_apart(tmp_path: Path) -> None:
    """Two runs on one device reported together: two medians, two speedups, two runs named, never pooled."""
    first = case_rows({"full_softmax": 100.0, "identity": 50.0}, run="20261130-101010-vm")
    second = case_rows({"full_softmax": 300.0, "identity": 100.0}, run="20261201-090909-vm")
    paths = []
    for name, rows in (("a", first), ("b", second)):
        frame = to_frame(rows).drop(columns=["speedup_vs_full"])  # filled by the report, within each run
        paths.append(write_tables(frame, tmp_path / name)[0])
    frame = load_many(paths)
    page = build_report(Run.of(frame), tmp_path / "r.html").read_text(encoding="utf-8")
    summary = section_of(page, "summary")
    assert "box · 20261130-101010-vm · bfloat16: fastest variant (any accuracy): identity (exact)" in summary
    assert "box · 20261201-090909-vm · bfloat16: fastest variant (any accuracy): identity (exact)" in summary
    assert ">identity 2.00×</td>" in summary and ">identity 3.00×</td>" in summary  # pooled: 2.67×
    assert 'title="identity: 50 µs' in summary and 'title="identity: 100 µs' in summary
    assert "<th>device · run</th>" in summary
    assert "2 runs kept apart: box · 20261130-101010-vm, box · 20261201-090909-vm" in page
    latency = figure_of(page, "latency-0")
    for run in ("20261130-101010-vm", "20261201-090909-vm"):  # a line per run, the run in its style
        assert in_json(f"identity · box · {run}") in latency


def test_two_old_files_of_one_device_without_run_labels_stay_apart(tmp_path: Path) -> None:
    paths = []
    for name, us in (("monday.csv", 100.0), ("tuesday.csv", 200.0)):
        frame = to_frame(case_rows({"full_softmax": us, "identity": us / 2}, run=None)).drop(columns=["run"])
        frame.to_csv(tmp_path / name, index=False)
        paths.append(tmp_path / name)
    page = build_report(Run.of(load_many(paths)), tmp_path / "r.html").read_text(encoding="utf-8")
    summary = section_of(page, "summary")
    assert "box · monday.csv · bfloat16" in summary and "box · tuesday.csv · bfloat16" in summary
    one = build_report(Run.of(load_many(paths[:1])), tmp_path / "one.html").read_text(encoding="utf-8")
    assert "box · bfloat16: fastest variant (any accuracy): identity (exact)" in section_of(one, "summary")
    assert "runs kept apart" not in one


def test_speedup_heatmap_shows_the_paired_band(tmp_path: Path) -> None:
    rows = case_rows(
        {"full_softmax": 100.0, "identity": 50.0},
        speedup_vs_full={"full_softmax": 1.0, "identity": 1.9},
        speedup_p20={"full_softmax": 1.0, "identity": 1.7},
        speedup_p80={"full_softmax": 1.0, "identity": 2.2},
        speedup_method="paired",
    )  # fmt: skip
    page = build_report(Run.of(to_frame(rows)), tmp_path / "r.html").read_text(encoding="utf-8")
    heatmap = figure_of(page, "speedup-identity")
    assert in_json("1.90×<br>1.70-2.20") in heatmap and in_json("(paired, p20-p80 1.70-2.20×)") in heatmap
    assert "1 of 1 rows paired" in heatmap
    tip = 'title="identity: 50 µs, 1.90× (paired, p20-p80 1.70-2.20×)"'
    assert tip in section_of(page, "summary")
    unpaired = build_report(
        Run.of(to_frame(case_rows({"full_softmax": 100.0, "identity": 50.0}))), tmp_path / "u.html"
    )
    text = unpaired.read_text(encoding="utf-8")
    assert "ratio of full_softmax&#39;s median to the variant&#39;s" in text and "(ratio of medians)" in text


def write_samples(folder: Path, rows: list[dict[str, object]], count: int = 40) -> None:
    """samples.jsonl as a run writes it: `count` samples (seconds) around each row's median."""
    log = ResultsLog(folder / "samples.jsonl")
    rng = random.Random(1)
    for row in rows:
        seconds = [row["median_us"] * 1e-6 * (0.9 + 0.2 * rng.random()) for _ in range(count)]
        log.append({"case_id": row["case_id"], "run": row["run"], "seconds": seconds})


def test_load_samples_and_notes_beside_the_results(tmp_path: Path) -> None:
    rows = case_rows({"full_softmax": 100.0, "identity": 50.0})
    write_tables(to_frame(rows), tmp_path)
    bare = load_run([tmp_path / "results.csv"])
    assert bare.samples is None and bare.notes == []
    write_samples(tmp_path, rows, count=5)
    with (tmp_path / "samples.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"case_id": "torn", "seco')  # an interrupted write: skipped
    (tmp_path / "run.json").write_text(json.dumps({"label": "r1", "notes": ["shared"]}), encoding="utf-8")
    for where in (tmp_path / "results.csv", tmp_path):
        samples = load_run([where]).samples
        assert samples is not None and list(samples.columns) == ["case_id", "run", "seconds", "ref_seconds"]
        assert len(samples) == 2 and set(samples["run"]) == {"r1"} and len(samples["seconds"][0]) == 5
    assert load_run([tmp_path / "results.csv"]).notes == ["shared"]
    other = tmp_path / "other"
    write_tables(to_frame(rows), other)
    (other / "run.json").write_text(json.dumps({"label": "r2", "notes": ["torn line"]}), encoding="utf-8")
    assert load_run([tmp_path, other]).notes == ["run r1: shared", "run r2: torn line"]
    (other / "run.json").unlink()
    assert load_run([tmp_path, other]).notes == ["run r1: shared"]  # two runs reported: which one it was


def test_distribution_figure_from_the_samples(tmp_path: Path) -> None:
    from perfsuite.report import kernel_figures as distributions

    vocabs = (1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000)
    rows = case_rows({"full_softmax": 100.0, "identity": 50.0}, vocabs=vocabs)
    write_tables(to_frame(rows), tmp_path)
    write_samples(tmp_path, rows)
    log = ResultsLog(tmp_path / "samples.jsonl")  # one case with many samples: thinned
    log.append({"case_id": rows[0]["case_id"], "run": "r1", "seconds": [1e-4] * 1000})
    page = build_report(load_run([tmp_path / "results.csv"]), tmp_path / "r.html")
    text = page.read_text(encoding="utf-8")
    figure = figure_of(text, "distributions")
    assert f"for {distributions.MAX_SHAPES} of the 8 shapes with raw samples" in figure
    assert "(1 cases thinned evenly)" in figure and "every panel: box · eager · bfloat16" in figure
    assert '"type":"box"' in figure and "vocab=1000" in figure and "vocab=128000" in figure
    assert figure.count('"type":"box"') == 2 * distributions.MAX_SHAPES
    assert len(distributions.thin([1.0] * 1000)) == distributions.MAX_SAMPLES
    assert distributions.thin([3.0, 1.0, 2.0]) == [3.0, 1.0, 2.0]  # few: all, in the order taken
    without = build_report(Run.of(load_many([tmp_path / "results.csv"])), tmp_path / "w.html").read_text(
        encoding="utf-8"
    )
    assert 'id="fig-distributions"' not in without and "not given the raw samples" in without


# ------------------------------------------------------------------------------------ the logits' shape

SHAPES = {  # kind: (top1_prob, entropy_nats, top1_tie_rows, ties at k=8)
    "gaussian": (0.07, 6.6, 0.0, 0.0),
    "peaked": (0.93, 0.28, 0.0, 0.0),
    "file:mine": (0.09, 6.3, 0.03, 0.4),
}


def shaped_rows() -> list[dict[str, object]]:
    """Rows of two k's whose logits carry their shape figures (one file kind among generated ones)."""
    rows = []
    for k in (1, 8):
        for row in case_rows({"full_softmax": 100.0, "identity": 90.0}, vocabs=(16384,)):
            for kind, (top1, entropy, ties, kth) in SHAPES.items():
                rows.append(
                    {**row, "topk": k, "logits": kind, "case_id": f"{row['case_id']}/{kind}/{k}",
                     "top1_prob": top1, "entropy_nats": entropy, "top1_tie_rows": ties,
                     "topk_tie_rows": ties if k == 1 else kth}
                )  # fmt: skip
    return rows


def test_logits_shape_section_compares_a_file_with_the_generated_kinds(tmp_path: Path) -> None:
    page = build_report(Run.of(to_frame(shaped_rows())), tmp_path / "r.html").read_text(encoding="utf-8")
    starts = [page.index(f'<section id="{i}">') for i in ("parity", "logits-shape", "skipped")]
    assert starts == sorted(starts)
    shape = section_of(page, "logits-shape")
    assert "file:mine (bfloat16): mean top-1 p 0.09" in shape
    assert "Closest generated kind: gaussian (top-1 p 0.07" in shape
    assert "<th>rows tied at k=8</th>" in shape and "<td>40 %</td>" in shape
    assert "<th>entropy / ln V</th>" in shape and f"<td>{6.6 / math.log(16384):.3g}</td>" in shape
    order = [shape.index(f"<td>{kind}</td>") for kind in ("peaked", "file:mine", "gaussian")]
    assert order == sorted(order)  # the most confident kind first, the file where it falls
    assert 'id="fig-logits-shape"' in shape and "not drawn (" not in page


def test_results_without_shape_figures_have_no_shape_section(report_html: str, tmp_path: Path) -> None:
    assert 'id="logits-shape"' not in report_html  # the synthetic frame predates the figures
    old = tmp_path / "old.csv"
    figures = ["top1_prob", "entropy_nats", "top1_tie_rows", "topk_tie_rows"]
    to_frame(shaped_rows()).drop(columns=figures).to_csv(old, index=False)
    loaded = load_results(old)
    assert loaded["top1_prob"].isna().all() and loaded["topk_tie_rows"].dtype == "float64"
    page = build_report(Run.of(loaded), tmp_path / "old.html").read_text(encoding="utf-8")
    assert 'id="logits-shape"' not in page and "not drawn (" not in page


def test_shape_figures_round_trip_as_numbers(tmp_path: Path) -> None:
    csv_path, _ = write_tables(to_frame(shaped_rows()), tmp_path)
    loaded = load_results(csv_path)
    assert loaded["top1_prob"].dtype == "float64" and set(loaded["top1_tie_rows"]) == {0.0, 0.03}

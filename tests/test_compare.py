"""`perfsuite compare`: matching, the noise rule, parity and status regressions, inputs, exit codes, page."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.compare import compare, load_side, parse_threshold, text_table
from perfsuite.results import ResultsLog, to_frame, write_tables

CASE = {"path": "eager", "dtype": "bfloat16", "batch": 1, "topk": 1, "logits": "gaussian", "l2": "cold",
        "device": "NVIDIA H200", "backend": "cuda", "status": "ok", "reason": ""}  # fmt: skip


def row(variant: str, vocab: int, median: float, *, spread: float = 0.02, **extra: object) -> dict:
    accuracy = {"full_softmax": "rounded", "argmax_ones": "inexact"}.get(variant, "exact")
    return {
        **CASE,
        "case_id": f"{variant}/eager/bfloat16/V{vocab}/B1/k1/gaussian",
        "variant": variant,
        "accuracy": accuracy,
        "vocab": vocab,
        "median_us": median,
        "p20_us": median * (1 - spread),
        "p80_us": median * (1 + spread),
        "verdict": "inexact" if accuracy == "inexact" else "pass",
        "bytes_model": vocab * 2,
        **extra,
    }


def runs() -> tuple[list[dict], list[dict]]:
    base = [
        row("identity", 32000, 10.0),  # slower, clear of the noise
        row("identity", 151936, 20.0, spread=0.2),  # slower by the medians, but the spreads overlap
        row("triton_fused", 32000, 10.0),  # faster
        row("triton_fused", 151936, 10.0),  # parity pass -> fail
        row("triton_split", 151936, 10.0),  # ok -> error
        row("full_softmax", 32000, 30.0),  # same
        row("full_softmax", 151936, 30.0),  # only in base
    ]
    new = [
        row("identity", 32000, 11.0),
        row("identity", 151936, 22.0, spread=0.2),
        row("triton_fused", 32000, 8.0),
        row("triton_fused", 151936, 10.0, verdict="fail", problem="topk_p off"),
        {**row("triton_split", 151936, math.nan), "status": "error", "reason": "RuntimeError: boom"},
        row("full_softmax", 32000, 30.5),
        row("argmax_ones", 32000, 3.0),  # only in new
    ]
    return base, new


def outcomes(result) -> dict[str, str]:
    return dict(zip(result.table["case"], result.table["outcome"], strict=True))


def test_outcomes_follow_the_noise_rule_and_parity():
    base, new = runs()
    result = compare(to_frame(base), to_frame(new), 0.05)
    got = outcomes(result)
    assert got == {
        "identity/eager/bfloat16/V32000/B1/k1/gaussian": "slower",
        "identity/eager/bfloat16/V151936/B1/k1/gaussian": "noisy",
        "triton_fused/eager/bfloat16/V32000/B1/k1/gaussian": "faster",
        "triton_fused/eager/bfloat16/V151936/B1/k1/gaussian": "parity worse",
        "triton_split/eager/bfloat16/V151936/B1/k1/gaussian": "broken",
        "full_softmax/eager/bfloat16/V32000/B1/k1/gaussian": "same",
    }
    assert (result.base_only, result.new_only) == (1, 1)
    assert list(result.table["outcome"][:3]) == ["broken", "parity worse", "slower"]  # failures first
    assert len(result.failures) == 3
    slower = result.table[result.table["outcome"] == "slower"].iloc[0]
    assert slower["ratio"] == pytest.approx(1.1) and slower["band_low"] == pytest.approx(11 * 0.98 / 10.2)
    text = text_table(result)
    assert "1 broken, 1 parity worse, 1 slower, 1 noisy, 1 faster, 1 same" in text
    assert "pass→fail" in text and "1 only in base" in text and "new p20 above base p80" in text


def test_a_bigger_threshold_or_no_spread():
    base, new = runs()
    loose = compare(to_frame(base), to_frame(new), 0.15)
    assert outcomes(loose)["identity/eager/bfloat16/V32000/B1/k1/gaussian"] == "same"
    no_spread = [
        [{k: v for k, v in r.items() if k not in ("p20_us", "p80_us")} for r in rows] for rows in runs()
    ]
    plain = compare(to_frame(no_spread[0]), to_frame(no_spread[1]), 0.05)
    assert outcomes(plain)["identity/eager/bfloat16/V151936/B1/k1/gaussian"] == "slower"  # median rule only


def test_devices_are_part_of_the_match_unless_ignored():
    base, new = runs()
    other = [{**r, "device": "NVIDIA H100"} for r in new]
    assert compare(to_frame(base), to_frame(other)).table.empty
    across = compare(to_frame(base), to_frame(other), ignore_device=True)
    assert len(across.table) == 6


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("5", 0.05), ("0.05", 0.05), (" 12.5 % ", 0.125)])
def test_thresholds(text, value):
    assert parse_threshold(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "abc", "0%", "-5%", "5%%"])
def test_bad_thresholds(text):
    with pytest.raises(ValueError, match="--fail-on"):
        parse_threshold(text)


def write_pair(tmp_path: Path, base: list[dict], new: list[dict]) -> tuple[Path, Path]:
    base_path = write_tables(to_frame(base), tmp_path / "base")[0]  # results.csv
    log = ResultsLog(tmp_path / "new" / "results.jsonl")
    for r in new:
        log.append(r)
    return base_path, log.path


def test_cli_exit_codes_text_html_and_csv(tmp_path, capsys):
    base, new = runs()
    base_path, new_path = write_pair(tmp_path, base, new)
    page, table = tmp_path / "compare.html", tmp_path / "compare.csv"
    args = ["compare", str(base_path), str(new_path), "--out", str(page), "--csv", str(table)]
    assert cli.main(args) == 1
    printed = capsys.readouterr().out
    assert "identity/eager/bfloat16/V32000/B1/k1/gaussian" in printed and "slower" in printed
    html = page.read_text()
    assert 'id="fig-compare-ratios"' in html and "FAIL: 3 case(s) regressed" in html
    assert html.count("<tr>") == 1 + 6 and "pass→fail" in html
    assert len(pd.read_csv(table)) == 6
    fine = [r for r in new if r["variant"] in ("full_softmax", "triton_fused") and r["vocab"] == 32000]
    base_path, new_path = write_pair(tmp_path / "ok", base, fine)
    assert cli.main(["compare", str(base_path), str(new_path), "--fail-on", "5%"]) == 0
    assert "1 faster, 1 same" in capsys.readouterr().out


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    base, new = runs()
    base_path, new_path = write_pair(tmp_path, base, new)
    assert cli.main(["compare", str(base_path), str(tmp_path / "missing.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.csv: no such file" in err
    assert cli.main(["compare", str(base_path), str(new_path), "--fail-on", "lots"]) == 2
    other = write_tables(to_frame([{**r, "device": "elsewhere"} for r in new]), tmp_path / "other")[0]
    assert cli.main(["compare", str(base_path), str(other)]) == 2
    assert "no case in common" in capsys.readouterr().err


def _bench_file(path: Path, rows: list[dict], with_extra: bool = True) -> Path:
    benchmarks = []
    for r in rows:
        median = r["median_us"] * 1e-6
        stats = {"median": median, "q1": median * 0.99, "q3": median * 1.01, "rounds": 50, "mean": median}
        extra = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        benchmarks.append(
            {"name": f"test_selection[{r['case_id']}]", "fullname": f"x.py::test_selection[{r['case_id']}]",
             "group": "g", "params": None, "extra_info": extra if with_extra else {}, "stats": stats}
        )  # fmt: skip
    path.write_text(json.dumps({"benchmarks": benchmarks, "commit_info": {"id": "abc"}, "version": "5.1.0"}))
    return path


def test_pytest_benchmark_json_against_the_suites_csv(tmp_path):
    base, new = runs()
    ok_new = [r for r in new if r["status"] == "ok"]
    base_csv = write_tables(to_frame(base), tmp_path)[0]
    bench = _bench_file(tmp_path / "bench.json", ok_new)
    result = compare(load_side(base_csv), load_side(bench), 0.05)
    assert outcomes(result)["identity/eager/bfloat16/V32000/B1/k1/gaussian"] == "slower"
    assert len(result.table) == 5


def test_plain_pytest_benchmark_files_match_by_name(tmp_path, capsys):
    base, _ = runs()
    ok = [r for r in base if r["variant"] != "triton_split"]
    slower = [{**r, "median_us": r["median_us"] * 1.5} for r in ok]
    first = _bench_file(tmp_path / "a.json", ok, with_extra=False)
    second = _bench_file(tmp_path / "b.json", slower, with_extra=False)
    assert load_side(first)["timing"].iloc[0].startswith("pytest-benchmark (quartiles")
    assert cli.main(["compare", str(first), str(second)]) == 1
    assert f"{len(ok)} slower" in capsys.readouterr().out

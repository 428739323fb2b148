"""`perfsuite compare`: matching, the noise rule (unstable rows, the rank test on raw samples, the p20/p80
band), parity and status regressions, inputs and their samples, the drift line, exit codes, page."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfsuite import cli
from perfsuite.compare.match import SECONDS, compare, drift_line, load_side, parse_threshold, text_table
from perfsuite.compare.rank_sum import ALPHA, mann_whitney_u, smallest_p_value
from perfsuite.measure import timing
from perfsuite.results.write import ResultsLog, to_frame, write_tables

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
        row("identity", 151936, 20.0, spread=0.2),  # slower by the medians, but unstable (spread 40 %)
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


# --- unstable rows, raw samples and the rank test, the machine-wide drift ------------------------------


def measured(variant: str, vocab: int, seconds: np.ndarray, run: str = "run-a", **extra: object) -> dict:
    """A row as a run writes it: median, p20/p80, spread and unstable from `seconds` (as timing does)."""
    samples = timing.Samples(tuple(float(s) for s in seconds), "host perf_counter")
    return {
        **row(variant, vocab, samples.median_us),
        "p20_us": samples.p20_us,
        "p80_us": samples.p80_us,
        "samples": len(seconds),
        "spread": samples.spread,
        "unstable": samples.unstable,
        "run": run,
        "settings": "abc123def456",
        **extra,
    }


def write_run(folder: Path, cases: list[tuple[dict, np.ndarray]]) -> Path:
    """A run folder: results.csv and samples.jsonl (as the runner writes them); returns results.csv."""
    csv_path = write_tables(to_frame([r for r, _ in cases]), folder)[0]
    log = ResultsLog(folder / "samples.jsonl")
    for r, seconds in cases:
        log.append({"case_id": r["case_id"], "run": r["run"], "seconds": [float(s) for s in seconds]})
    return csv_path


def lognormal(seed: int, n: int = 25, median_s: float = 20e-6, sigma: float = 0.12) -> np.ndarray:
    return np.random.default_rng(seed).lognormal(math.log(median_s), sigma, n)


def same_distribution() -> tuple[np.ndarray, np.ndarray]:
    """Two sets of 25 from one lognormal whose medians land 7.8 % apart by chance (seed 49)."""
    rng = np.random.default_rng(49)
    return rng.lognormal(math.log(20e-6), 0.12, 25), rng.lognormal(math.log(20e-6), 0.12, 25)


def with_seconds(r: dict, seconds: np.ndarray) -> dict:
    return {**r, SECONDS: tuple(seconds)}


def test_an_unstable_case_past_the_threshold_is_noisy_never_slower():
    base = [row("identity", 32000, 10.0), row("triton_fused", 32000, 10.0)]
    new = [row("identity", 32000, 13.0, unstable=True), row("triton_fused", 32000, 7.0, unstable="True")]
    result = compare(to_frame(base), to_frame(new), 0.05)
    got = outcomes(result)
    assert set(got.values()) == {"noisy"}  # the p20/p80 band alone would say slower and faster
    assert set(result.table["rule"]) == {"unstable"} and result.failures.empty
    a, b = lognormal(1), lognormal(2) * 2  # a clear 2x with samples: still noisy when a row is unstable
    result = compare(
        to_frame([with_seconds(measured("identity", 32000, a), a)]),
        to_frame([with_seconds(measured("identity", 32000, b, unstable=True), b)]),
    )
    assert result.table["outcome"].tolist() == ["noisy"] and result.table["p_value"].iloc[0] < 1e-6
    assert "40%!" in text_table(compare(to_frame(base), to_frame([row("identity", 32000, 13, spread=0.2)])))


def test_an_unstable_flag_is_derived_from_p20_p80_where_a_file_has_none():
    result = compare(
        to_frame([row("identity", 32000, 10.0)]), to_frame([row("identity", 32000, 13, spread=0.2)])
    )
    (rec,) = result.table.to_dict("records")
    assert rec["new_spread"] == pytest.approx(0.4) and rec["new_unstable"] and not rec["base_unstable"]
    assert rec["outcome"] == "noisy"


def test_samples_of_one_distribution_8_percent_apart_are_noisy_not_slower():
    a, b = same_distribution()
    base, new = measured("identity", 32000, a), measured("identity", 32000, b)
    assert 1.07 < new["median_us"] / base["median_us"] < 1.09  # past a 5 % threshold by the medians
    assert not base["unstable"] and not new["unstable"]  # so the rank test, not the unstable flag, decides
    result = compare(to_frame([with_seconds(base, a)]), to_frame([with_seconds(new, b)]), 0.05)
    (rec,) = result.table.to_dict("records")
    assert rec["rule"] == "rank test" and rec["outcome"] == "noisy"
    assert ALPHA < rec["p_value"] == pytest.approx(mann_whitney_u(a, b).p_value)
    assert (rec["base_raw_samples"], rec["new_raw_samples"]) == (25, 25)


def test_a_clear_2x_slowdown_with_samples_is_slower_with_a_tiny_p_value():
    a, b = lognormal(3), lognormal(4) * 2
    faster = lognormal(5) / 2
    base = [with_seconds(measured("identity", 32000, a), a), with_seconds(measured("identity", 151936, a), a)]
    new = [
        with_seconds(measured("identity", 32000, b), b),
        with_seconds(measured("identity", 151936, faster), faster),
    ]
    result = compare(to_frame(base), to_frame(new), 0.05)
    slower = result.table[result.table["outcome"] == "slower"].iloc[0]
    assert slower["case"].startswith("identity/eager/bfloat16/V32000/") and slower["rule"] == "rank test"
    assert slower["p_value"] < 1e-8 and slower["new_larger"] == 1.0
    assert outcomes(result)["identity/eager/bfloat16/V151936/B1/k1/gaussian"] == "faster"
    text = text_table(result)
    assert "p < 0.01" in text and "Mann-Whitney" in text and "e-" in text.split("slower")[0]


def test_the_rank_test_needs_enough_samples_else_the_band_decides():
    a, b = lognormal(6, n=4, sigma=0.05), lognormal(7, n=4, sigma=0.05) * 2  # 4 a side: p >= 2 / 70
    assert smallest_p_value(4, 4) > ALPHA > smallest_p_value(5, 5)
    result = compare(
        to_frame([with_seconds(measured("identity", 32000, a), a)]),
        to_frame([with_seconds(measured("identity", 32000, b), b)]),
    )
    (rec,) = result.table.to_dict("records")
    assert rec["rule"] == "p20/p80 band" and rec["p_value"] > ALPHA and rec["outcome"] == "slower"


def test_a_significant_rank_test_against_the_medians_direction_is_noisy():
    a, b = lognormal(14), lognormal(15) * 1.5  # the samples say slower ...
    b_row = with_seconds(row("identity", 32000, 10.0), a)
    n_row = with_seconds(row("identity", 32000, 8.0), b)  # ... the rows' medians say faster
    result = compare(to_frame([b_row]), to_frame([n_row]))
    (rec,) = result.table.to_dict("records")
    assert rec["p_value"] < ALPHA and rec["new_larger"] > 0.5 and rec["outcome"] == "noisy"


SCIPY_SETS = [
    (8, 8, 0.0, False),
    (25, 25, 0.05, False),
    (25, 25, 0.0, True),  # ties
    (9, 40, 0.1, True),
    (60, 13, 0.03, False),
    (200, 180, 0.02, True),
    (30, 30, 1.0, False),  # complete separation: p ~ 1e-11
]


@pytest.mark.parametrize(("n_base", "n_new", "shift", "ties"), SCIPY_SETS)
def test_the_rank_test_agrees_with_scipy(n_base, n_new, shift, ties):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(n_base * 1000 + n_new)
    base, new = rng.lognormal(0, 0.1, n_base), rng.lognormal(shift, 0.1, n_new)
    if ties:
        base, new = np.round(base, 1), np.round(new, 1)
        assert len(np.unique(np.concatenate([base, new]))) < n_base + n_new
    ours = mann_whitney_u(base, new)
    theirs = stats.mannwhitneyu(new, base, alternative="two-sided", method="asymptotic")
    assert ours.method == "asymptotic"
    assert ours.u_new == pytest.approx(theirs.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-6)


@pytest.mark.parametrize(("n_base", "n_new"), [(3, 3), (5, 5), (4, 9), (7, 7), (7, 30), (12, 2)])
def test_the_exact_rank_test_for_few_samples_agrees_with_scipy(n_base, n_new):
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(n_base * 100 + n_new)
    base, new = rng.normal(0, 1, n_base), rng.normal(1, 1, n_new)
    ours = mann_whitney_u(base, new)
    assert ours.method == "exact"
    exact = stats.mannwhitneyu(new, base, alternative="two-sided", method="exact")
    assert ours.p_value == pytest.approx(exact.pvalue, rel=1e-6)
    if math.comb(n_base + n_new, n_base) <= 5000:  # with ties: every split of the pooled values, counted
        tied_base, tied_new = np.round(base), np.round(new)

        def u_of(x, y, axis):
            return stats.mannwhitneyu(x, y, axis=axis, method="asymptotic").statistic

        permuted = stats.permutation_test(
            (tied_new, tied_base), u_of, permutation_type="independent", n_resamples=np.inf
        )
        assert mann_whitney_u(tied_base, tied_new).p_value == pytest.approx(permuted.pvalue, rel=1e-6)


def test_the_rank_test_on_identical_samples_and_bad_input():
    assert mann_whitney_u([1.0] * 9, [1.0] * 12).p_value == 1.0
    assert mann_whitney_u([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).p_value == 1.0
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError):
        mann_whitney_u([1.0, math.nan], [1.0])


def test_load_side_picks_up_samples_beside_the_results(tmp_path):
    a, b = lognormal(8), lognormal(9)
    first, second = measured("identity", 32000, a), measured("triton_fused", 32000, b)
    csv_path = write_run(tmp_path / "run", [(first, a), (second, b)])
    with (tmp_path / "run" / "samples.jsonl").open("a") as f:
        f.write('{"case_id": "identity/eager/bfloat16/V32000/B1/k1/gaussian", "run": "run-a", "seco')  # torn
    for path in (csv_path, tmp_path / "run"):  # the results file, or the run folder
        side = load_side(path).set_index("variant")
        assert side.loc["identity", SECONDS] == pytest.approx(tuple(a))
        assert side.loc["triton_fused", SECONDS] == pytest.approx(tuple(b))
    alone = write_tables(to_frame([first]), tmp_path / "alone")[0]  # no samples.jsonl: no seconds
    assert load_side(alone)[SECONDS].tolist() == [None]


def test_two_runs_on_one_side_never_mix_their_samples(tmp_path):
    a, b = lognormal(10), lognormal(11) * 2
    earlier, later = measured("identity", 32000, a, run="run-a"), measured("identity", 32000, b, run="run-b")
    csv_path = write_run(tmp_path / "pooled", [(earlier, a), (later, b)])
    side = load_side(csv_path)
    assert [len(s) for s in side[SECONDS]] == [25, 25]
    assert side.set_index("run").loc["run-b", SECONDS] == pytest.approx(tuple(b))
    base = write_run(tmp_path / "base", [(measured("identity", 32000, a, run="run-0"), a)])
    result = compare(load_side(base), side)
    (rec,) = result.table.to_dict("records")
    assert result.duplicates == 1 and rec["new_run"] == "run-b"  # the last row, with its own samples
    assert rec["p_value"] == pytest.approx(mann_whitney_u(a, b).p_value) and rec["outcome"] == "slower"
    other = write_tables(to_frame([{**later, "run": "run-c"}]), tmp_path / "other")[0]
    (tmp_path / "other" / "samples.jsonl").write_text(
        json.dumps({"case_id": later["case_id"], "run": "run-b", "seconds": list(b)}) + "\n"
    )
    assert load_side(other)[SECONDS].tolist() == [None]  # samples of another run are not this row's


def test_the_drift_line_says_when_the_whole_run_moved():
    base = [row("identity", v, 10.0) for v in (32000, 65536, 151936)]
    same = [row("identity", v, 10.3) for v in (32000, 65536, 151936)]
    result = compare(to_frame(base), to_frame(same), 0.05)
    assert result.drift == pytest.approx(1.03)
    line = drift_line(result)
    assert "all 3 timed cases: new/base median 1.030×" in line and "moved together" not in line
    assert line in text_table(result)
    busy = [{**r, "other_cores": 1.5} for r in (row("identity", v, 12.0) for v in (32000, 65536, 151936))]
    slow = compare(to_frame([{**r, "other_cores": 0.1} for r in base]), to_frame(busy), 0.05)
    line = drift_line(slow)
    assert "median 1.200×" in line and "moved together" in line and "0.1 → 1.5 cores busy" in line
    assert len(slow.failures) == 3  # said, not subtracted


def test_cli_exits_0_on_noisy_only_and_1_on_a_2x_slowdown(tmp_path, capsys):
    a, b = same_distribution()
    c, d = lognormal(12), lognormal(13, sigma=0.3)  # d: spread about 50 %, unstable
    assert timing.Samples(tuple(d), "x").unstable
    base = write_run(
        tmp_path / "base", [(measured("identity", 32000, a), a), (measured("argmax_ones", 32000, c), c)]
    )
    noisy = write_run(
        tmp_path / "noisy",
        [
            (measured("identity", 32000, b, run="run-b"), b),
            (measured("argmax_ones", 32000, d * 1.3, run="run-b"), d * 1.3),
        ],
    )
    page = tmp_path / "compare.html"
    assert cli.main(["compare", str(base), str(noisy), "--fail-on", "5%", "--out", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "2 cases matched: 2 noisy;" in printed
    assert "all 2 timed cases: new/base median" in printed
    html = page.read_text()
    assert "PASS: no regression." in html and "Mann-Whitney" in html and "new/base median" in html
    write_run(tmp_path / "doubled", [(measured("identity", 32000, 2 * b, run="run-c"), 2 * b)])
    assert cli.main(["compare", str(tmp_path / "base"), str(tmp_path / "doubled"), "--fail-on", "5%"]) == 1
    printed = capsys.readouterr().out
    assert "1 slower" in printed and "1 only in" in printed


# --- the run-to-run noise floor --------------------------------------------------------------------------


def drifting_runs(seed: int, cases: int, drift_sigma: float, shifted: dict[int, float]) -> tuple[list, list]:
    """`cases` identity and full_softmax cases whose medians drift apart between the runs by a lognormal
    factor of `drift_sigma` (the machine), each case clear of its own sampling noise (25 tight samples);
    `shifted` multiplies the new run of some identity cases (a real change)."""
    rng = np.random.default_rng(seed)
    base, new = [], []
    for variant in ("identity", "full_softmax"):
        for i in range(cases):
            vocab = 1000 + i
            drift = rng.lognormal(0.0, drift_sigma) * (shifted.get(i, 1.0) if variant == "identity" else 1.0)
            a = lognormal(seed * 1000 + i, sigma=0.02)
            b = lognormal(seed * 1000 + i + 500, sigma=0.02) * drift
            base.append(with_seconds(measured(variant, vocab, a), a))
            new.append(with_seconds(measured(variant, vocab, b), b))
    return base, new


def test_changes_within_the_run_to_run_noise_are_noisy_not_slower():
    base, new = drifting_runs(seed=11, cases=30, drift_sigma=0.10, shifted={})
    result = compare(to_frame(base), to_frame(new), 0.05)
    timed = result.timed
    # every case is "significant" by its own samples, but two runs of this machine drift ~10 % apart
    assert (timed["p_value"] < ALPHA).mean() > 0.5
    baseline = timed[timed["variant"] == "full_softmax"]
    assert not baseline["anchored"].any() and 0.07 < baseline["noise"].iloc[0] < 0.14
    assert set(timed["outcome"]) <= {"noisy", "same"}
    assert "run-to-run noise" in drift_line(result) and "identity" in drift_line(result)


def test_a_2x_slowdown_of_one_variant_stands_out_of_the_run_to_run_noise():
    shifted = {i: 2.0 for i in range(30)}  # identity 2x slower everywhere
    base, new = drifting_runs(seed=12, cases=30, drift_sigma=0.10, shifted=shifted)
    result = compare(to_frame(base), to_frame(new), 0.05)
    timed = result.timed
    identity = timed[timed["variant"] == "identity"]
    assert identity["outcome"].eq("slower").all()  # its own noise, around its own median, stays ~10 %
    assert set(timed.loc[timed["variant"] == "full_softmax", "outcome"]) <= {"noisy", "same"}


def test_without_enough_cases_there_is_no_noise_floor():
    base, new = drifting_runs(seed=13, cases=4, drift_sigma=0.10, shifted={0: 2.0})
    result = compare(to_frame(base), to_frame(new), 0.05)
    assert (result.table["noise"] == 0).all() and result.noise_text() == ""
    assert outcomes(result)["identity/eager/bfloat16/V1000/B1/k1/gaussian"] == "slower"


def test_a_shape_whose_variants_all_moved_together_is_noisy():
    """The variants of a shape are sampled in turn: a slow stretch of the machine moves them all, and the
    change anchored to the baseline cancels it; the same move of one variant alone is slower."""
    base, new = drifting_runs(seed=14, cases=30, drift_sigma=0.03, shifted={})
    window = [i for i, r in enumerate(new) if r["vocab"] == 1005]  # identity and full_softmax of one shape
    for i in window:
        new[i] = with_seconds(
            measured(new[i]["variant"], 1005, np.array(new[i][SECONDS]) * 1.5),
            np.array(new[i][SECONDS]) * 1.5,
        )
    result = compare(to_frame(base), to_frame(new), 0.05)
    moved = result.table[result.table["vocab"] == 1005].set_index("variant")
    assert moved.loc["identity", "anchored"] and abs(moved.loc["identity", "judged"]) < 0.1
    assert moved.loc["identity", "outcome"] == "noisy"
    alone = [{**r} for r in new]
    for i in window:
        if alone[i]["variant"] == "full_softmax":
            alone[i] = next(r for r in base if r["case_id"] == alone[i]["case_id"])
    result = compare(to_frame(base), to_frame(alone), 0.05)
    assert outcomes(result)["identity/eager/bfloat16/V1005/B1/k1/gaussian"] == "slower"

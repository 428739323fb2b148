"""`perfsuite compare`: matching, the decision table row by row, the Hodges-Lehmann shift and its interval,
the parity and status check, inputs and their samples, the drift line, exit codes, the text and the page."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import measured, row, with_seconds, write_run

from perfsuite import cli
from perfsuite.commands.compare import parse_threshold
from perfsuite.compare import rule
from perfsuite.compare.match import SECONDS, compare, load_side
from perfsuite.report.compare_page import drift_line, text_table
from perfsuite.results.write import ResultsLog, to_frame, write_tables

ROOT = Path(__file__).resolve().parent.parent


def runs() -> tuple[list[dict], list[dict]]:
    base = [
        row("identity", 32000, 10.0),  # slower: the p20/p80 band clear of 1 and of the floor
        row("identity", 151936, 20.0, spread=0.2),  # 10 % slower by the medians, within its floor
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


def test_outcomes_and_the_parity_and_status_check():
    base, new = runs()
    result = compare(to_frame(base), to_frame(new), 0.05)
    assert outcomes(result) == {
        "identity/eager/bfloat16/V32000/B1/k1/gaussian": "slower",
        "identity/eager/bfloat16/V151936/B1/k1/gaussian": "cannot tell",
        "triton_fused/eager/bfloat16/V32000/B1/k1/gaussian": "faster",
        "triton_fused/eager/bfloat16/V151936/B1/k1/gaussian": "same",
        "triton_split/eager/bfloat16/V151936/B1/k1/gaussian": "not comparable",
        "full_softmax/eager/bfloat16/V32000/B1/k1/gaussian": "same",
    }
    checks = dict(zip(result.table["case"], result.table["check"], strict=True))
    assert checks["triton_fused/eager/bfloat16/V151936/B1/k1/gaussian"] == "parity worse"
    assert checks["triton_split/eager/bfloat16/V151936/B1/k1/gaussian"] == "broken"
    assert (result.base_only, result.new_only) == (1, 1)
    assert list(result.table["outcome"][:3]) == ["slower", "same", "not comparable"]  # failures first
    assert len(result.failures) == 3
    slower = result.table.iloc[0]
    assert slower["witness"] == "own time, p20/p80" and slower["shift"] == pytest.approx(1.1)
    assert slower["low"] == pytest.approx(11 * 0.98 / 10.2) and slower["high"] == pytest.approx(
        11 * 1.02 / 9.8
    )
    assert slower["floor"] == pytest.approx(1.02 / 0.98)  # sqrt(base p80/p20 x new p80/p20)
    text = text_table(result)
    assert "1 slower, 1 cannot tell at this threshold (half could be judged at " in text
    assert "), 1 faster, 2 same, 1 not comparable; 1 broken; 1 parity worse" in text
    assert "pass→fail" in text and "1 only in base" in text and "95 % interval" in text


def test_a_bigger_threshold_or_no_spread():
    base, new = runs()
    loose = compare(to_frame(base), to_frame(new), 0.15)
    assert outcomes(loose)["identity/eager/bfloat16/V32000/B1/k1/gaussian"] == "same"
    no_spread = [
        [{k: v for k, v in r.items() if k not in ("p20_us", "p80_us")} for r in rows] for rows in runs()
    ]
    plain = compare(to_frame(no_spread[0]), to_frame(no_spread[1]), 0.05)
    assert outcomes(plain)["identity/eager/bfloat16/V151936/B1/k1/gaussian"] == "slower"  # the medians alone


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


# --- the decision table, row by row, from built samples ----------------------------------------------


def rounds(seed: int, n: int = 25, sigma: float = 0.02, factor: float = 1.0) -> np.ndarray:
    return factor * np.random.default_rng(seed).lognormal(math.log(20e-6), sigma, n)


def judged(base: np.ndarray, new: np.ndarray, threshold: float = 0.05, **extra: object) -> dict:
    """The compare record of one case sampled `base` then `new`."""
    first = with_seconds(measured("identity", 32000, base), base)
    second = {**with_seconds(measured("identity", 32000, new, run="run-b"), new), **extra}
    (record,) = compare(to_frame([first]), to_frame([second]), threshold).table.to_dict("records")
    return record


ROW_CASES = {
    "slower": lambda: judged(rounds(1), rounds(2, factor=1.2)),
    "faster": lambda: judged(rounds(3), rounds(4, factor=0.8)),
    "same": lambda: judged(
        rounds(5), rounds(6, factor=1.03)
    ),  # its interval clear of 1: same by the threshold
    "cannot tell": lambda: judged(rounds(7, n=400, sigma=0.15), rounds(8, n=400, sigma=0.15, factor=1.12)),
    "not comparable": lambda: judged(rounds(9), rounds(10), status="error", reason="boom"),
}
"""A case for each row of `rule.ROWS`."""


@pytest.mark.parametrize("name", list(ROW_CASES))
def test_each_row_of_the_decision_table_and_a_rule_without_it(name, monkeypatch):
    assert ROW_CASES[name]()["outcome"] == name
    monkeypatch.setattr(rule, "ROWS", tuple(r for r in rule.ROWS if r[0] != name))
    try:
        without = ROW_CASES[name]()["outcome"]
    except StopIteration:  # no row left for it
        without = None
    assert without != name


def test_what_each_figure_of_a_row_decides():
    same = ROW_CASES["same"]()
    assert same["low"] > 1 and same["shift"] < 1.05  # significant, but within the threshold
    noisy = ROW_CASES["cannot tell"]()
    assert noisy["low"] > 1 and 1.05 < noisy["shift"] < noisy["floor"]  # past the threshold, within the floor
    few = judged(rounds(11, n=2), rounds(12, n=2, factor=2))  # 2 rounds a side: no interval at the 95 % level
    assert (few["low"], few["high"], few["outcome"]) == (0.0, math.inf, "cannot tell")
    holds_one = judged(rounds(15, n=4, sigma=0.08), rounds(115, n=4, sigma=0.08, factor=1.12))
    assert holds_one["low"] < 1 and holds_one["shift"] > max(1.05, holds_one["floor"])  # past both, but
    assert holds_one["outcome"] == "cannot tell"  # its interval holds 1
    assert judged(rounds(1), rounds(2, factor=1.2), threshold=0.25)["outcome"] == "same"
    a, b = rounds(15, sigma=0.12), rounds(16, sigma=0.12, factor=2.0)  # a wide spread: a 2x clears its floor
    assert judged(a, b)["outcome"] == "slower" and judged(b, a)["outcome"] == "faster"


def scattered(seed: int, factor: float = 1.0, cases: int = 20) -> pd.DataFrame:
    """Two runs of `cases` cases of one variant whose medians moved apart by a between-run factor each
    (10 % robust SD) far above their rounds' own scatter (2 %); the new run `factor` times slower."""
    moved = np.random.default_rng(seed).lognormal(0.0, 0.1, cases) * factor
    base = [with_seconds(measured("identity", 1000 + i, r := rounds(i)), r) for i in range(cases)]
    new = [
        with_seconds(measured("identity", 1000 + i, r := rounds(100 + i, factor=m), run="run-b"), r)
        for i, m in enumerate(moved)
    ]
    return compare(to_frame(base), to_frame(new), 0.05).table


def test_the_floor_is_at_least_the_variant_run_to_run_scatter(monkeypatch):
    """Cases whose two runs differ by more than their rounds say, as much as the variant's other cases do,
    are noisy, not slower; a variant that moved as a whole (1.3x) has no floor: its cases' intervals
    and the threshold decide. Without the run's floors, the first are called slower and faster."""
    aa, slowed = scattered(1), scattered(2, factor=1.3)
    assert set(aa["outcome"]) <= {"same", "cannot tell"} and (aa["floor"] > 1.25).all()
    assert (slowed["floor"] == 1).all()
    assert set(slowed.loc[slowed["low"] > 1, "outcome"]) <= {"slower", "same"}
    assert slowed["outcome"].eq("slower").mean() > 0.8
    rounds_only = lambda table, threshold, shapes: table[["floor"]].assign(noise=table["floor"])  # noqa: E731
    monkeypatch.setattr("perfsuite.compare.rule.run_floors", rounds_only)
    assert {"slower", "faster"} <= set(scattered(1)["outcome"])


def test_the_decision_table_is_written_once_and_shown_in_the_docs():
    assert rule.DECISION_TABLE in rule.__doc__
    assert rule.DECISION_TABLE in (ROOT / "docs" / "comparing.md").read_text(encoding="utf-8")
    assert len(rule.ROWS) <= 5 and {o for o, _, _ in rule.ROWS} == {*ROW_CASES}


def test_the_compare_help_shows_the_decision_table(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compare", "--help"])
    shown = capsys.readouterr().out
    assert all(line in shown for line in rule.DECISION_TABLE.splitlines()), shown


@pytest.mark.parametrize(
    ("n_base", "n_new", "shift"), [(6, 6, 0.5), (25, 25, 0.1), (9, 40, 0.0), (200, 180, 0.05)]
)
def test_the_shift_and_its_interval_agree_with_scipys_rank_test(n_base, n_new, shift):
    """The interval is the shifts the two-sided Mann-Whitney test does not reject at 1 - LEVEL: scipy's test
    rejects just outside each end and not just inside it."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(n_base * 1000 + n_new)
    base, new = rng.normal(0, 0.1, n_base), rng.normal(shift, 0.1, n_new)
    estimate, low, high = rule.hodges_lehmann(base, new)
    diffs = np.sort(np.subtract.outer(new, base), axis=None)
    assert estimate == pytest.approx(np.median(diffs))

    def p(c: float) -> float:
        return stats.mannwhitneyu(new - c, base, use_continuity=False, method="asymptotic").pvalue

    alpha = 1 - rule.LEVEL
    for end, outward in ((low, -1), (high, 1)):
        at = int(np.searchsorted(diffs, end))
        inside, outside = (diffs[at] + diffs[at - outward]) / 2, (diffs[at] + diffs[at + outward]) / 2
        assert p(inside) >= alpha > p(outside)


# --- inputs and their samples ----------------------------------------------------------------------------


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
    assert (
        'id="fig-compare-shifts"' in html and "FAIL: 3 case(s) and 0 variant(s) or group(s) regressed" in html
    )
    assert html.count("<tr>") == (1 + 5) + 1 + (1 + 6) and "pass→fail" in html  # table, no group, the cases
    assert "low &gt; 1 and shift &gt; max(1 + threshold, floor)" in html
    written = pd.read_csv(table)
    assert len(written) == 6 and {"shift", "low", "high", "floor", "outcome", "check"} <= set(written)
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
    empty = tmp_path / "empty.csv"  # a run whose --only matched nothing: its header alone
    empty.write_text(base_path.read_text().splitlines()[0] + "\n")
    assert cli.main(["compare", str(empty), str(new_path)]) == 2
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


def test_load_side_picks_up_samples_beside_the_results(tmp_path):
    a, b = rounds(8), rounds(9)
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
    a, b = rounds(10), rounds(11, factor=2)
    earlier, later = measured("identity", 32000, a, run="run-a"), measured("identity", 32000, b, run="run-b")
    csv_path = write_run(tmp_path / "pooled", [(earlier, a), (later, b)])
    side = load_side(csv_path)
    assert [len(s) for s in side[SECONDS]] == [25, 25]
    assert side.set_index("run").loc["run-b", SECONDS] == pytest.approx(tuple(b))
    base = write_run(tmp_path / "base", [(measured("identity", 32000, a, run="run-0"), a)])
    result = compare(load_side(base), side)
    (rec,) = result.table.to_dict("records")
    assert result.duplicates == 1 and rec["new_run"] == "run-b"  # the last row, with its own samples
    assert rec["witness"] == "own time, 25/25 rounds" and rec["outcome"] == "slower"
    assert rec["shift"] == pytest.approx(np.exp(np.median(np.subtract.outer(np.log(b), np.log(a)))))
    other = write_tables(to_frame([{**later, "run": "run-c"}]), tmp_path / "other")[0]
    (tmp_path / "other" / "samples.jsonl").write_text(
        json.dumps({"case_id": later["case_id"], "run": "run-b", "seconds": list(b)}) + "\n"
    )
    assert load_side(other)[SECONDS].tolist() == [None]  # samples of another run are not this row's


def test_without_the_reference_the_drift_line_says_the_whole_run_moved():
    base = [row("identity", v, 10.0) for v in (32000, 65536, 151936)]
    same = compare(to_frame(base), to_frame([row("identity", v, 10.3) for v in (32000, 65536, 151936)]))
    line = drift_line(same)
    assert line.startswith("drift: no in-turn reference in both runs; the cases' own times +3.0 %")
    assert line in text_table(same)
    slow = compare(to_frame(base), to_frame([row("identity", v, 12.0) for v in (32000, 65536, 151936)]))
    assert "+20.0 %" in drift_line(slow) and len(slow.failures) == 3  # said, not taken out


def test_cli_exits_0_on_noisy_only_and_1_on_a_2x_slowdown(tmp_path, capsys):
    rng = np.random.default_rng(49)  # one lognormal: two sets whose medians land 7.8 % apart by chance (same)
    a, b = rng.lognormal(math.log(20e-6), 0.12, 25), rng.lognormal(math.log(20e-6), 0.12, 25)
    c, d = rounds(12), rounds(13, sigma=0.3, factor=1.1)  # d: spread about 50 %
    base = write_run(
        tmp_path / "base", [(measured("identity", 32000, a), a), (measured("argmax_ones", 32000, c), c)]
    )
    noisy = write_run(
        tmp_path / "noisy",
        [
            (measured("identity", 32000, b, run="run-b"), b),
            (measured("argmax_ones", 32000, d, run="run-b"), d),
        ],
    )
    page = tmp_path / "compare.html"
    assert cli.main(["compare", str(base), str(noisy), "--fail-on", "5%", "--out", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "2 cases matched: 2 cannot tell at this threshold (half could be judged at 24.5 %" in printed
    assert "the cases' own times" in printed
    html = page.read_text()
    assert (
        "PASS: no case, variant or group confirmed slower." in html
        and "Hodges-Lehmann" in html
        and "drift: " in html
    )
    write_run(tmp_path / "doubled", [(measured("identity", 32000, 2 * b, run="run-c"), 2 * b)])
    assert cli.main(["compare", str(tmp_path / "base"), str(tmp_path / "doubled"), "--fail-on", "5%"]) == 1
    printed = capsys.readouterr().out
    assert "1 slower" in printed and "1 only in" in printed

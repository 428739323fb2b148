"""The in-turn reference (issue 24): an exp of each case's logits sampled in the same rounds as its variants,
and `compare` taking the machine's drift it saw (as far as the run's cases agree) out of every variant,
full_softmax included. The mechanism of the
issue's pair 1 (the machine about 5 % slower in the second run, full_softmax moving as a whole) is rebuilt
from synthetic rows and samples, without timing anything; one tiny real CPU run checks the columns and the
samples log."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_compare import measured, with_seconds
from test_run import run

from perfsuite import cli
from perfsuite.cases import protocol
from perfsuite.compare import run_noise
from perfsuite.compare.match import REF_SECONDS, SECONDS, compare, drift_line, load_side, text_table
from perfsuite.compare.rank_sum import ALPHA
from perfsuite.core.settings import Timing
from perfsuite.measure import timing
from perfsuite.report.compare_page import build_compare_page
from perfsuite.results.read import load_samples
from perfsuite.results.write import ResultsLog, to_frame, write_tables

VARIANTS = {"full_softmax": 60.0, "argmax_ones": 20.0, "identity": 25.0, "identity_engine_order": 26.0}
"""The quick sweep's eager variants and a median time each (microseconds) at the smallest shape."""
REF_US = 15.0
ROOT = Path(__file__).resolve().parent.parent
SHAPES = 30
ROUNDS = 25


def sampled_run(
    seed: int,
    machine: float,
    slower: dict[str, float] | None = None,
    run_label: str = "run-a",
    reference: float = 1.0,
    spells: dict[int, float] | None = None,
    ref_spells: dict[int, float] | None = None,
) -> list[tuple[dict, np.ndarray, np.ndarray]]:
    """One run's rows with their samples and the reference's: each shape's variants and reference sampled
    in the same rounds, every round's figures moved by one machine factor (2 % round to round), each
    sample by its own 1 %; `machine` scales the whole run, `slower` some variants' code, `reference` the
    reference alone (a copy that answers the machine's load unlike the selectors); `spells` the rounds of
    some shapes (by index), everything sampled in them (a machine faster or slower in those seconds),
    `ref_spells` the reference alone in some shapes' rounds."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in range(SHAPES):
        vocab, size = 1000 + shape, 1 + shape / 10
        rounds = machine * (spells or {}).get(shape, 1.0) * rng.lognormal(0.0, 0.02, ROUNDS)
        ref = reference * (ref_spells or {}).get(shape, 1.0) * REF_US * 1e-6 * size * rounds
        ref = ref * rng.lognormal(0.0, 0.01, ROUNDS)
        for variant, us in VARIANTS.items():
            factor = (slower or {}).get(variant, 1.0)
            own = us * 1e-6 * size * factor * rounds * rng.lognormal(0.0, 0.01, ROUNDS)
            out.append((as_written(variant, vocab, own, ref, run_label), own, ref))
    return out


def as_written(variant: str, vocab: int, own: np.ndarray, ref: np.ndarray, run_label: str) -> dict:
    """A row as a run with the reference writes it (`kernel.reference_figures`' columns)."""
    own_s, ref_s = timing.Samples(tuple(own), "host perf_counter"), timing.Samples(tuple(ref), "host")
    ratio = timing.paired_ratio(own_s, ref_s)
    return {
        **measured(variant, vocab, own, run=run_label),
        "ref_median_us": ref_s.median_us,
        "ref_p20_us": ref_s.p20_us,
        "ref_p80_us": ref_s.p80_us,
        "vs_ref": ratio.median,
        "vs_ref_p20": ratio.p20,
        "vs_ref_p80": ratio.p80,
        "reference": "logits exp, host perf_counter",
    }


def frame(cases: list[tuple[dict, np.ndarray, np.ndarray]], reference: bool = True) -> pd.DataFrame:
    """The rows and samples as `load_side` gives them; `reference=False`: as an older run wrote them."""
    rows = []
    for r, own, ref in cases:
        if not reference:
            r = {k: v for k, v in r.items() if not k.startswith(("ref_", "vs_ref", "reference"))}
        rows.append({**with_seconds(r, own), REF_SECONDS: tuple(ref) if reference else None})
    return to_frame(rows)


def outcome_of(result) -> pd.Series:
    return result.table.set_index("case")["outcome"]


def test_a_machine_5_percent_slower_in_the_second_run_compares_clean():
    base, new = sampled_run(1, 1.0), sampled_run(2, 1.055, run_label="run-b")
    old = compare(frame(base, reference=False), frame(new, reference=False), 0.05)
    flagged = old.table[old.table["outcome"] == "slower"]
    # today's rule fails it: full_softmax has no anchor, and every variant shifted as a whole past 5 %
    assert (flagged["variant"] == "full_softmax").sum() > SHAPES / 2 and len(old.failures) == len(flagged)
    result = compare(frame(base), frame(new), 0.05)
    assert result.table["by_reference"].all() and result.failures.empty
    assert set(result.table["outcome"]) <= {"same", "noisy"}
    assert result.drift == pytest.approx(1.055, abs=0.01) and result.ref_drift == pytest.approx(
        1.055, abs=0.01
    )
    full = result.table[result.table["variant"] == "full_softmax"]
    assert (full["ratio"] > 1.03).all() and (abs(full["anchored_ratio"] - 1) < 0.03).all()
    line = drift_line(result)
    assert "reference (logits exp, sampled in turn with each case): new/base median 1.05" in line
    assert "without the reference" not in line
    text = text_table(result)
    assert "vs ref" in text and "slower" not in text.split("rule:")[0]


def test_full_softmax_10_percent_slower_is_flagged_and_nothing_else():
    base = sampled_run(3, 1.0)
    for machine in (1.0, 1.05):  # on a quiet machine, and on one 5 % slower in the second run
        new = sampled_run(4, machine, {"full_softmax": 1.10}, run_label="run-b")
        result = compare(frame(base), frame(new), 0.05)
        got = result.table.groupby("variant")["outcome"].agg(set).to_dict()
        assert got.pop("full_softmax") == {"slower"}, machine
        assert all(outcomes <= {"same", "noisy"} for outcomes in got.values()), (machine, got)
        full = result.table[result.table["variant"] == "full_softmax"]
        assert (full["rule"] == "rank test").all() and (full["p_value"] < 1e-6).all()
        assert full["anchored_ratio"].median() == pytest.approx(1.10, abs=0.02)


def test_a_machine_faster_in_the_second_run_does_not_hide_a_slower_full_softmax():
    """A slowed pair of the measurement: the machine 15 % faster in the new run, full_softmax 1.18x slower
    in its code, so its absolute change is nil; the rank test judges the samples less the drift."""
    base = sampled_run(13, 1.0)
    new = sampled_run(14, 0.85, {"full_softmax": 1.18}, run_label="run-b")
    result = compare(frame(base), frame(new), 0.05)
    full = result.table[result.table["variant"] == "full_softmax"]
    assert (abs(full["ratio"] - 1) < 0.05).all()  # absolute: no change at all
    assert set(full["outcome"]) == {"slower"} and (full["p_value"] < 1e-6).all()
    others = result.table[result.table["variant"] != "full_softmax"]
    assert set(others["outcome"]) <= {"same", "noisy"}


def test_a_fast_spell_in_a_case_rounds_hides_no_slowdown_and_makes_nothing_faster(tmp_path):
    """The measured misses: on a shared machine the new run was 20 % faster in the seconds a few shapes
    were sampled, so full_softmax 1.2x slower there came out about 0.96x and was "same", while its
    neighbours sampled in those seconds came out 0.8x, "faster" against a slower baseline. The reference
    sampled in the same rounds moved with them: against it full_softmax is 1.2x and the others unchanged."""
    spells = {3: 0.8, 11: 0.8, 19: 0.8, 27: 0.8}
    base = sampled_run(21, 1.0)
    new = sampled_run(22, 1.0, {"full_softmax": 1.2}, run_label="run-b", spells=spells)
    result = compare(frame(base), frame(new), 0.05)
    table = result.table.set_index("vocab")
    full = table[table["variant"] == "full_softmax"]
    in_spells = full.loc[[1000 + shape for shape in spells]]
    assert (abs(in_spells["ratio"] - 0.96) < 0.03).all()  # the run alone sees no change
    assert set(in_spells["outcome"]) == {"slower"} and set(in_spells["confirmed_by"]) == {"reference"}
    assert set(full["outcome"]) == {"slower"}
    assert set(full.drop(in_spells.index)["confirmed_by"]) == {"run and reference"}
    others = table[table["variant"] != "full_softmax"]
    assert (others.loc[[1000 + shape for shape in spells], "ratio"] < 0.85).all()
    assert set(others["outcome"]) <= {"same", "noisy"}
    # the table and the page say which witness confirmed each case
    text = text_table(result, limit=200)
    assert "p vs ref" in text and "confirmed by" in text and " reference\n" in text
    page = build_compare_page(result, tmp_path / "compare.html").read_text(encoding="utf-8")
    assert page.count('title="confirmed by the reference witness;') == len(spells)
    assert "<th>p vs ref</th>" in page


def test_aa_pairs_reads_the_witnesses_from_the_compare_table(tmp_path):
    """`scripts/aa_pairs.py`'s per-pair figures, from the table `perfsuite compare --csv` writes: the
    slower cases by witness, full_softmax's stable ones, the faster ones."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("aa_pairs", ROOT / "scripts" / "aa_pairs.py")
    aa_pairs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aa_pairs)
    spells = {3: 0.8, 11: 0.8}
    new = sampled_run(22, 1.0, {"full_softmax": 1.2}, run_label="run-b", spells=spells)
    result = compare(frame(sampled_run(21, 1.0)), frame(new), 0.05)
    result.table.to_csv(tmp_path / "pair.csv", index=False)
    got = aa_pairs.figures(tmp_path / "pair.csv")
    assert got["slower"] == got["full_slower"] == got["full_stable_slower"] == got["full_stable"] == SHAPES
    assert got["by reference"] == len(spells) and got["faster"] == 0
    assert got["by run and reference"] + got["by run"] == SHAPES - len(spells)


def test_of_two_witnesses_confirming_opposite_changes_the_floor_backs_one_or_none():
    """Opposite confirmations: the new run 24 % faster in two shapes' rounds (the run sees full_softmax
    1.2x slower as 0.91x, the reference 1.2x; as in the measured misses), and the reference hit alone in
    one shape's rounds (1.4x: the run sees full_softmax 1.2x, the reference 0.86x). The floor
    backs the one its variant's whole shift agrees with; for one case changed alone, it backs neither."""
    base = sampled_run(23, 1.0)
    spells = {3: 0.76, 27: 0.76}
    new = sampled_run(24, 1.0, {"full_softmax": 1.2}, run_label="run-b", spells=spells, ref_spells={5: 1.4})
    table = compare(frame(base), frame(new), 0.05).table.set_index(["variant", "vocab"])
    full = table.loc["full_softmax"]
    assert (full.loc[[1003, 1027], "judged_ratio"] < 0.95).all()
    assert (full.loc[[1003, 1027], "p_value"] < ALPHA).all()  # the run confirms faster
    assert set(full.loc[[1003, 1027], "confirmed_by"]) == {"reference"}
    hit = full.loc[1005]
    assert hit["judged_ratio"] > 1.15 and hit["ref_judged_ratio"] < 0.9 and hit["ref_p_value"] < ALPHA
    assert hit["confirmed_by"] == "run"
    assert set(full["outcome"]) == {"slower"}
    assert set(table.drop(index="full_softmax", level="variant")["outcome"]) <= {"same", "noisy"}
    # one case of full_softmax 1.3x slower alone, its reference hit 1.6x: neither change is backed
    new = sampled_run(24, 1.0, run_label="run-b", ref_spells={5: 1.6})
    new[5 * len(VARIANTS)] = slowed_case(new[5 * len(VARIANTS)], 1.3)
    one = compare(frame(base), frame(new), 0.05).table.set_index(["variant", "vocab"])
    case = one.loc[("full_softmax", 1005)]
    assert case["judged_ratio"] > 1.25 and case["p_value"] < ALPHA
    assert case["ref_judged_ratio"] < 0.85 and case["ref_p_value"] < ALPHA
    assert case["outcome"] == "noisy" and one["outcome"].isin(["same", "noisy"]).all()


def slowed_case(
    case: tuple[dict, np.ndarray, np.ndarray], factor: float
) -> tuple[dict, np.ndarray, np.ndarray]:
    """A `sampled_run` case with its own samples `factor` times slower (its reference's unchanged)."""
    row, own, ref = case
    own = own * factor
    return as_written(row["variant"], row["vocab"], own, ref, row["run"]), own, ref


def test_the_reference_witness_is_taken_less_the_run_wide_bias_of_the_reference():
    """The reference answering the machine unlike the selectors (every case 1.1x over it in the new run)
    moves no case: each case's change over the reference is judged less the run's median of them."""
    base = sampled_run(25, 1.0)
    new = sampled_run(26, 1.0, run_label="run-b", reference=1 / 1.1)
    result = compare(frame(base), frame(new), 0.05)
    assert result.table["anchored_ratio"].median() == pytest.approx(1.1, abs=0.01)
    assert (abs(result.table["ref_judged_ratio"] - 1) < 0.03).all()
    assert result.failures.empty and set(result.table["outcome"]) <= {"same", "noisy"}


def test_a_baseline_that_moved_alone_in_one_shape_does_not_make_its_variants_slower():
    """An A/A pair's outlier: in one shape full_softmax ran 1.6x faster in the new run; anchored to it the
    shape's other variants look 1.6x slower, but less the machine's drift they did not move: judged on
    what the two agree on, they stay within the noise."""
    base, new = sampled_run(15, 1.0), sampled_run(16, 0.92, run_label="run-b")
    shape = {r["vocab"] for r, _, _ in new}.pop()
    new = [
        (r, own / 1.6, ref) if r["variant"] == "full_softmax" and r["vocab"] == shape else (r, own, ref)
        for r, own, ref in new
    ]
    new = [(as_written(r["variant"], r["vocab"], own, ref, "run-b"), own, ref) for r, own, ref in new]
    result = compare(frame(base), frame(new), 0.05)
    assert result.failures.empty, result.failures[["case", "outcome"]]
    moved = result.table[(result.table["vocab"] == shape) & (result.table["variant"] != "full_softmax")]
    assert (moved["anchor"] == "baseline").all() and (moved["judged"].abs() < 0.02).all()


def test_runs_without_the_reference_keep_todays_rule_and_say_so():
    base, new = sampled_run(5, 1.0), sampled_run(6, 1.0, {"identity": 2.0}, run_label="run-b")
    old = compare(frame(base, reference=False), frame(new, reference=False), 0.05)
    assert not old.table["by_reference"].any() and old.anchored.empty
    assert (old.table["judged_ratio"] == old.table["ratio"]).all()
    assert set(old.table.loc[old.table["variant"] == "identity", "outcome"]) == {"slower"}
    assert set(old.table.loc[old.table["variant"] == "identity", "anchor"]) == {"baseline"}
    line = drift_line(old)
    assert (
        "none of the timed cases without the same reference in both runs" in line and "earlier rule" in line
    )
    mixed = compare(frame(base), frame(new, reference=False), 0.05)  # an older base: its rows have none
    assert not mixed.table["by_reference"].any() and "earlier rule" in drift_line(mixed)
    some = compare(frame(base), pd.concat([frame(new[4:]), frame(new[:4], reference=False)]), 0.05)
    assert some.table["by_reference"].sum() == len(base) - 4  # one shape's rows from an older run
    assert f"4 of the {len(base)} timed cases without the same reference" in drift_line(some)


def test_a_base_whose_reference_was_another_workload_is_judged_by_the_earlier_rule():
    """Format 2 sampled a copy of the logits as the reference; its drift is not the exp's, so a pair of
    runs with different reference workloads is not judged against either."""
    copy = [({**r, "reference": "logits copy, host"}, own, ref) for r, own, ref in sampled_run(11, 1.0)]
    new = sampled_run(12, 1.055, run_label="run-b")
    result = compare(frame(copy), frame(new), 0.05)
    assert not result.table["by_reference"].any() and result.anchored.empty
    assert "none of the timed cases without the same reference in both runs" in drift_line(result)
    assert compare(frame(copy), frame(copy), 0.05).table["by_reference"].all()  # copy against copy: judged


def write_run(folder: Path, cases: list[tuple[dict, np.ndarray, np.ndarray]], reference: bool = True) -> Path:
    """A run folder as `perfsuite run` leaves it: results.csv and samples.jsonl (with ref_seconds)."""
    rows = frame(cases, reference).drop(columns=[SECONDS, REF_SECONDS])
    csv_path = write_tables(rows, folder)[0]
    log = ResultsLog(folder / "samples.jsonl")
    for r, own, ref in cases:
        entry = {"case_id": r["case_id"], "run": r["run"], "seconds": [float(s) for s in own]}
        if reference:
            entry["ref_seconds"] = [float(s) for s in ref]
        log.append(entry)
    return csv_path


def test_the_cli_on_files_passes_a_drifted_pair_and_fails_a_slower_full_softmax(tmp_path, capsys):
    base = write_run(tmp_path / "base", sampled_run(7, 1.0))
    drifted = write_run(tmp_path / "drifted", sampled_run(8, 1.055, run_label="run-b"))
    page = tmp_path / "compare.html"
    assert cli.main(["compare", str(base), str(drifted), "--fail-on", "5%", "--out", str(page)]) == 0
    printed = capsys.readouterr().out
    assert "slower" not in printed.split("rule:")[0] and "reference (logits exp, sampled in turn" in printed
    html = page.read_text()
    assert (
        "PASS: no regression." in html
        and "vs ref" in html
        and "reference (logits exp, sampled in turn" in html
    )
    side = load_side(base)
    assert side[REF_SECONDS].map(len).eq(ROUNDS).all() and side["vs_ref"].notna().all()
    slow = write_run(tmp_path / "slow", sampled_run(9, 1.0, {"full_softmax": 1.1}, run_label="run-c"))
    assert cli.main(["compare", str(base), str(slow), "--fail-on", "5%"]) == 1
    printed = capsys.readouterr().out
    assert f"{SHAPES} slower" in printed
    old = write_run(tmp_path / "old", sampled_run(10, 1.0, run_label="run-d"), reference=False)
    assert cli.main(["compare", str(old), str(drifted), "--fail-on", "5%"]) in (0, 1)
    assert "without the same reference in both runs" in capsys.readouterr().out


def test_load_samples_reads_the_reference_samples_only_where_they_pair(tmp_path):
    log = ResultsLog(tmp_path / "samples.jsonl")
    log.append({"case_id": "a", "run": "r", "seconds": [1.0, 2.0], "ref_seconds": [0.5, 0.5]})
    log.append({"case_id": "b", "run": "r", "seconds": [1.0, 2.0], "ref_seconds": [0.5]})  # unpaired
    log.append({"case_id": "c", "run": "r", "seconds": [1.0, math.inf], "ref_seconds": [0.5, 0.5]})
    log.append({"case_id": "d", "run": "r", "seconds": [1.0]})  # from before the reference
    samples = load_samples(tmp_path).set_index("case_id")
    assert samples.loc["a", "ref_seconds"] == [0.5, 0.5]
    assert samples.loc[["b", "c", "d"], "ref_seconds"].isna().all()
    (tmp_path / "samples.jsonl").write_text(json.dumps({"case_id": "d", "run": "r", "seconds": [1.0]}) + "\n")
    assert list(load_samples(tmp_path).columns) == ["case_id", "run", "seconds"]


class FakeSampler(timing.Sampler):
    def __init__(self, seconds: float, broken: bool = False):
        self.seconds, self.broken, self.method = seconds, broken, "fake"

    def sample(self) -> float:
        if self.broken:
            raise RuntimeError("reference broke")
        return self.seconds


class FakeRunner:
    """A paired runner whose cases are named by their time."""

    def identify(self, case: float) -> dict[str, object]:
        return {"case_id": str(case)}

    def skip_reason(self, case: float) -> str | None:
        return None

    def prepare_timed(self, case: float) -> protocol.ReadyCase:
        return protocol.ReadyCase(FakeSampler(case), lambda s: {"median_us": s.median_us})

    def release(self) -> None:
        pass


def reference(seconds: float, broken: bool = False) -> protocol.InTurnReference:
    return protocol.InTurnReference(
        (FakeSampler(seconds, broken),),
        lambda refs, own, row: {"vs_ref": timing.paired_ratio(own, refs[0]).median},
    )


def test_run_in_turn_samples_the_reference_in_turn_and_a_broken_one_costs_only_itself():
    settings = Timing(warmup=0, reps=5)
    rows = protocol.run_in_turn(FakeRunner(), [2.0, 4.0], settings, 0, lambda: reference(1.0))
    assert [r["vs_ref"] for r in rows] == [2.0, 4.0]
    assert all(r[protocol.REF_SAMPLES] == [1.0] * 5 for r in rows)
    assert rows[1]["speedup_method"] == "paired"
    broken = protocol.run_in_turn(FakeRunner(), [2.0, 4.0], settings, 0, lambda: reference(1.0, True))
    assert all("vs_ref" not in r and protocol.REF_SAMPLES not in r for r in broken)
    assert broken[1]["speedup_method"] == "paired"  # the others still sampled in turn
    failing = protocol.run_in_turn(FakeRunner(), [2.0], settings, None, lambda: 1 / 0)
    assert failing[0]["status"] == "ok" and "vs_ref" not in failing[0]


def test_a_tiny_cpu_run_carries_the_reference_columns_and_samples(tmp_path, capsys):
    code, out = run(tmp_path)
    assert code == 0
    frame_ = pd.read_csv(out / "results.csv")
    ok = frame_[frame_["status"] == "ok"]
    assert len(ok) and ok["reference"].str.startswith("logits exp, host thread CPU time").all()
    for column in ("ref_median_us", "vs_ref", "vs_ref_p20", "vs_ref_p80"):
        assert (ok[column] > 0).all(), column
    filled = ok[ok["batch"] > 0]
    assert filled["copy_us_in_turn"].gt(0).all() and filled["copy_gbps_in_turn"].gt(0).all()
    assert filled["pct_copy_in_turn"].gt(0).all()
    copied = 2 * filled["vocab"] * filled["batch"] * filled["dtype"].map({"float32": 4, "bfloat16": 2})
    assert np.allclose(filled["copy_gbps_in_turn"], copied / filled["copy_us_in_turn"] / 1e3, rtol=1e-6)
    assert frame_.loc[frame_["status"] != "ok", "ref_median_us"].isna().all()
    lines = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == len(ok) and all(len(s["ref_seconds"]) == len(s["seconds"]) for s in lines)
    by_group: dict[tuple, list] = {}
    for s in lines:
        by_group.setdefault(tuple(s["case_id"].split("/")[1:]), []).append(s["ref_seconds"])
    assert all(all(r == refs[0] for r in refs) for refs in by_group.values())  # one reference per group
    assert load_samples(out)["ref_seconds"].notna().all()
    capsys.readouterr()
    assert cli.main(["compare", str(out), str(out), "--fail-on", "5%"]) == 0
    printed = capsys.readouterr().out
    assert (
        "sampled in turn with each case): new/base median 1.000×" in printed
        and "without the reference" not in printed
    )


def test_the_machine_drift_is_what_the_reference_and_the_run_agree_on():
    drift = run_noise.machine_drift
    assert drift(math.log(1.05), math.log(1.04)) == pytest.approx(math.log(1.04))  # agree: the smaller
    assert drift(math.log(1.03), math.log(1.06)) == pytest.approx(math.log(1.03))
    assert drift(math.log(0.93), math.log(1.02)) == 0.0  # disagree: nothing taken out
    assert drift(math.nan, math.log(1.2)) == 0.0  # no reference: nothing


def test_a_reference_that_drifts_alone_flags_nothing():
    """Pair 1 measured here: the copy ran 0.935x in the second run while the selectors ran 0.98x. A copy
    answering the load unlike the selectors must not make every variant look slower."""
    base = frame(sampled_run(1, 1.0))
    new = frame(sampled_run(2, 0.98, run_label="run-b", reference=0.935 / 0.98))
    result = compare(base, new, 0.05)
    assert result.ref_drift == pytest.approx(0.935, abs=0.01) and result.failures.empty
    assert set(result.table["outcome"]) <= {"same", "noisy"}


def test_every_variant_slower_is_still_caught_where_the_reference_is_not():
    """A change that slows every variant's code (a torch upgrade) but not a plain copy is a regression:
    the whole run moved, the reference did not, so nothing is taken out."""
    base = frame(sampled_run(1, 1.0))
    everything = {variant: 1.2 for variant in VARIANTS}
    new = frame(sampled_run(2, 1.0, everything, run_label="run-b"))
    result = compare(base, new, 0.05)
    flagged = result.table[result.table["outcome"] == "slower"]
    assert len(flagged) >= 0.9 * len(result.table), result.counts()

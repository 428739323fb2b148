"""The in-turn reference (issue 24): an exp of each case's logits sampled in the same rounds as its variants,
and `compare` judging each case by its time over the reference's, round by round (issue 31: one witness).
The machine's drift, and a machine faster or slower in the seconds a few cases were sampled, are rebuilt
from synthetic rows and samples, without timing anything; one tiny real CPU run checks the columns and the
samples log."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from support import measured, with_seconds, write_run
from test_run import run

from perfsuite import cli
from perfsuite.cases import protocol
from perfsuite.compare import rule
from perfsuite.compare.match import REF_SECONDS, compare, load_side
from perfsuite.core.settings import Timing
from perfsuite.measure import timing
from perfsuite.report.compare_page import build_compare_page, drift_line, text_table
from perfsuite.results.read import read_samples
from perfsuite.results.write import ResultsLog, to_frame

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


def as_older(r: dict) -> dict:
    """The row as a run from before the reference wrote it: without the reference's columns."""
    return {k: v for k, v in r.items() if not k.startswith(("ref_", "vs_ref", "reference"))}


def frame(cases: list[tuple[dict, np.ndarray, np.ndarray]], reference: bool = True) -> pd.DataFrame:
    """The rows and samples as `load_side` gives them; `reference=False`: as an older run wrote them."""
    rows = []
    for r, own, ref in cases:
        if not reference:
            r = as_older(r)
        rows.append({**with_seconds(r, own), REF_SECONDS: tuple(ref) if reference else None})
    return to_frame(rows)


def drift_percent(line: str) -> float:
    """N of "drift: the reference moved +N %"."""
    return float(re.search(r"the reference moved ([+-][0-9.]+) %", line).group(1))


def test_a_machine_10_percent_slower_in_the_second_run_compares_same():
    base, new = sampled_run(1, 1.0), sampled_run(2, 1.10, run_label="run-b")
    result = compare(frame(base), frame(new), 0.05)
    assert result.table["witness"].eq(f"vs reference, {ROUNDS}/{ROUNDS} rounds").all()
    assert set(result.table["outcome"]) == {"same"} and result.failures.empty
    assert (abs(result.table["ratio"] - 1.10) < 0.03).all() and (abs(result.table["shift"] - 1) < 0.02).all()
    line = drift_line(result)
    assert drift_percent(line) == pytest.approx(10, abs=0.5) and "cases judged on their own time" not in line
    assert line in text_table(result)
    own = compare(frame(base, reference=False), frame(new, reference=False), 0.05)  # without the reference
    assert own.table["outcome"].eq("slower").mean() > 0.9 and "no in-turn reference" in drift_line(own)


def test_full_softmax_10_percent_slower_is_flagged_and_nothing_else():
    base = sampled_run(3, 1.0)
    for machine in (1.0, 1.05, 0.85):  # on a quiet machine, on one slower and one faster in the second run
        new = sampled_run(4, machine, {"full_softmax": 1.10}, run_label="run-b")
        result = compare(frame(base), frame(new), 0.05)
        got = result.table.groupby("variant")["outcome"].agg(set).to_dict()
        assert got.pop("full_softmax") == {"slower"}, machine
        assert all(outcomes == {"same"} for outcomes in got.values()), (machine, got)
        full = result.table[result.table["variant"] == "full_softmax"]
        assert full["shift"].median() == pytest.approx(1.10, abs=0.01) and (full["low"] > 1.05).all()


def test_a_fast_spell_in_a_case_rounds_hides_no_slowdown_and_makes_nothing_faster(tmp_path):
    """The measured misses: on a shared machine the new run was 20 % faster in the seconds a few shapes
    were sampled, so full_softmax 1.2x slower there came out about 0.96x by its own time, and its
    neighbours sampled in those seconds 0.8x. The reference sampled in the same rounds moved with them:
    against it full_softmax is 1.2x and the others unchanged."""
    spells = {3: 0.8, 11: 0.8, 19: 0.8, 27: 0.8}
    base = sampled_run(21, 1.0)
    new = sampled_run(22, 1.0, {"full_softmax": 1.2}, run_label="run-b", spells=spells)
    result = compare(frame(base), frame(new), 0.05)
    table = result.table.set_index("vocab")
    full = table[table["variant"] == "full_softmax"]
    in_spells = [1000 + shape for shape in spells]
    assert (abs(full.loc[in_spells, "ratio"] - 0.96) < 0.03).all()  # its own time sees no change
    assert set(full["outcome"]) == {"slower"}
    others = table[table["variant"] != "full_softmax"]
    assert (others.loc[in_spells, "ratio"] < 0.85).all() and set(others["outcome"]) == {"same"}
    text = text_table(result, limit=200)
    assert "vs ref, 25/25 rounds" in text and "95 % interval" in text
    page = build_compare_page(result, tmp_path / "compare.html").read_text(encoding="utf-8")
    assert (
        "<th>95 % interval</th>" in page and "<th>floor</th>" in page and "drift: the reference moved" in page
    )


def test_a_reference_that_moved_alone_in_one_shape_is_no_change_but_a_variant_moved_alone_is(monkeypatch):
    """The reference 25 % faster in one shape's rounds makes its four variants look 1.33x slower against
    it: their floor is the others' move (noisy, not slower). full_softmax 1.3x slower alone in another
    shape is slower. Without the shape's floor the first four are called slower."""
    base = sampled_run(1, 1.0)
    new = sampled_run(2, 1.0, run_label="run-b", ref_spells={3: 0.75})
    at = next(i for i, (r, _, _) in enumerate(new) if (r["variant"], r["vocab"]) == ("full_softmax", 1007))
    _, own, ref = new[at]
    new[at] = (as_written("full_softmax", 1007, own * 1.3, ref, "run-b"), own * 1.3, ref)
    table = compare(frame(base), frame(new), 0.05).table
    moved_ref = table[table["vocab"] == 1003]
    assert len(moved_ref) == 4 and (moved_ref["shift"] > 1.25).all()
    assert moved_ref["outcome"].eq("cannot tell").all() and (moved_ref["floor"] > moved_ref["shift"]).all()
    assert list(table.loc[table["outcome"] == "slower", "case"]) == [
        "full_softmax/eager/bfloat16/V1007/B1/k1/gaussian"
    ]
    floors = rule.run_floors
    monkeypatch.setattr(  # every case a shape of its own: no other variant beside it
        "perfsuite.compare.rule.run_floors",
        lambda table, threshold, shapes: floors(
            table, threshold, pd.Series(range(len(shapes)), index=shapes.index)
        ),
    )
    without = compare(frame(base), frame(new), 0.05).table
    assert without.loc[without["vocab"] == 1003, "outcome"].eq("slower").all()


def test_aa_pairs_reads_its_figures_from_the_compare_table(tmp_path):
    """`scripts/aa_pairs.py`'s per-pair figures from the table `perfsuite compare --csv` writes (its cases
    and groups), and its changes' names."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("aa_pairs", ROOT / "scripts" / "aa_pairs.py")
    aa_pairs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aa_pairs)
    base = write_run(tmp_path / "a", sampled_run(21, 1.0))
    new = write_run(tmp_path / "b", sampled_run(22, 1.0, {"full_softmax": 1.2}, run_label="run-b"))
    assert cli.main(["compare", str(base), str(new), "--csv", str(tmp_path / "pair.csv")]) == 1
    got = aa_pairs.figures(tmp_path / "pair.csv", "full_softmax")
    assert got["target_cases_slower"] == got["target_cases"] == SHAPES and got["target_groups_slower"] >= 1
    assert got["others_slower"] == got["faster"] == 0 and got["cases"] == SHAPES * len(VARIANTS)
    assert aa_pairs.parse_change("identity:copy-topk") == ("identity", "copy-topk")
    assert aa_pairs.parse_change("*:x1.1") == ("*", "x1.1")


def test_runs_without_the_reference_are_judged_on_their_own_time_and_say_so():
    base, new = sampled_run(5, 1.0), sampled_run(6, 1.0, {"identity": 2.0}, run_label="run-b")
    old = compare(frame(base, reference=False), frame(new, reference=False), 0.05)
    assert old.table["witness"].str.startswith("own time").all()
    assert set(old.table.loc[old.table["variant"] == "identity", "outcome"]) == {"slower"}
    assert "no in-turn reference in both runs" in drift_line(old)
    mixed = compare(frame(base), frame(new, reference=False), 0.05)  # an older base: its rows have none
    assert mixed.table["witness"].str.startswith("own time").all()
    some = compare(frame(base), pd.concat([frame(new[4:]), frame(new[:4], reference=False)]), 0.05)
    assert some.table["witness"].str.startswith("vs reference").sum() == len(base) - 4
    assert "; 4 cases judged on their own time (no same reference)" in drift_line(some)


def test_a_base_whose_reference_was_another_workload_is_judged_on_its_own_time():
    """Format 2 sampled a copy of the logits as the reference; its drift is not the exp's, so a pair of
    runs with different reference workloads is not judged against either."""
    copy = [({**r, "reference": "logits copy, host"}, own, ref) for r, own, ref in sampled_run(11, 1.0)]
    new = sampled_run(12, 1.055, run_label="run-b")
    result = compare(frame(copy), frame(new), 0.05)
    assert result.table["witness"].str.startswith("own time").all()
    assert "no in-turn reference in both runs" in drift_line(result)
    assert compare(frame(copy), frame(copy), 0.05).table["witness"].str.startswith("vs reference").all()


def test_the_cli_on_files_passes_a_drifted_pair_and_fails_a_slower_full_softmax(tmp_path, capsys):
    base = write_run(tmp_path / "base", sampled_run(7, 1.0))
    drifted = write_run(tmp_path / "drifted", sampled_run(8, 1.10, run_label="run-b"))
    page = tmp_path / "compare.html"
    assert cli.main(["compare", str(base), str(drifted), "--fail-on", "5%", "--out", str(page)]) == 0
    printed = capsys.readouterr().out
    assert f"{len(VARIANTS) * SHAPES} same;" in printed and drift_percent(printed) == pytest.approx(
        10, abs=0.5
    )
    assert (
        "PASS: no case, variant or group confirmed slower." in page.read_text()
        and "vs ref" in page.read_text()
    )
    side = load_side(base)
    assert side[REF_SECONDS].map(len).eq(ROUNDS).all() and side["vs_ref"].notna().all()
    slow = write_run(tmp_path / "slow", sampled_run(9, 1.0, {"full_softmax": 1.1}, run_label="run-c"))
    assert cli.main(["compare", str(base), str(slow), "--fail-on", "5%"]) == 1
    assert f"{SHAPES} slower" in capsys.readouterr().out
    older = [(as_older(r), own) for r, own, _ in sampled_run(10, 1.0, run_label="run-d")]  # no ref_seconds
    old = write_run(tmp_path / "old", older)
    assert cli.main(["compare", str(old), str(drifted), "--fail-on", "5%"]) == 1  # the machine, not taken out
    assert "no in-turn reference in both runs" in capsys.readouterr().out


def test_load_samples_reads_the_reference_samples_only_where_they_pair(tmp_path):
    log = ResultsLog(tmp_path / "samples.jsonl")
    log.append({"case_id": "a", "run": "r", "seconds": [1.0, 2.0], "ref_seconds": [0.5, 0.5]})
    log.append({"case_id": "b", "run": "r", "seconds": [1.0, 2.0], "ref_seconds": [0.5]})  # unpaired
    log.append({"case_id": "c", "run": "r", "seconds": [1.0, math.inf], "ref_seconds": [0.5, 0.5]})
    log.append({"case_id": "d", "run": "r", "seconds": [1.0]})  # from before the reference
    samples = read_samples(tmp_path).set_index("case_id")
    assert samples.loc["a", "ref_seconds"] == [0.5, 0.5]
    assert samples.loc[["b", "c", "d"], "ref_seconds"].isna().all()
    (tmp_path / "samples.jsonl").write_text(json.dumps({"case_id": "d", "run": "r", "seconds": [1.0]}) + "\n")
    assert read_samples(tmp_path).reindex(columns=["ref_seconds"])["ref_seconds"].isna().all()


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
    assert read_samples(out)["ref_seconds"].notna().all()
    capsys.readouterr()
    assert cli.main(["compare", str(out), str(out), "--fail-on", "5%"]) == 0
    printed = capsys.readouterr().out
    assert "drift: the reference moved +0.0 %" in printed and "cases judged on their own time" not in printed
    summary = next(line for line in printed.splitlines() if "cases matched" in line)
    assert "slower" not in summary and "noisy" not in summary and "faster" not in summary


def test_every_variant_slower_is_still_caught_where_the_reference_is_not():
    """A change that slows every variant's code (a torch upgrade) but not the reference's exp is a
    regression: every case moved against the reference."""
    base = frame(sampled_run(1, 1.0))
    everything = {variant: 1.2 for variant in VARIANTS}
    new = frame(sampled_run(2, 1.0, everything, run_label="run-b"))
    result = compare(base, new, 0.05)
    flagged = result.table[result.table["outcome"] == "slower"]
    assert len(flagged) >= 0.9 * len(result.table), result.counts()

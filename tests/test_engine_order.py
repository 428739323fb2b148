"""Like-for-like comparisons: the exact identity in torch's tie order beside the lowest-index one, and the
compile path measured against a compiled full_softmax, with the report saying which pairs it compares."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from support import stable_topk

from perfsuite import variants
from perfsuite.correctness import parity
from perfsuite.report import summary
from perfsuite.report.kernel_context import PAIRING_TEXT, Summary
from perfsuite.report.kernel_sections import summary_section
from perfsuite.results.columns import add_speedups, complete
from perfsuite.scenario import inputs
from perfsuite.scenario.load import Scenario, Sweep, expand, load
from perfsuite.variants.identity import tie_repair_traffic

ENGINE = "identity_engine_order"
ROOT = Path(__file__).resolve().parent.parent


def tied_logits() -> torch.Tensor:
    """Rows full of exact ties on the CPU: a 300-way tie, a peak then a tied plateau, small integers."""
    logits = inputs.make_logits("ties", 6, 300, torch.float32, seed=5)
    logits[0] = 1.0
    logits[1] = 0.0
    logits[1, 10] = 2.0
    return logits


@pytest.mark.parametrize("k", [2, 7, 50])
def test_engine_order_takes_torch_topk_order_and_identity_the_lowest_index(k):
    logits = tied_logits()
    _, engine_index = variants.get(ENGINE)(logits, k)
    _, identity_index = variants.get("identity")(logits, k)
    assert torch.equal(engine_index, torch.topk(logits, k, dim=-1).indices)  # torch's order, no repair
    assert torch.equal(identity_index, stable_topk(logits, k))  # identity keeps lowest-index ties
    # on this CPU torch.topk does not pick the lowest indices among ties: the two orders differ
    assert not torch.equal(engine_index, identity_index)


def test_parity_accepts_the_engine_order_as_ties_and_holds_it_exact():
    logits = tied_logits()
    ref = parity.truth(logits, 7)
    p, index = variants.get(ENGINE)(logits, 7)
    check = parity.check("exact", p, index, ref)
    assert check.verdict == "pass", check.problem
    assert check.idx_tie_f64 == 1.0 and check.idx_exact_f64 < 1.0  # other tokens, equal logits


def test_at_k1_both_identities_run_the_same_ops():
    logits = tied_logits()
    engine, identity = variants.get(ENGINE)(logits, 1), variants.get("identity")(logits, 1)
    assert torch.equal(engine[1], identity[1]) and torch.equal(engine[0], identity[0])
    assert engine[1][0, 0] == 0  # torch.max: the first maximum


def test_engine_order_moves_one_repair_fewer():
    b, v, dtype = 16, 151936, torch.bfloat16
    for k in (1, 8):
        engine = variants.get(ENGINE).traffic(b, v, k, dtype)
        identity = variants.get("identity").traffic(b, v, k, dtype)
        repair = tie_repair_traffic(b, v, k, dtype)
        assert identity.total - engine.total == repair.total
        assert engine.temp == b * v * 4  # the fp32 exp temporary both keep
    assert tie_repair_traffic(b, v, 8, dtype).total == b * v * (2 + 1 + 1 + 4)  # x == kth, int32 cumsum
    assert tie_repair_traffic(b, v, 1, dtype).total == 0


def sweep_of(variant_names: tuple[str, ...], paths: tuple[str, ...], tp: tuple[int, ...] = (1,)) -> Scenario:
    sweep = Sweep(variant_names, paths, ("float32",), (64,), (2,), (1, 3), ("gaussian",), tp)
    return Scenario("s", "s.toml", sweeps=(sweep,))


def test_a_compile_sweep_brings_the_compiled_baseline():
    cases = expand(sweep_of(("identity", ENGINE), ("eager", "compile")))
    compiled = {(c.variant, c.topk) for c in cases if c.path == "compile"}
    assert compiled == {(v, k) for v in ("full_softmax", "identity", ENGINE) for k in (1, 3)}
    assert not [c for c in cases if c.path == "eager" and c.variant == "full_softmax"]  # eager: as asked
    both = expand(sweep_of(("full_softmax", "identity"), ("compile",)))
    assert len(both) == len({c.case_id for c in both}) == 4  # named already: not repeated
    tp_only = expand(sweep_of(("allgather_identity",), ("compile",), tp=(2,)))
    assert {c.variant for c in tp_only} == {"allgather_identity"}  # tensor parallel runs eagerly only


def row(variant: str, path: str, us: float, **extra: object) -> dict[str, object]:
    accuracy = {"full_softmax": "rounded", "argmax_ones": "inexact"}.get(variant, "exact")
    shape = {"dtype": "float32", "vocab": 32000, "batch": 16, "topk": 8, "logits": "gaussian", "tp": 1}
    case = {"device": "cpu", "run": "r", "variant": variant, "accuracy": accuracy, "path": path, **shape}
    return {**case, "status": "ok", "median_us": us, **extra}


def frame_of(*rows: dict[str, object]) -> pd.DataFrame:
    return complete(pd.DataFrame(list(rows)))


def paths_frame() -> pd.DataFrame:
    """full_softmax eager 100 us and compiled 40 us; identity compiled 20 us, its engine order 16 us."""
    rows = [("full_softmax", "eager", 100.0), ("identity", "eager", 125.0), (ENGINE, "eager", 100.0)]
    rows += [("full_softmax", "compile", 40.0), ("identity", "compile", 20.0), (ENGINE, "compile", 16.0)]
    return frame_of(*(row(*r) for r in rows))


def test_speedups_pair_within_the_path():
    frame = add_speedups(paths_frame()).set_index(["variant", "path"])
    assert frame.loc[("identity", "compile"), "speedup_vs_full"] == pytest.approx(
        2.0
    )  # 40 / 20, not 100 / 20
    assert frame.loc[("identity", "eager"), "speedup_vs_full"] == pytest.approx(0.8)


def test_the_pairs_table_names_the_baseline_on_the_same_path():
    pairs = Summary.of(paths_frame()).pairs.set_index(["path", "variant"])
    assert pairs.loc[("compile", "identity"), "against"] == "full_softmax · compile"
    assert pairs.loc[("eager", ENGINE), "against"] == "full_softmax · eager"
    assert pairs.loc[("compile", ENGINE), "medians"] == 1 and pairs["no baseline"].eq(0).all()
    alone = Summary.of(frame_of(row("identity", "compile", 20.0))).pairs
    assert alone.iloc[0]["no baseline"] == 1


def test_tie_policy_is_identity_over_engine_order_per_path():
    table = Summary.of(paths_frame()).ties.set_index("path")
    assert set(table["lowest index"]) == {"identity"} and set(table["engine order"]) == {ENGINE}
    assert table.loc["eager", "cost"] == table.loc["compile", "cost"] == pytest.approx(1.25)
    # the ratio of their medians, never of their speedups (those carry the baseline's noise twice)
    noisy = frame_of(
        row("full_softmax", "eager", 100.0),
        row("identity", "eager", 150.0, speedup_vs_full=0.5, speedup_method="paired"),
        row(ENGINE, "eager", 100.0, speedup_vs_full=2.0, speedup_method="paired"),
    )
    assert Summary.of(noisy).ties.iloc[0]["cost"] == pytest.approx(1.5)
    assert Summary.of(frame_of(row("identity", "eager", 1.0))).ties.empty


def test_report_and_summary_state_the_pairs_and_the_tie_cost():
    section = summary_section(Summary.of(paths_frame()))
    assert PAIRING_TEXT in section.intro and "compiled full_softmax" in PAIRING_TEXT
    tables = [b for b in section.blocks if getattr(b, "kind", "") == "table"]
    pairs = [[str(c) for c in r[:3]] for r in next(t for t in tables if "against" in t.columns).rows]
    assert ["compile", "identity", "full_softmax · compile"] in pairs
    assert ["eager", ENGINE, "full_softmax · eager"] in pairs
    ties = next(t for t in tables if "tie repair" in t.columns)
    path, repair = ties.columns.index("path"), ties.columns.index("tie repair")
    assert {r[path] for r in ties.rows} == {"eager", "compile"} and "1.25×" in ties.rows[0][repair].text
    text = summary.summary_markdown(paths_frame())
    assert "## Speedup pairs" in text and PAIRING_TEXT in text
    assert "| compile | identity | full_softmax · compile |" in text
    assert "## Tie policy" in text and "| 1.25 |" in text


def test_a_compile_group_times_the_compiled_baseline_in_turn(monkeypatch):
    """Both selectors of a compile group go through `execution.compiled` (stubbed: torch.compile costs seconds
    per shape here) and are sampled in turn: the variant's speedup is paired with the compiled baseline."""
    from perfsuite.cases.kernel.kernel_runner import KernelRunner
    from perfsuite.core.settings import Timing
    from perfsuite.measure import execution
    from perfsuite.measure.device import detect
    from perfsuite.measure.environment import environment

    compiled = []
    monkeypatch.setattr(execution, "compiled", lambda select: compiled.append(select) or select)
    timing = Timing(warmup=1, reps=5, max_seconds=0.05)
    scenario = Scenario("s", "s.toml", sweeps=sweep_of((ENGINE,), ("compile",)).sweeps, timing=timing)
    group = [c for c in expand(scenario) if c.topk == 3]
    assert [c.variant for c in group] == ["full_softmax", ENGINE]
    info = detect("cpu")
    rows = {r["variant"]: r for r in KernelRunner(info, environment(info, "s")).run_in_turn(group)}
    assert set(compiled) == {variants.get("full_softmax").select, variants.get(ENGINE).select}
    assert {r["path"] for r in rows.values()} == {"compile"}
    assert rows[ENGINE]["speedup_method"] == "paired" and rows[ENGINE]["verdict"] == "pass", rows


@pytest.mark.parametrize("name", ["quick", "models", "gpu_check", "gpu_compact"])
def test_shipped_scenarios_load_and_measure_both_identities(name):
    scenario = load(ROOT / "scenarios" / f"{name}.toml")
    cases = expand(scenario)
    assert scenario.name == name and len({c.case_id for c in cases}) == len(cases)
    at_k8 = {c.variant for c in cases if c.topk == 8}
    assert {"full_softmax", "identity", ENGINE} <= at_k8, name
    compiled = {(c.variant, c.topk) for c in cases if c.path == "compile"}
    if name == "quick":  # the compiled baseline at the compile sweep's shapes, though the sweep omits it
        assert compiled == {(v, k) for v in ("full_softmax", "identity", ENGINE) for k in (1, 8)}

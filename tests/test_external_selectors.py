"""External selectors (issue 12): `package.module:function` and `perfsuite.selectors` entry points,
declared with a small contract, measured and parity-checked like the built-ins; every loading or
declaration problem is one line (exit 2 from the CLI), a selector returning the wrong thing an error row."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from perfsuite import cli, commands, variants
from perfsuite.cases.draft import expand_draft
from perfsuite.correctness import parity
from perfsuite.scenario import inputs
from perfsuite.scenario import load as scenario
from perfsuite.scenario.validate import ScenarioError
from perfsuite.variants import external
from perfsuite.variants.external import Contract, ExternalSelectorError, selector

DATA = Path(__file__).parent / "data"
MODULE = "selectors_for_tests"

SCENARIO = """
name = "external"
device = "cpu"
[[sweep]]
variants = {variants}
paths = ["eager"]
dtypes = ["bfloat16"]
vocab = [1000]
batch = [2]
topk = [1, 4]
logits = ["near_ties"]
[timing]
warmup = 1
reps = 5
max_seconds = 0.05
"""


def spec(function: str) -> str:
    return f"{MODULE}:{function}"


@pytest.fixture(autouse=True)
def selectors(monkeypatch):
    """tests/data importable, and no selector loaded by another test."""
    monkeypatch.syspath_prepend(str(DATA))
    monkeypatch.setattr(external, "_LOADED", {})
    import selectors_for_tests

    selectors_for_tests.ADDRESSES.clear()
    return selectors_for_tests


@pytest.fixture
def entry_point(tmp_path, monkeypatch):
    """A fake installed distribution declaring `fake_topk = selectors_for_tests:exact_topk` (and one
    entry point whose module is missing)."""
    site = tmp_path / "site"
    info = site / "fake_engine-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{external.GROUP}]\nfake_topk = {spec('exact_topk')}\nfake_missing = no_such_engine.kernels:topk\n"
    )
    monkeypatch.syspath_prepend(str(site))
    return "fake_topk"


def scenario_file(tmp_path: Path, names: list[str]) -> Path:
    path = tmp_path / "external.toml"
    path.write_text(SCENARIO.format(variants=json.dumps(names)))
    return path


def run(tmp_path: Path, names: list[str]) -> tuple[int, pd.DataFrame]:
    out = tmp_path / "out"
    code = cli.main(["run", str(scenario_file(tmp_path, names)), "--out", str(out), "--no-progress"])
    return code, pd.read_csv(out / "results.csv")


def test_a_case_above_a_declared_max_k_is_skipped_with_the_reason(tmp_path, capsys):
    code, frame = run(tmp_path, ["full_softmax", spec("argmax_k1")])
    assert code == 0, capsys.readouterr().err
    argmax = frame[frame["variant"] == spec("argmax_k1")].set_index("topk")
    assert argmax.loc[1, "status"] == "ok" and argmax.loc[1, "verdict"] == "inexact"
    assert argmax.loc[4, "status"] == "skipped"
    assert argmax.loc[4, "reason"] == "not claimed: the selector declares topk <= 1"


def test_external_selectors_run_like_built_ins(tmp_path, entry_point, capsys):
    good = [spec(f) for f in ("exact_topk", "int32_topk", "preallocated_topk", "dict_declared")]
    good += [spec("Engine.topk"), entry_point]
    argmax = [spec("argmax_indices"), spec("argmax_into")]
    names = ["full_softmax", "identity", *good, *argmax, spec("wrong_shape")]
    code, frame = run(tmp_path, names)
    assert code == 0, capsys.readouterr().err
    assert set(frame["variant"]) == set(names)
    assert len(frame) == len(names) * 2  # topk 1 and 4
    for name in ["full_softmax", "identity", *good]:
        rows = frame[frame["variant"] == name]
        assert set(rows["status"]) == {"ok"}, (name, rows["reason"].tolist())
        assert set(rows["verdict"]) == {"pass"}, (name, rows["problem"].tolist())
        assert (rows["median_us"] > 0).all() and (rows["idx_tie_f64"] == 1.0).all()
    for name in good:
        rows = frame[frame["variant"] == name]
        assert set(rows["accuracy"]) == {"exact"}
        assert (rows["bytes_model"] == rows["bytes_ideal"]).all()  # the ideal traffic, said in the summary
        assert (rows["model_temp_bytes"] == rows["batch"] * rows["vocab"] * 4).all()  # assumed, said too
        assert (rows["idx_exact_f64"] == 1.0).all()  # lowest index on ties, as declared
    for name in argmax:
        rows = frame[frame["variant"] == name]
        assert set(rows["status"]) == {"ok"} and set(rows["accuracy"]) == {"inexact"}
        assert (rows["idx_exact_f64"] == 1.0).all()
        # topk_p is 1.0: right where the top token holds all the mass, inexact elsewhere
        assert "inexact" in set(rows["verdict"]) and set(rows["verdict"]) <= {"pass", "inexact"}
    broken = frame[frame["variant"] == spec("wrong_shape")]
    assert set(broken["status"]) == {"error"}
    assert broken["reason"].str.startswith(f"ValueError: selector '{spec('wrong_shape')}': topk_p is").all()
    assert broken["reason"].str.contains(r"expected float32 \(2, \d\) on cpu").all()
    assert "Traceback" not in capsys.readouterr().err


def call(name: str, dtype=torch.float32, batch=3, k=4):
    logits = inputs.make_logits("gaussian", batch, 1000, dtype, seed=1, device=torch.device("cpu"))
    variant = variants.get(name)
    p, index = variant(logits, k)
    return variant, logits, p, index


@pytest.mark.parametrize("name", ["exact_topk", "int32_topk", "preallocated_topk", "dict_declared"])
def test_probabilities_and_indices_come_back_in_the_contract(name):
    variant, logits, p, index = call(spec(name))
    assert variant.name == spec(name) and variant.accuracy == "exact"
    assert p.dtype == torch.float32 and index.dtype == torch.int64 and p.shape == index.shape == (3, 4)
    ref = parity.truth(logits, 4)
    assert torch.equal(index, ref.index)
    assert parity.check(variant.accuracy, p, index, ref).verdict == "pass"
    assert variants.get(spec(name)) is variant  # loaded once


def test_preallocated_outputs_are_allocated_once_per_shape_and_reused(selectors):
    variant, logits, p, _ = call(spec("preallocated_topk"))
    p_again, _ = variant(logits, 4)
    assert p_again.data_ptr() == p.data_ptr()  # float32 out_p is returned as is
    other = inputs.make_logits("gaussian", 5, 1000, torch.float32, seed=2, device=torch.device("cpu"))
    variant(other, 4)
    variant(logits, 4)
    first, second, third, fourth = selectors.ADDRESSES
    assert first == second == fourth and third != first
    said = (
        "int32 indices widened; preallocated outputs; bytes model = ideal traffic (its passes are not "
        "known); memory check assumes one [B, V] fp32 temporary"
    )
    assert variant.summary.endswith(f"[external: {said}]")
    # the memory-fit check cannot see its temporaries: it assumes a softmax's [B, V] float32 one
    assert variant.traffic(5, 1000, 4, torch.bfloat16).temp == 5 * 1000 * 4


@pytest.mark.parametrize("name", ["argmax_indices", "argmax_into"])
def test_indices_only_selectors_are_judged_on_their_indices(name):
    variant, logits, p, index = call(spec(name), k=2)
    assert variant.accuracy == "inexact"  # declared exact: only its indices can be
    assert "indices only, topk_p = 1.0 (declared exact; judged on indices)" in variant.summary
    assert torch.equal(p, torch.ones(3, 2)) and index.dtype == torch.int64
    check = parity.check(variant.accuracy, p, index, parity.truth(logits, 2))
    assert check.verdict == "inexact" and check.idx_exact_f64 == 1.0


def test_an_indices_only_selector_with_wrong_indices_fails_parity():
    variant, logits, p, index = call(spec("argmax_wrong"))
    check = parity.check(variant.accuracy, p, index, parity.truth(logits, 4))
    assert check.verdict == "fail" and "ranks lower" in check.problem


WRONG_OUTPUTS = {
    "wrong_shape": "topk_p is a tensor float32 (3, 5) on cpu, expected float32 (3, 4) on cpu",
    "tuple_for_indices": "returned a tensor int64 (3, 4) on cpu, expected (topk_p, topk_index)",
    "argmax_tuple": "returned a tuple, but it declares outputs='indices'",
    "int32_undeclared": "topk_index is a tensor int32 (3, 4) on cpu, expected int64 (3, 4) on cpu",
}


@pytest.mark.parametrize(("name", "message"), WRONG_OUTPUTS.items())
def test_wrong_outputs_raise_one_line_naming_the_selector(name, message):
    with pytest.raises(ValueError) as info:
        call(spec(name))
    text = str(info.value)
    assert text.startswith(f"selector '{spec(name)}': ") and message in text and "\n" not in text


def test_entry_points_are_listed_and_loaded(entry_point):
    assert {"fake_topk", "fake_missing"} <= set(variants.external_names())
    assert "fake_topk" not in variants.names()  # the sweep defaults and edge matrix keep the built-ins
    variant, logits, p, index = call(entry_point)
    assert variant.name == "fake_topk" and variant.accuracy == "exact"
    assert parity.check("exact", p, index, parity.truth(logits, 4)).verdict == "pass"
    with pytest.raises(
        ExternalSelectorError, match=r"^selector 'fake_missing': cannot import no_such_engine"
    ):
        variants.get("fake_missing")


LOAD_ERRORS = {
    "missing module": (
        "no_such_engine.kernels:topk",
        "selector 'no_such_engine.kernels:topk': cannot import no_such_engine.kernels: "
        "ModuleNotFoundError: No module named 'no_such_engine'",
    ),
    "missing function": (spec("nope"), f"selector '{spec('nope')}': {MODULE} has no attribute 'nope'"),
    "missing attribute path": (
        spec("Engine.nope"),
        f"selector '{spec('Engine.nope')}': {MODULE}.Engine has no attribute 'nope'",
    ),
    "not callable": (spec("NOT_CALLABLE"), f"{MODULE}.NOT_CALLABLE is not callable (it is a int)"),
    "undeclared": (
        spec("undeclared"),
        f"selector '{spec('undeclared')}': no contract declared; decorate it with "
        "@perfsuite.variants.external.selector(accuracy='exact'|'rounded'|'inexact', ...)",
    ),
    "bad value": (
        spec("bad_value"),
        f"selector '{spec('bad_value')}': contract key 'outputs' is 'probs'; "
        "allowed: 'probs_and_indices', 'indices'",
    ),
    "bad key": (
        spec("bad_key"),
        f"selector '{spec('bad_key')}': unknown contract key 'index_type'; allowed: accuracy, outputs, "
        "index_dtype, preallocated, lowest_index_ties, summary",
    ),
    "empty function": (f"{MODULE}:", f"selector '{MODULE}:': expected 'package.module:function'"),
}


@pytest.mark.parametrize("case", sorted(LOAD_ERRORS))
def test_load_errors_are_one_line(case):
    name, message = LOAD_ERRORS[case]
    with pytest.raises(ExternalSelectorError) as info:
        variants.get(name)
    assert isinstance(info.value, ValueError)
    assert message in str(info.value) and "\n" not in str(info.value)


def cli_refuses(tmp_path: Path, capsys, case: str, *command: str) -> None:
    """`perfsuite <command> <scenario naming the selector>` exits 2 with one line, no traceback."""
    name, message = LOAD_ERRORS[case]
    path = scenario_file(tmp_path, ["identity", name])
    assert cli.main([command[0], str(path), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.strip().startswith(f"perfsuite: {path}: [sweep#1].variants: selector '{name}'")
    assert message in err and err.strip().count("\n") == 0 and "Traceback" not in err


@pytest.mark.parametrize("case", sorted(LOAD_ERRORS))
def test_list_exits_2_with_one_line_naming_the_file_the_key_and_the_selector(tmp_path, capsys, case):
    cli_refuses(tmp_path, capsys, case, "list")


@pytest.mark.parametrize("case", ["missing module", "undeclared"])
def test_run_refuses_before_starting(tmp_path, capsys, case):
    out = tmp_path / "out"
    cli_refuses(tmp_path, capsys, case, "run", "--out", str(out), "--no-progress")
    assert not out.exists()


def test_scenarios_accept_external_names(tmp_path, entry_point):
    names = ["identity", spec("exact_topk"), entry_point]
    loaded = scenario.load(scenario_file(tmp_path, names))
    assert loaded.sweeps[0].variants == tuple(names)
    assert {c.variant for c in scenario.expand(loaded)} == set(names)
    with pytest.raises(ScenarioError, match=r"\[sweep#1\]\.variants: unknown variant 'fake_topc'"):
        scenario.load(scenario_file(tmp_path, ["fake_topc"]))


BAD_DECLARATIONS = {  # key: (a bad value, the values allowed)
    "accuracy": ("close", "'exact', 'rounded', 'inexact'"),
    "index_dtype": ("int16", "'int64', 'int32'"),
    "preallocated": (1, "False, True"),
}


@pytest.mark.parametrize("key", sorted(BAD_DECLARATIONS))
def test_the_decorator_refuses_bad_declarations_at_once(key):
    value, allowed = BAD_DECLARATIONS[key]
    with pytest.raises(ExternalSelectorError) as info:
        selector(**{"accuracy": "exact", key: value})(lambda logits, k: (logits, logits))
    message = str(info.value)
    assert message.endswith(f"contract key {key!r} is {value!r}; allowed: {allowed}")
    assert "test_external_selectors:" in message


def test_the_declaration_needs_an_accuracy():
    with pytest.raises(ExternalSelectorError, match="contract key 'accuracy' is required"):
        external.contract("m:f", {"outputs": "indices"})
    declared = external.contract("m:f", {"accuracy": "rounded", "preallocated": True})
    assert declared == Contract(accuracy="rounded", preallocated=True)


DRAFT_ONLY = """
name = "draft_only"
device = "cpu"
[draft]
variants = ["full_softmax", "identity"]
dtypes = ["float32"]
vocab = [256]
hidden = [16]
batch = [2]
topk = [1, 2]
num_steps = [2]
"""


def test_variant_on_the_command_line_also_replaces_a_draft_tables_variants(tmp_path, capsys):
    path = tmp_path / "draft_only.toml"
    path.write_text(DRAFT_ONLY)
    args = argparse.Namespace(scenario=str(path), variant=["full_softmax", spec("exact_topk")])
    cases = expand_draft(commands.scenario_of(args))
    assert {c.variant for c in cases} == {"full_softmax", spec("exact_topk")}
    # a tensor-parallel name is fine for a kernel sweep, not for a draft table: one line, exit 2
    out = tmp_path / "out"
    assert cli.main(["run", str(path), "--out", str(out), "--variant", "sharded_torch"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "with --variant" in err and "sharded_torch" in err


def test_the_command_line_picks_variants_and_lists_entry_points(tmp_path, entry_point, capsys):
    out = tmp_path / "out"
    scenario = scenario_file(tmp_path, ["full_softmax", "argmax_ones"])
    chosen = ["--variant", "full_softmax", "--variant", spec("exact_topk")]
    assert cli.main(["run", str(scenario), "--out", str(out), "--no-progress", *chosen]) == 0
    frame = pd.read_csv(out / "results.csv")
    assert set(frame["variant"]) == {"full_softmax", spec("exact_topk")}  # in place of the sweep's
    edges = pd.read_csv(out / "edge_cases.csv")
    assert spec("exact_topk") in set(edges["variant"])  # the edge-case matrix covers it too
    capsys.readouterr()
    assert cli.main(["run", str(scenario), "--out", str(out), "--variant", "no_such.module:fn"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--variant" in err and "no_such" in err
    assert cli.main(["variants"]) == 0
    listed = capsys.readouterr().out
    assert "fake_topk" in listed and "exact" in listed and "fake_missing" in listed and "ERROR" in listed

"""Tuned launch plans: the candidates `perfsuite tune` times, the table it writes, and `triton_auto`
using the table (on this CPU the kernels run in Triton's interpreter: the timings mean nothing, the
mechanics are what is tested)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
import torch
from support import DEVICE

from perfsuite import cli, kernels, variants
from perfsuite.core import exits
from perfsuite.correctness import parity
from perfsuite.kernels import plan as plans
from perfsuite.kernels import plan_table
from perfsuite.scenario.inputs import make_logits

if kernels.availability(DEVICE) is not None:
    pytest.skip(kernels.availability(DEVICE), allow_module_level=True)

from perfsuite.kernels import topk_softmax
from perfsuite.tools import tuning

BF16 = torch.bfloat16
GPU = plans.Hardware(sms=132, warp_size=32, name="Test GPU 9000")


def _entry(dtype: str, batch: int, vocab: int, k: int, best: plan_table.Tunables) -> plan_table.TunedShape:
    return plan_table.TunedShape(dtype, batch, vocab, k, best, median_us=10.0, heuristic_us=20.0)


def _install(tmp_path, monkeypatch, entries: list[plan_table.TunedShape], device: str = GPU.name) -> None:
    table = plan_table.TunedTable(device, GPU.sms, GPU.warp_size, {"triton": "x"}, "graph", tuple(entries))
    path = tmp_path / "table.json"
    path.write_text(table.to_json())
    monkeypatch.setenv(plan_table.PLANS_ENV, str(path))


def test_candidates_cover_both_kernels_and_launch_differently():
    found = tuning.candidates(1, 151936, 8, GPU, 2)
    assert found[0] == plan_table.Tunables.of(plans.choose(1, 151936, 8, GPU, 2))  # the heuristic first
    assert {t.kernel for t in found} == {"fused", "split"}
    assert len(found) >= 15
    layout = topk_softmax.RowLayout.contiguous(151936, 2)
    launches = {
        tuple(
            (x.grid, tuple(x.constants.items()), x.num_warps)
            for x in topk_softmax.plan_launches(1, 151936, 8, t.plan_for(1, 151936, 8, GPU, 2), layout)
        )
        for t in found
    }
    assert len(launches) == len(found)
    for t in found:
        assert t.block * 2 >= plans.LOAD_BYTES * GPU.warp_size * t.num_warps
    assert {t.kernel for t in tuning.candidates(4, 3000, 1, GPU, 4)} == {"fused"}  # too short to split


def test_split_tunables_follow_the_shape():
    one_wave = plan_table.Tunables("split", 1024, 4, waves=1.0)
    at_1 = one_wave.plan_for(1, 262144, 1, GPU, 2)
    at_8 = one_wave.plan_for(8, 262144, 1, GPU, 2)
    assert at_1.n_splits >= 100 and 12 <= at_8.n_splits <= 20  # ~132 programs either way
    assert one_wave.plan_for(1, 3000, 1, GPU, 2).kernel == "fused"  # a row too short to split


def test_table_round_trip_and_lookup(tmp_path, monkeypatch):
    fused = plan_table.Tunables("fused", 2048, 4)
    split = plan_table.Tunables("split", 2048, 8, waves=2.0)
    entries = [_entry("bfloat16", 1, 151936, 1, split), _entry("bfloat16", 256, 151936, 8, fused)]
    _install(tmp_path, monkeypatch, entries)
    table = plan_table.table_for(GPU.name)
    assert table is not None and table.entries == tuple(entries)
    assert plan_table.TunedTable.from_json(table.to_json()) == table
    named = type("Info", (), {"device": "cpu", "name": "NVIDIA H200 NVL"})
    assert plan_table.default_path(named) == plan_table.PACKAGED / "nvidia-h200-nvl.json"
    # nearest tuned shape, its tunables applied to the asked shape; fp16 shares bf16's entries
    assert plan_table.best_plan(2, 129280, 1, BF16, GPU) == split.plan_for(2, 129280, 1, GPU, 2)
    assert plan_table.best_plan(128, 163840, 8, torch.float16, GPU) == fused.plan_for(128, 163840, 8, GPU, 2)
    # no entry of that element size, another device, or no device name: the heuristic
    assert plan_table.best_plan(1, 151936, 1, torch.float32, GPU) == plans.choose(1, 151936, 1, GPU, 4)
    other = plans.Hardware(132, 32, "Another GPU")
    assert plan_table.best_plan(1, 151936, 1, BF16, other) == plans.choose(1, 151936, 1, other, 2)
    assert plan_table.best_plan(1, 151936, 1, BF16, plans.Hardware()) == plans.choose(1, 151936, 1)
    # a table cut short applies only near what it measured: batch 64 lies 6 octaves from batch 1
    assert plan_table.best_plan(64, 151936, 1, BF16, GPU) == plans.choose(64, 151936, 1, GPU, 2)
    assert plan_table.tuned_entry(64, 151936, 1, BF16, GPU) is None
    assert plan_table.tuned_entry(4, 151936, 1, BF16, GPU) == entries[0]  # 2 octaves: still near
    monkeypatch.setattr(plans, "hardware", lambda device=None: GPU)
    assert variants.get("triton_auto").launch(64, 151936, 1, BF16).endswith("(heuristic)")
    assert variants.get("triton_auto").launch(4, 151936, 1, BF16).endswith("(tuned)")


def test_a_malformed_table_names_its_file(tmp_path, monkeypatch):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"device": "x"}))
    monkeypatch.setenv(plan_table.PLANS_ENV, str(bad))
    with pytest.raises(ValueError, match=r"bad\.json: not a perfsuite tuned-plan table"):
        plan_table.table_for("x")


def _table(entries: int) -> plan_table.TunedTable:
    best = plan_table.Tunables("fused", 2048, 4)
    rows = tuple(_entry("bfloat16", batch, 151936, 1, best) for batch in range(1, entries + 1))
    return plan_table.TunedTable(GPU.name, GPU.sms, GPU.warp_size, {"triton": "x"}, "graph", rows)


def test_a_table_being_replaced_is_never_seen_half_written(tmp_path, monkeypatch):
    path, old, new = tmp_path / "tuned.json", _table(1), _table(300)
    plan_table.replace_text(path, old.to_json())
    seen = []
    rename = os.replace

    def rename_and_look(source, target):  # the moment the new table takes the old one's place
        assert Path(source).parent == Path(target).parent  # a rename inside one folder: atomic
        seen.append(plan_table.TunedTable.from_json(Path(target).read_text()))  # a reader still gets the old
        seen.append(plan_table.TunedTable.from_json(Path(source).read_text()))  # the new one is whole already
        rename(source, target)

    monkeypatch.setattr(plan_table.os, "replace", rename_and_look)
    plan_table.replace_text(path, new.to_json())
    assert seen == [old, new]
    assert plan_table.TunedTable.from_json(path.read_text()) == new
    assert [p.name for p in tmp_path.iterdir()] == ["tuned.json"]  # no temporary file left


def test_a_write_that_fails_midway_leaves_the_old_table(tmp_path, monkeypatch):
    path, old = tmp_path / "tuned.json", _table(1)
    plan_table.replace_text(path, old.to_json())

    def disk_full(fd: int) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(plan_table.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        plan_table.replace_text(path, _table(300).to_json())
    assert plan_table.TunedTable.from_json(path.read_text()) == old
    assert [p.name for p in tmp_path.iterdir()] == ["tuned.json"]


def test_triton_auto_runs_the_tuned_plan(tmp_path, monkeypatch):
    tunables = plan_table.Tunables("split", 64, 2, waves=0.5)  # nothing the heuristic would pick
    _install(tmp_path, monkeypatch, [_entry("bfloat16", 2, 5000, 4, tunables)])
    monkeypatch.setattr(plans, "hardware", lambda device=None: GPU)
    launched = []
    run_plan = topk_softmax.run_plan
    monkeypatch.setattr(
        topk_softmax, "run_plan", lambda x, k, plan: launched.append(plan) or run_plan(x, k, plan)
    )
    logits = make_logits("peaked", 2, 5000, BF16, seed=1, device=DEVICE)
    p, idx = variants.get("triton_auto")(logits, 4)
    assert launched == [tunables.plan_for(2, 5000, 4, GPU, 2)]
    # the results' launch column says which plan ran, and that it came from the table
    described = variants.get("triton_auto").launch(2, 5000, 4, BF16)
    assert described == f"{launched[0].describe()} (tuned)" and described.startswith("split 3 x 2048 cols")
    assert parity.check("exact", p, idx, parity.truth(logits, 4)).verdict == "pass"


def test_variant_plan_is_the_plan_the_variant_launches():
    """A Triton variant's `plan_for` is the one its `select` launches; other selectors have none."""
    import importlib

    for name in ("triton_fused", "triton_split", "triton_auto", "triton_argmax"):
        plan_for = importlib.import_module(f"perfsuite.variants.{name}").plan_for
        assert tuning.variant_plan(name) is variants.get(name).plan_for is plan_for
        assert variants.get(name).select.args == (plan_for,)
    for name in ("full_softmax", "identity", "argmax_ones", "no_such_variant", "allgather_identity"):
        assert tuning.variant_plan(name) is None
    assert tuning.selection_of("triton_argmax") == "argmax" and tuning.selection_of("identity") == "topk"


def _timed(median: float, spread: float = 1.0, verdict: str = "pass") -> tuning.TimedPlan:
    tunables = plan_table.Tunables("fused", 4096, 8)
    plan = plans.fused_plan(GPU, 2)
    return tuning.TimedPlan(tunables, plan, median, median - spread, median + spread, verdict)


def test_a_candidate_replaces_the_heuristic_only_outside_the_noise():
    heuristic = _timed(10.0, 0.2)
    clear, close, noisy = _timed(8.0, 0.2), _timed(9.9, 0.01), _timed(8.0, 2.5)
    assert tuning.best_of([heuristic, close, clear]) is clear
    assert tuning.best_of([heuristic, close]) is heuristic  # under MIN_GAIN faster
    assert tuning.best_of([heuristic, noisy]) is heuristic  # faster median, overlapping p20/p80
    failed = _timed(float("nan"), verdict="error")
    assert tuning.best_of([failed, close]) is close
    assert tuning.best_of([failed]) is None


SCENARIO = """
name = "tune"
device = "auto"
[sweep]
variants = ["triton_auto", "triton_fused"]  # one shape whatever the variants
paths = ["eager"]
dtypes = ["bfloat16"]
vocab = [4200]
batch = [2]
topk = [3]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 3
max_seconds = 0.01
l2 = "hot"
"""


def test_tune_writes_the_fastest_exact_plan_per_shape(tmp_path, capsys, monkeypatch):
    scenario, out = tmp_path / "tune.toml", tmp_path / "tuned" / "gpu.json"
    scenario.write_text(SCENARIO)
    written = []
    monkeypatch.setattr(plan_table, "replace_text", lambda p, text: written.append(p) or p.write_text(text))
    assert cli.main(["tune", str(scenario), "--out", str(out)]) == exits.EXIT_OK
    assert written == [out, out.with_suffix(".csv")]  # both files replaced whole, after each shape
    table = plan_table.TunedTable.from_json(out.read_text())
    rows = pd.read_csv(out.with_suffix(".csv"), keep_default_na=False)
    assert len(table.entries) == 1 and table.path == "eager"
    assert len(rows) == len(tuning.candidates(2, 4200, 3, plans.hardware(DEVICE), 2))
    assert rows["heuristic"].sum() == 1 and (rows["verdict"] == "pass").all()
    entry = table.entries[0]
    fastest, heuristic = rows.loc[rows["median_us"].idxmin()], rows[rows["heuristic"]].iloc[0]
    clear = fastest["median_us"] < (1 - tuning.MIN_GAIN) * heuristic["median_us"]
    expected = fastest if clear and fastest["p80_us"] < heuristic["p20_us"] else heuristic
    assert (entry.best.kernel, entry.best.block, entry.best.num_warps, entry.best.prefetch) == (
        expected["kernel"],
        expected["block"],
        expected["num_warps"],
        expected["prefetch"],
    )
    assert entry.median_us == pytest.approx(expected["median_us"])
    assert entry.heuristic_us == pytest.approx(heuristic["median_us"])
    printed = capsys.readouterr().out
    assert "bfloat16 B2 V4200 k3" in printed and "speedup" in printed


def test_tune_without_a_gpu_or_interpreter_is_a_usage_error(tmp_path, monkeypatch, capsys):
    scenario = tmp_path / "tune.toml"
    scenario.write_text(SCENARIO)
    monkeypatch.delenv(kernels.INTERPRET_ENV, raising=False)
    command = ["tune", str(scenario), "--device", "cpu", "--out", str(tmp_path / "t.json")]
    assert cli.main(command) == exits.EXIT_USAGE
    assert "Triton kernels need a GPU" in capsys.readouterr().err

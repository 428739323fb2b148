"""`triton_argmax`: the Triton argmax on the exact kernels' plans (issue 21), against torch.argmax.

On a machine without a GPU the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set before Triton is
imported), like tests/test_triton_variants.py; both plans are forced on every shape.
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip("triton")

from perfsuite import cli, kernels, variants
from perfsuite.correctness import conformance
from perfsuite.kernels import plan as plans
from perfsuite.kernels import plan_table
from perfsuite.kernels import topk_softmax as ts
from perfsuite.scenario.load import expand, load
from perfsuite.tools import tuning, warm

pytestmark = pytest.mark.triton

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if kernels.availability(DEVICE) is not None:
    pytest.skip(kernels.availability(DEVICE), allow_module_level=True)

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
NAN, INF = float("nan"), float("inf")
ARGMAX = variants.get("triton_argmax")
HW = plans.hardware(DEVICE)


def fused(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused argmax plan, forced: its default tile (a row of 151666 spans many)."""
    return ts.run_plan(logits, 1, plans.fused_plan(HW, logits.element_size()).selecting("argmax"))


def split(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The split argmax plan, forced (short rows: a single chunk, as the plan gives)."""
    batch, vocab = logits.shape
    plan = plans.split_plan(batch, vocab, 1, HW, logits.element_size()).selecting("argmax")
    return ts.run_plan(logits, 1, plan)


def small_tiles(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Several splits of several tiles each, even on short rows."""
    plan = plans.Plan("split", 16, plans.SPLIT_NUM_WARPS, chunk=32, selection="argmax")
    return ts.run_plan(logits, 1, plan)


PLANS = {"fused": fused, "split": split}


def tied_logits(batch: int, vocab: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Few distinct values (many ties), the row maximum repeated at 3 and near the end."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 4, (batch, vocab), generator=generator).to(dtype)
    x[:, [min(3, vocab - 1), max(vocab - 5, 0)]] = 4.0
    return x.to(DEVICE)


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("vocab", [1, 7, 100, 151666])
@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=["fp32", "bf16", "fp16"])
def test_indices_are_torch_argmax_lowest_index_first(dtype, vocab, batch, plan):
    logits = tied_logits(batch, vocab, dtype, seed=vocab + batch)
    topk_p, topk_index = PLANS[plan](logits)
    assert topk_index.dtype == torch.int64 and topk_p.dtype == torch.float32
    assert topk_index.shape == topk_p.shape == (batch, 1)
    assert torch.equal(topk_index, torch.argmax(logits, dim=-1, keepdim=True))
    assert bool((topk_p == 1.0).all())
    if vocab >= 100:
        assert torch.equal(topk_index, torch.full((batch, 1), 3, device=DEVICE))  # the first of the tie
    if vocab == 100:
        assert torch.equal(small_tiles(logits)[1], topk_index)


@pytest.mark.parametrize("select", [fused, split, small_tiles], ids=["fused", "split", "small_tiles"])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=["fp32", "bf16"])
def test_nan_wins_lowest_index_first(dtype, select):
    """The stated policy: NaN ranks above every number (as torch.argmax and the exact Triton kernels),
    the first NaN wins; then +inf; an all -inf row gives 0; -inf inside a row is never picked over a
    number. The index is always the exact kernels' top-1."""
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(6, 300, generator=generator)
    x[0, [250, 40, 90]] = NAN
    x[1, [120, 7]] = INF
    x[2] = -INF
    x[3, [5, 200]] = -INF
    x[4, 130], x[4, 260] = INF, NAN  # NaN above +inf
    x[5] = NAN
    logits = x.to(dtype).to(DEVICE)
    _, index = select(logits)
    assert index.flatten().tolist()[:3] == [40, 7, 0]
    assert index[3, 0] == torch.argmax(logits[3]) and index[4, 0] == 260 and index[5, 0] == 0
    assert torch.equal(index, ts.run_plan(logits, 1, plans.Plan("fused", 64, plans.FUSED_NUM_WARPS))[1])
    assert torch.equal(index, torch.argmax(logits, dim=-1, keepdim=True))  # torch.argmax: NaN wins too


@pytest.mark.parametrize("select", [fused, split], ids=["fused", "split"])
def test_the_vector_tail_never_reads_past_v(select):
    """V = 151666 (not a multiple of 8 bf16): the row's last column is the maximum, the padding after
    each row (a wider buffer, and a view 3 elements past a 16-byte boundary) holds NaN and +inf, which
    would win if read: the index is V - 1, never >= V."""
    vocab, width = 151666, 151680
    buffer = torch.full((3, width), NAN, dtype=BF16, device=DEVICE)
    buffer[:, 3 + vocab :] = INF
    logits = buffer[:, 3 : 3 + vocab]
    logits.copy_(tied_logits(3, vocab, BF16, seed=1))
    logits[:, vocab - 1] = 8.0
    _, index = select(logits)
    assert bool((index < vocab).all()) and index.flatten().tolist() == [vocab - 1] * 3
    logits[1] = -INF
    logits[2, :] = 1.0
    _, index = select(logits)
    assert index.flatten().tolist() == [vocab - 1, 0, 0]


def test_the_variant():
    assert "triton_argmax" in variants.names()
    assert ARGMAX.accuracy == "inexact" and ARGMAX.max_k == 1 and ARGMAX.lowest_index_ties
    assert ARGMAX.available(DEVICE) is None and ARGMAX.unclaimed_k(2)
    logits = tied_logits(2, 5000, BF16, seed=2)
    topk_p, topk_index = ARGMAX(logits, 1)
    assert torch.equal(topk_index, torch.argmax(logits, dim=-1, keepdim=True)) and bool((topk_p == 1).all())
    p, idx = ARGMAX(logits[:0], 1)
    assert p.shape == idx.shape == (0, 1)
    with pytest.raises(ValueError, match="topk <= 1"):
        ARGMAX(logits, 2)
    # the exact kernels' plans, on the argmax kernels; the launch column says so
    for batch, vocab in [(1, 151936), (256, 151936), (2, 1000)]:
        auto = variants.get("triton_auto")
        plan = tuning.variant_plan("triton_argmax")(batch, vocab, 1, BF16, HW)
        assert plan == plan_table.best_plan(batch, vocab, 1, BF16, HW).selecting("argmax")
    assert ARGMAX.launch(1, 151666, 1, BF16).startswith("argmax split")
    assert auto.launch(1, 151666, 1, BF16).startswith("split")


def test_one_read_of_the_logits():
    batch, vocab = 256, 151936
    fused_traffic = ARGMAX.traffic(batch, vocab, 1, BF16)
    assert fused_traffic.read == batch * vocab * 2 and fused_traffic.write == batch * (8 + 4)
    split_traffic = ARGMAX.traffic(1, vocab, 1, BF16)
    n_splits = plans.split_plan(1, vocab, 1, HW, 2).n_splits
    assert split_traffic.read == vocab * 2 + 8 * n_splits  # the logits once, then the partials back
    assert split_traffic.hbm(50 << 20) == vocab * 2 + 12  # the partials stay in the cache


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_the_battery_passes_on_indices():
    cases = ["vocab_7", "padded_rows_1031", "offset_3", "nan_and_posinf", "neginf_all", "ties_far"]
    cases += ["ties_across_splits", "int64_addressing", "subnormal", "batch_zero"]
    table = conformance.run("triton_argmax", DEVICE, cases=cases, dtypes=[F32, BF16])
    assert "FAIL" not in set(table["verdict"]), conformance.console(table)
    ran = table[table["k"] == 1]
    assert (ran["verdict"] == "pass").sum() == len(ran) - (DEVICE.type == "cpu")  # bf16 subnormal: skip
    assert (table[table["k"] > 1]["detail"].str.startswith("not claimed")).all()


def test_it_is_in_the_compile_plan(tmp_path, recorded):
    """The compile plan holds the argmax keys its sweep cases, battery and tune candidates launch."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(
        'name = "s"\ndevice = "cpu"\n[sweep]\nvariants = ["triton_argmax"]\ndtypes = ["bfloat16"]\n'
        'vocab = [300, 8193]\nbatch = [1, 2]\ntopk = [1]\nlogits = ["gaussian"]\n'
    )
    cases = expand(load(scenario))
    assert tuning.selection_of("triton_argmax") == "argmax"
    assert tuning.selection_of("triton_auto") == tuning.selection_of("identity") == "topk"
    units = warm.sweep_units(cases, HW)
    assert {u.launch.kernel for u in units} == {"argmax", "argmax_partials", "argmax_merge"}
    for case in cases:
        ARGMAX(torch.zeros(case.batch, case.vocab, dtype=BF16, device=DEVICE), 1)
    assert set(recorded) == {u.key for u in units}
    battery = warm.battery_units(["triton_argmax"], HW, DEVICE, quick=True)
    assert {u.launch.kernel for u in battery} >= {"argmax", "argmax_partials", "argmax_merge"}
    assert {u.source.rsplit(" ", 1)[-1] for u in battery} == {"k1"}  # triton_argmax claims k = 1 only
    tune = warm.candidate_units(cases, HW)
    assert {u.launch.kernel for u in tune} == {"argmax", "argmax_partials", "argmax_merge"}
    assert len(tune) > len(units)
    assert [tuning.selection_of(c.variant) for c in tuning.shapes_of(cases)] == ["argmax"] * 4
    found = tuning.candidates(1, 151936, 1, HW, 2, "argmax")
    assert found[0] == plan_table.Tunables.of(plans.choose(1, 151936, 1, HW, 2, "argmax"))
    assert {t.selection for t in found} == {"argmax"} and {t.kernel for t in found} == {"fused", "split"}
    ordered = warm.distinct(units)
    merges = [u.launch.kernel.endswith("merge") for u in ordered]
    assert merges == sorted(merges)  # the scans first


def test_a_tuned_argmax_entry_drives_only_the_argmax(tmp_path, monkeypatch):
    gpu = plans.Hardware(sms=132, warp_size=32, name="Argmax GPU 1")
    best = plan_table.Tunables("fused", 2048, 4, selection="argmax")
    entry = plan_table.TunedShape("bfloat16", 1, 151936, 1, best, median_us=3.0, heuristic_us=5.0)
    table = plan_table.TunedTable(gpu.name, gpu.sms, gpu.warp_size, {}, "graph", (entry,))
    path = tmp_path / "t.json"
    path.write_text(table.to_json())
    monkeypatch.setenv(plan_table.PLANS_ENV, str(path))
    assert plan_table.TunedTable.from_json(path.read_text()) == table
    assert plan_table.best_plan(2, 129280, 1, BF16, gpu, "argmax") == best.plan_for(2, 129280, 1, gpu, 2)
    assert plan_table.best_plan(2, 129280, 1, BF16, gpu) == plans.choose(
        2, 129280, 1, gpu, 2
    )  # top-k: heuristic
    assert plan_table.tuned_entry(2, 129280, 1, BF16, gpu, "argmax") == entry
    assert plan_table.tuned_entry(2, 129280, 1, BF16, gpu) is None


def test_perfsuite_variants_lists_it(capsys):
    assert cli.main(["variants"]) == 0
    assert "triton_argmax" in capsys.readouterr().out

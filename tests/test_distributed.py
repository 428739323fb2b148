"""Vocabulary-parallel selection (the tensor-parallel variants and case kind): shards, partials, TP variants
over gloo, the worker under torchrun, the launcher, the bytes models, the scenario files, the HTML fragment.

Multi-process tests run 2 gloo ranks on the CPU: one `torch.multiprocessing.spawn` with a FileStore for
the variants, one torchrun (through the launcher) for the worker's rows. The NCCL test needs 2 GPUs.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp

from perfsuite import kernels
from perfsuite.cases.protocol import run_case
from perfsuite.cases.tensor_parallel import launch, tp_runner
from perfsuite.cases.tensor_parallel.tp_runner import TensorParallelRunner
from perfsuite.correctness import parity
from perfsuite.measure.device import detect
from perfsuite.report import tp_section as report
from perfsuite.report.page import render_fragment
from perfsuite.results import rows as row_pieces
from perfsuite.results.rows import CaseFailed
from perfsuite.scenario.inputs import make_logits
from perfsuite.scenario.load import Case, ScenarioError, Timing, expand, load
from perfsuite.variants import tensor_parallel
from perfsuite.variants.tensor_parallel import Local, sharded, tp_base
from perfsuite.variants.tensor_parallel.tp_base import local_slice, padded_width, vocab_slice

ROOT = Path(__file__).resolve().parent.parent
F32, BF16 = torch.float32, torch.bfloat16
INF, NAN = float("inf"), float("nan")
TRITON_ON_CPU = kernels.availability(torch.device("cpu")) is None
EXACT = ["allgather_identity", "sharded_torch", "sharded_triton"]


# ------------------------------------------------------------------------------------------ inputs


def tied_across_shards(batch: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """Maxima tied on both shards of 2 ranks (and on the k-th place), lowest index must win."""
    x = make_logits("gaussian", batch, vocab, dtype, seed=3).float().clamp(-4, 4)
    half = -(-vocab // 2)
    x[:, [2, half + 1]] = 10.0  # the maximum, once per shard
    x[:, [1, half, half + 2, vocab - 1]] = 7.0  # the runner-up, on both shards
    return x.to(dtype)


def nonfinite(batch: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """Row 0: NaN on rank 1's shard; row 1: all -inf; row 2: rank 0's shard all -inf (a mask)."""
    x = make_logits("gaussian", 3, vocab, dtype, seed=4).float()
    x[0, vocab - 2] = NAN
    x[1] = -INF
    x[2, : -(-vocab // 2)] = -INF
    return x.to(dtype)


def gaussian(batch: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    return make_logits("gaussian", batch, vocab, dtype, seed=5)


# label: (builder, batch, vocab, k, dtype); shards of 2 ranks: uneven V, k wider than a shard, V < tp, B 0
INPUTS = {
    "ties-bf16": (tied_across_shards, 4, 1001, 4, BF16),
    "ties-f32-k1": (tied_across_shards, 4, 1000, 1, F32),
    "uneven-f32-k8": (gaussian, 3, 1001, 8, F32),
    "k-wider-than-shard": (gaussian, 2, 5, 4, BF16),
    "vocab-below-tp": (gaussian, 2, 1, 1, F32),
    "empty-batch": (gaussian, 0, 100, 2, BF16),
    "nonfinite": (nonfinite, 3, 9, 2, F32),
}


def build(label: str) -> tuple[torch.Tensor, int]:
    make, batch, vocab, k, dtype = INPUTS[label]
    return make(batch, vocab, dtype), k


def tp_names() -> list[str]:
    return [n for n in tensor_parallel.names() if n != "sharded_triton" or TRITON_ON_CPU]


# ------------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize("vocab", [1, 3, 10, 1001, 151666])
@pytest.mark.parametrize("tp", [1, 2, 3, 4, 8])
def test_shards_cover_the_vocabulary_in_order(vocab, tp):
    shards = [vocab_slice(vocab, tp, r) for r in range(tp)]
    assert all(s.padded_width == padded_width(vocab, tp) >= s.width >= 0 for s in shards)
    assert sum(s.width for s in shards) == vocab
    assert all(a.start + a.width == b.start for a, b in itertools.pairwise(shards))
    assert [s.width for s in shards] == sorted((s.width for s in shards), reverse=True)  # padding at the end


def test_local_slice_poisons_the_padding():
    assert [vocab_slice(151666, 4, r).width for r in range(4)] == [37917, 37917, 37917, 37915]
    full = torch.arange(10, dtype=F32)[None]
    shard = vocab_slice(10, 4, 3)  # one real column, two of padding
    local = local_slice(full, shard, row_pad=2)
    assert local.shape == (1, 3) and local[0, 0] == 9
    assert bool((local[0, 1:] == torch.finfo(F32).max).all())


def simulate(x: torch.Tensor, k: int, tp: int, use_triton: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """What the sharded variants compute, the all-gather replaced by a concatenation (one process)."""
    kind = "triton" if use_triton else "torch"
    wire, merge = getattr(sharded, f"{kind}_wire"), getattr(sharded, f"{kind}_merge")
    shards = [vocab_slice(x.shape[1], tp, rank) for rank in range(tp)]
    return merge(torch.cat([wire(local_slice(x, s)[:, : s.width], k, s) for s in shards], dim=1), k)


@pytest.mark.parametrize("use_triton", [False, pytest.param(True, marks=pytest.mark.triton)])
@pytest.mark.parametrize("tp", [2, 3, 4])
@pytest.mark.parametrize("label", ["ties-bf16", "ties-f32-k1", "uneven-f32-k8", "k-wider-than-shard"])
def test_merged_partials_are_the_exact_reference(label, tp, use_triton):
    if use_triton and not TRITON_ON_CPU:
        pytest.skip("Triton on the CPU needs TRITON_INTERPRET=1")
    x, k = build(label)
    ref = parity.truth(x, k)
    topk_p, topk_index = simulate(x, k, tp, use_triton)
    assert torch.equal(topk_index, ref.index)
    assert parity.check("exact", topk_p, topk_index, ref).verdict == "pass"


def test_merge_of_nonfinite_rows_follows_torch():
    x, k = build("nonfinite")
    topk_p, topk_index = simulate(x, k, 2, use_triton=False)
    assert bool(topk_p[:2].isnan().all()), "NaN row and all -inf row give NaN probabilities"
    assert topk_index[0, 0] == x.shape[1] - 2, "the NaN ranks first"
    assert bool(((topk_index >= 0) & (topk_index < x.shape[1])).all())
    ref = parity.truth(x, k)
    assert (
        torch.equal(topk_index[2], ref.index[2])
        and parity.check("exact", topk_p, topk_index, ref).verdict == "pass"
    )


def test_bytes_models_per_rank():
    batch, vocab, k, tp = 16, 151936, 8, 4
    for name in ("allgather_full_softmax", "allgather_identity"):
        comm = tensor_parallel.get(name).comm_bytes(batch, vocab, k, BF16, tp)
        assert comm == batch * vocab * (tp - 1) // tp * 2  # B * V * (tp - 1) / tp * s
    uneven = tensor_parallel.get("allgather_identity").comm_bytes(1, 151666, 1, BF16, 4)
    assert uneven == 3 * 37917 * 2  # padded slices travel whole
    assert (
        tensor_parallel.get("sharded_torch").comm_bytes(batch, vocab, k, BF16, tp)
        == (tp - 1) * batch * (2 + 2 * k) * 4
    )
    parts = sharded.rank_plan(batch, vocab, k, tp, 2).n_splits
    triton = tensor_parallel.get("sharded_triton").comm_bytes(batch, vocab, k, BF16, tp)
    assert triton == (tp - 1) * batch * parts * (2 + 2 * k) * 4
    for name in tensor_parallel.names():
        variant = tensor_parallel.get(name)
        assert variant.comm_bytes(batch, vocab, k, BF16, 1) == 0, "one rank communicates nothing"
        assert variant.traffic(batch, vocab, k, BF16, tp).total > batch * vocab // tp * 2
    hbm = {
        n: tensor_parallel.get(n).traffic(batch, vocab, k, BF16, tp).total for n in tensor_parallel.names()
    }
    assert hbm["sharded_triton"] < hbm["sharded_torch"] < hbm["allgather_identity"]
    assert hbm["sharded_torch"] < hbm["allgather_full_softmax"]


def test_registry_claims():
    assert tensor_parallel.names()[0] == tensor_parallel.BASELINE == "allgather_full_softmax"
    assert {n: tensor_parallel.get(n).accuracy for n in tensor_parallel.names()} == {
        "allgather_full_softmax": "rounded",
        "allgather_identity": "exact",
        "sharded_torch": "exact",
        "sharded_triton": "exact",
    }
    with pytest.raises(KeyError, match="sharded_torch"):
        tensor_parallel.get("sharded")


def test_scenario_files(tmp_path):
    quick = load(ROOT / "scenarios" / "tp_quick.toml")
    assert quick.device == "cpu" and {c.tp for c in expand(quick)} == {2}
    assert expand(quick) and all(c.variant in tensor_parallel.names() for c in expand(quick))
    expanded = expand(load(ROOT / "scenarios" / "tp_models.toml"))
    assert {c.tp for c in expanded} == {2, 4, 8} and {c.dtype for c in expanded} == {"bfloat16"}
    assert {c.topk for c in expanded} == {1, 8} and min(c.batch for c in expanded) == 1
    assert max(c.batch for c in expanded) == 64 and 151666 in {c.vocab for c in expanded}
    with pytest.raises(ScenarioError, match=r"unknown variant 'sharded' .*, allgather_full_softmax"):
        load(_scenario(tmp_path, ["sharded"]))


def _scenario(where: Path, names: list[str], tps=(2,)) -> str:
    path = where / "tp_tiny.toml"
    path.write_text(TINY.format(variants=json.dumps(names), tp=json.dumps(list(tps))))
    return str(path)


def test_rows_have_the_single_device_columns():
    case = Case("s", "identity", "eager", "bfloat16", 100, 1, 1, "gaussian")
    env = {"scenario": "s", "backend": "cpu"}
    single = row_pieces.case_row(case, env)
    tp_row = tp_runner.case_row(
        Case("s", "sharded_torch", "eager", "bfloat16", 100, 1, 1, "gaussian", tp=2), env, "gloo"
    )
    assert set(single) <= set(tp_row) and tp_row["tp"] == 2 and tp_row["backend_pg"] == "gloo"
    assert tp_row["accuracy"] == "exact"


def test_tp_html_compares_allgather_with_partials():
    shape = {"status": "ok", "dtype": "bfloat16", "vocab": 32000, "topk": 1}
    measured = [("allgather_full_softmax", 50.0, 32000), ("sharded_torch", 20.0, 16)]
    rows = [
        {**shape, "variant": v, "tp": tp, "batch": b, "median_us": us, "comm_bytes_model": comm * b}
        for tp in (2, 4)
        for b in (1, 16)
        for v, us, comm in measured
    ]
    frame = pd.DataFrame([*rows, {"variant": "identity", "status": "ok", "tp": 1, "median_us": 1.0}])
    text = render_fragment(report.section(frame))
    assert text.count("plotly-graph-div") == 2 and "<html" not in text and "<script src" not in text
    table = report.comparison(report.tp_rows(frame))
    assert (table["speedup"] == 2.5).all()
    assert (table["partials bytes/rank"] < table["all-gather bytes/rank"]).all()
    assert "No tensor-parallel rows" in render_fragment(report.section(frame[frame["variant"] == "identity"]))


# ------------------------------------------------------------------------- 2 gloo ranks, spawned


def _broken(local: Local, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fails on rank 1 only (before any collective); rank 0 returns something."""
    if local.group.rank == 1:
        raise RuntimeError("broken on purpose")
    batch = local.padded.shape[0]
    return torch.zeros(batch, k), torch.zeros(batch, k, dtype=torch.int64)


def _rank_main(rank: int, world: int, store: str, out: str) -> None:
    """One rank: every TP variant on every input; and a phase that fails on rank 1 only."""
    g = tp_base.init("cpu", f"file://{store}", rank, world)
    results: dict[str, object] = {}
    for label in INPUTS:
        x, k = build(label)
        shard = vocab_slice(x.shape[1], world, rank)
        local = Local(local_slice(x, shard, row_pad=3), shard, g)
        for name in tp_names():
            results[f"{label}/{name}"] = tensor_parallel.get(name)(local, k)
    worker = TensorParallelRunner(g, detect("cpu"), {"copy_gbps": 1.0})
    try:
        worker._agreed(lambda: 1 / 0 if rank == 1 else 1)
    except CaseFailed as failed:
        results["agreed"] = str(failed)
    tensor_parallel._registry()["broken"] = dataclasses.replace(
        tensor_parallel.get("sharded_torch"), name="broken", select=_broken
    )
    timing = Timing(warmup=1, reps=3, max_seconds=0.01, l2="hot")
    for name in ("broken", "sharded_torch"):
        case = Case("t", name, "eager", "bfloat16", 1001, 3, 4, "ties", timing=timing, tp=world)
        results[f"run/{name}"] = run_case(worker, case)
    torch.save(results, os.path.join(out, f"rank{rank}.pt"))
    g.barrier()
    tp_base.close()


@pytest.fixture(scope="module")
def spawned(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("gloo")
    mp.spawn(_rank_main, args=(2, str(tmp / "store"), str(tmp)), nprocs=2, join=True)
    return [torch.load(tmp / f"rank{r}.pt") for r in range(2)]


@pytest.mark.parametrize("label", list(INPUTS))
def test_tp_variants_give_the_reference_on_every_rank(spawned, label):
    x, k = build(label)
    ref = parity.truth(x, k)
    for name in tp_names():
        variant = tensor_parallel.get(name)
        (p0, i0), (p1, i1) = (spawned[r][f"{label}/{name}"] for r in range(2))
        assert torch.equal(i0, i1) and torch.equal(p0.view(torch.int32), p1.view(torch.int32)), name
        assert p0.shape == i0.shape == (x.shape[0], k) and p0.dtype == F32 and i0.dtype == torch.int64
        check = parity.check(variant.accuracy, p0, i0, ref)
        assert check.verdict in ("pass", "n/a"), f"{name}: {check.problem}"
        if variant.accuracy == "exact":
            rows_ok = ref.finite
            assert torch.equal(i0[rows_ok], ref.index[rows_ok]), f"{name}: lowest index across ranks"
        if label == "nonfinite" and name != "allgather_full_softmax":
            assert bool(p0[:2].isnan().all()), name


def test_a_phase_failing_on_one_rank_fails_on_every_rank(spawned):
    assert spawned[0]["agreed"] == spawned[1]["agreed"]
    assert spawned[0]["agreed"].startswith("rank 1: ZeroDivisionError")


def test_a_case_failing_on_one_rank_is_an_error_row_and_the_sweep_goes_on(spawned):
    for rank in range(2):
        broken, fine = spawned[rank]["run/broken"], spawned[rank]["run/sharded_torch"]
        assert broken["status"] == "error" and broken["reason"] == "rank 1: RuntimeError: broken on purpose"
        assert fine["status"] == "ok" and fine["verdict"] == "pass" and fine["ranks_agree"] is True
        assert fine["samples"] >= 3 and fine["comm_bytes_model"] == (2 + 2 * 4) * 4 * 3


# ------------------------------------------------------------------ the worker under torchrun


@pytest.fixture(autouse=True)
def two_cpu_ranks(monkeypatch):
    monkeypatch.setenv(launch.MAX_CPU_RANKS_ENV, "2")


TINY = """
name = "tp_tiny"
device = "auto"
[[sweep]]
variants = {variants}
paths = ["eager"]
dtypes = ["bfloat16"]
vocab = [1001]
batch = [0, 3]
topk = [1, 4]
logits = ["ties"]
tp = {tp}
[timing]
warmup = 1
reps = 3
max_seconds = 0.02
l2 = "hot"
"""


def test_launcher_runs_the_worker_and_skips_what_cannot_run(tmp_path):
    names = [*tp_names(), "identity"]
    path = _scenario(tmp_path, names, tps=(2, 4))
    todo = expand(load(path))
    env = {"scenario": "tp_tiny", "backend": "cpu", "copy_gbps": 10.0}
    out = tmp_path / "out"
    got = list(launch.run_tp_cases(path, todo, out, env))
    assert sorted(r["case_id"] for r in got) == sorted(c.case_id for c in todo)
    by_id = {r["case_id"]: r for r in got}
    for case in todo:
        row = by_id[case.case_id]
        assert row["tp"] == case.tp and row["backend_pg"] == "gloo" and row["scenario"] == "tp_tiny"
        if case.tp == 4:
            assert row["status"] == "skipped" and "tp 4 needs 4 ranks" in row["reason"]
        elif case.variant == "identity":
            assert row["status"] == "skipped" and "not a tensor-parallel variant" in row["reason"]
        else:
            assert row["status"] == "ok", row["reason"]
            assert row["verdict"] == ("n/a" if case.batch == 0 else "pass") and row["ranks_agree"] is True
            assert row["median_us"] > 0 and row["samples"] >= 3 and row["parity_ranks"] == 2
            assert row["comm_bytes_model"] == tensor_parallel.get(case.variant).comm_bytes(
                case.batch, case.vocab, case.topk, BF16, 2
            )
            assert row["hbm_bytes_model"] == row["bytes_model"] > 0 or case.batch == 0
    written = (out / "tp" / "tp2.jsonl").read_text().splitlines()
    assert len(written) == sum(c.tp == 2 for c in todo), "one row per case: rank 0 writes, rank 1 does not"


GATHERED = ("allgather_full_softmax", "allgather_identity_engine_order")
EXTERNAL = ("allgather_selectors_for_tests:exact_topk", "allgather_selectors_for_tests:argmax_wrong")
MIXED = """
name = "tp_mixed"
device = "cpu"
[inputs.files]
mine = "x.pt"
[[sweep]]
variants = {variants}
dtypes = ["bfloat16"]
vocab = [1001]
batch = [0, 3]
topk = [1]
logits = ["ties"]
tp = [2]
[[sweep]]
variants = ["allgather_full_softmax", "sharded_torch"]
dtypes = ["bfloat16"]
batch = [3]
topk = [4]
logits = ["file:mine"]
tp = [2]
[timing]
warmup = 1
reps = 3
max_seconds = 0.02
l2 = "hot"
"""


def test_any_selector_runs_after_the_all_gather_and_logits_come_from_a_file(tmp_path, monkeypatch):
    """`allgather_<selector>`: a built-in or an engine's own kernel after the all-gather, in the torchrun
    workers (which import the engine's module themselves), judged like any tensor-parallel variant; and a
    `file:NAME` kind reaches the workers: every rank reads the same rows of the file. One launch for both."""
    data = str(Path(__file__).parent / "data")
    monkeypatch.syspath_prepend(data)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [data, os.environ.get("PYTHONPATH")])))
    torch.save(torch.randn(6, 1001, generator=torch.Generator().manual_seed(0)), tmp_path / "x.pt")
    path = tmp_path / "tp_mixed.toml"
    path.write_text(MIXED.format(variants=json.dumps([*GATHERED, *EXTERNAL])))
    todo = expand(load(path))
    from_file = [c for c in todo if c.logits == "file:mine"]
    assert len(from_file) == 2 and {c.vocab for c in from_file} == {1001}
    env = {"scenario": "tp_mixed", "backend": "cpu", "copy_gbps": 10.0}
    got = list(launch.run_tp_cases(str(path), todo, tmp_path / "out", env))
    assert len(got) == len(todo)
    measured = {r["variant"]: r for r in got if r["batch"] == 3 and r["logits"] == "ties"}
    assert set(measured) == {*GATHERED, *EXTERNAL}
    assert all(r["status"] == "ok" for r in measured.values()), [r["reason"] for r in measured.values()]
    assert measured["allgather_selectors_for_tests:exact_topk"]["verdict"] == "pass"
    assert measured["allgather_identity_engine_order"]["verdict"] == "pass"
    assert measured["allgather_selectors_for_tests:argmax_wrong"]["verdict"] == "fail"  # a wrong argmax
    for row in (r for r in got if r["logits"] == "file:mine"):
        assert row["status"] == "ok", row["reason"]
        assert row["verdict"] == "pass" and row["ranks_agree"] is True


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("allgather_selectors_for_tests:undeclared", "no contract declared"),
        ("allgather_no_such_selector", "unknown variant 'allgather_no_such_selector'"),
    ],
)
def test_a_gathered_selector_that_cannot_load_is_one_line(tmp_path, monkeypatch, name, expected):
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "data"))
    path = _scenario(tmp_path, [name], tps=(2,))
    with pytest.raises(ScenarioError) as info:
        load(path)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_launcher_gives_skipped_rows_when_the_launch_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "TORCHRUN", (sys.executable, "-c", "import sys; sys.exit(3)", "--"))
    path = _scenario(tmp_path, ["sharded_torch"])
    todo = expand(load(path))
    got = list(launch.run_tp_cases(path, todo, tmp_path / "out", {"backend": "cpu"}))
    assert len(got) == len(todo) and all(r["status"] == "skipped" for r in got)
    assert all("launch failed (torchrun exit 3" in r["reason"] for r in got)


def test_launcher_needs_one_gpu_per_rank(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    path = _scenario(tmp_path, ["sharded_torch"])
    todo = expand(load(path))
    got = list(launch.run_tp_cases(path, todo, tmp_path / "out", {"backend": "cuda"}))
    assert all(r["status"] == "skipped" and "1 GPU(s) visible" in r["reason"] for r in got)
    assert all(r["backend_pg"] == "nccl" for r in got)


def test_launcher_times_out_into_error_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "TORCHRUN", (sys.executable, "-c", "import time; time.sleep(60)", "--"))
    monkeypatch.setattr(launch, "BASE_TIMEOUT_S", 1.0)  # 1 s, and 2 x max_seconds (0.02 s) per case
    monkeypatch.setattr(launch, "CASE_TIMEOUT_S", 0.0)
    path = _scenario(tmp_path, ["sharded_torch"])
    todo = expand(load(path))
    got = list(launch.run_tp_cases(path, todo, tmp_path / "out", {"backend": "cpu"}))
    assert all(r["status"] == "error" and "timed out after 1 s" in r["reason"] for r in got)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL/RCCL needs 2 GPUs (one per rank)")
def test_launcher_over_nccl(tmp_path):
    path = _scenario(tmp_path, tensor_parallel.names())
    todo = expand(load(path))
    env = {"scenario": "tp_tiny", "backend": detect().backend, "copy_gbps": float("nan")}
    got = list(launch.run_tp_cases(path, todo, tmp_path / "out", env))
    assert all(r["status"] == "ok" and r["backend_pg"] == "nccl" for r in got), [r["reason"] for r in got]
    assert all(r["verdict"] in ("pass", "n/a") and r["ranks_agree"] for r in got)

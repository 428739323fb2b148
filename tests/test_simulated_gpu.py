"""The simulated GPU (`perfsuite.simulated_gpu`): what it says it is, the CUDA rules it enforces, and the GPU
code paths of perfsuite run on it (the eight findings of the first-GPU-contact review among them)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from perfsuite import cli, simulated_gpu, variants
from perfsuite.compare.match import compare, load_side
from perfsuite.core import machine
from perfsuite.core.settings import Timing
from perfsuite.kernels import plan as plans
from perfsuite.measure import device, execution, memory, timing
from perfsuite.results.run import load_run
from perfsuite.scenario import inputs
from perfsuite.simulated_gpu import runtime
from perfsuite.tools import profiling

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a real GPU is present")

SCENARIO = """
name = "sim"
device = "auto"
[[sweep]]
variants = {variants}
paths = ["eager", "graph", "compile"]
dtypes = ["bfloat16"]
vocab = [{vocab}]
batch = [2]
topk = [1, 4]
logits = ["gaussian"]
[timing]
warmup = 1
reps = 3
max_seconds = 0.01
graph_unroll = 2
l2 = "{l2}"
"""
EVERY_VARIANT = '["full_softmax", "argmax_ones", "identity", "triton_fused", "triton_split", "triton_auto"]'


def _scenario(folder: Path, l2: str = "cold", variants: str = EVERY_VARIANT, vocab: int = 1500) -> Path:
    path = folder / "s.toml"
    path.write_text(SCENARIO.format(l2=l2, variants=variants, vocab=vocab))
    return path


def test_each_model_says_what_it_is(simulated):
    info = device.detect()
    rocm = simulated.backend == "rocm"
    assert info.is_gpu and info.simulated and info.name.endswith("(simulated)")
    assert info.backend == ("rocm" if rocm else "cuda")
    assert info.arch == ("gfx942:sramecc+:xnack-" if rocm else "sm_90")
    assert info.runtime == (f"HIP {simulated.runtime}" if rocm else f"CUDA {simulated.runtime}")
    assert info.peak_gbps == (5300.0 if rocm else 4800.0)
    assert info.graph_unroll_cap == (8 if rocm else 64)
    assert info.cache_bytes == (256 << 20 if rocm else 64 << 20)  # MI300X: the Infinity Cache counts
    hw = plans.hardware("cuda:0")
    assert (hw.sms, hw.warp_size) == ((304, 64) if rocm else (132, 32))
    free, total = torch.cuda.mem_get_info()
    assert total == simulated.total_memory and 0 < free <= machine.host_available_bytes()


def test_uninstall_gives_the_cpu_back():
    with simulated_gpu.simulated("h200"):
        assert torch.cuda.is_available() and device.detect().simulated
    assert not torch.cuda.is_available() and simulated_gpu.active() is None
    assert device.detect().backend == "cpu" and torch.version.hip is None
    assert torch.zeros(2).device.type == "cpu"


def test_unknown_model_is_one_clear_line():
    command, env = [sys.executable, "-m", "perfsuite", "variants"], {**os.environ, simulated_gpu.ENV: "a100"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "unknown simulated GPU 'a100'; known: h200, mi300x" in proc.stderr


def test_device_tensors_live_on_the_host_and_say_cuda(gpu):
    x = torch.arange(6.0, device="cuda").reshape(2, 3)
    assert x.device == torch.device("cuda", 0) and x.is_cuda and x.get_device() == 0
    host = x.cpu()
    assert host.device.type == "cpu" and not host.is_cuda
    host[0, 0] = 100.0  # a copy, not the device tensor
    assert x[0, 0].item() == 0.0
    assert (x + 1).is_cuda and x.to(torch.float16).is_cuda and host.to("cuda").is_cuda
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        _ = x + host


def _refused(step) -> str:
    """Capture `step` under `torch.cuda.graph`; the message of the error that invalidated the capture.
    As on CUDA, ending the invalidated capture raises on top of it and leaves the side stream current."""
    graph = torch.cuda.CUDAGraph()
    invalidated = pytest.raises(runtime.CaptureInvalidated, match="previous error during capture")
    with invalidated as ended, torch.cuda.graph(graph):
        step()
    first = ended.value.__context__
    assert isinstance(first, runtime.CaptureViolation), repr(first)
    assert "operation not permitted when stream is capturing" in str(first)
    assert torch.cuda.current_stream() is not torch.cuda.default_stream()  # torch.cuda.graph's side stream
    torch.cuda.set_stream(torch.cuda.default_stream())
    assert runtime.state().capture is None and not runtime.state().invalidated  # the capture is over
    with pytest.raises(RuntimeError, match="never captured"):
        graph.replay()
    return str(first)


REFUSED = {  # what CUDA refuses in a capture, on x (a [4, 8] device tensor), and what the error names
    ".item()": (lambda x: x.sum().item(), "item copies a device value to the host"),
    "bool()": (lambda x: bool(x.max() > 0), "__bool__ copies a device value"),
    ".cpu()": (lambda x: x.cpu(), "cpu copies device memory to the host"),
    ".tolist()": (lambda x: x[0].tolist(), "tolist copies a device value"),
    "nonzero": (lambda x: x.nonzero(), "nonzero copies a device value"),
    "synchronize": (lambda x: torch.cuda.synchronize(), "torch.cuda.synchronize"),
    "upload": (lambda x: torch.ones(4, 8).to("cuda"), "to copies pageable host memory to the device"),
    "torch.tensor": (lambda x: torch.tensor([1.0, 2.0], device="cuda"), "tensor copies pageable host memory"),
    # output sizes that depend on device data, whatever Python reaches them through (indexing calls aten)
    "x[x > 0]": (lambda x: x[x > 0], "boolean mask"),
    "x[mask, :2]": (lambda x: x[x[:, 0] > 0, :2], "boolean mask"),
    "x[mask] = values": (lambda x: x.__setitem__(x > 0, x.abs()[x > 0]), "boolean mask"),
    "torch.where(cond)": (lambda x: torch.where(x > 0), "aten.nonzero"),
    "argwhere": (lambda x: torch.argwhere(x), "aten.nonzero"),
    "unique_consecutive": (lambda x: torch.unique_consecutive(x), "aten.unique_consecutive"),
    "masked_select": (lambda x: x.masked_select(x > 0), "copies a device value"),
    # a host tensor or a Python list as an index is copied to the device first: a pageable upload
    "x[torch.tensor([0, 2])]": (lambda x: x[torch.tensor([0, 2])], "an index on the host"),
    "x[[0, 2]]": (lambda x: x[[0, 2]], "an index on the host"),
    "x[:, [1, 3]]": (lambda x: x[:, [1, 3]], "an index on the host"),
    "x[host] = 0": (lambda x: x.__setitem__(torch.tensor([1]), 0.0), "an index on the host"),
}


def test_capture_refuses_host_syncs_uploads_and_sizes_read_back(gpu):
    x = torch.randn(4, 8, device="cuda")
    x[0, 0] = 1.0
    for what, (step, reason) in REFUSED.items():
        eager = step(x.clone())  # fine outside a capture, and on the device
        assert not isinstance(eager, torch.Tensor) or eager.is_cuda or what == ".cpu()", what
        assert reason in _refused(functools.partial(step, x)), what


def test_both_simulated_gpus_refuse_the_two_patterns(simulated):
    """`x[x > 0]` and `x[torch.tensor([0, 2])]` on the H200 and on the MI300X (HIP graphs, same rules)."""
    x = torch.randn(4, 8, device="cuda")
    assert "boolean mask" in _refused(lambda: x[x > 0])
    assert "an index on the host" in _refused(lambda: x[torch.tensor([0, 2])])


def test_capture_keeps_indexing_that_stays_on_the_device(gpu):
    """What CUDA captures: device indices, ints and slices, `x[mask] = scalar` (masked_fill, no sync),
    `x[True]`, a 0-dim host index (read as an int); each replays the eager answer."""
    x = torch.randn(4, 8, device="cuda")
    rows = torch.arange(4, device="cuda")[:, None]
    cols = torch.tensor([[1, 3]] * 4).to("cuda")

    def fill() -> torch.Tensor:
        y = x.clone()
        y[y > 0] = 0.0
        return y

    steps = {
        "device index": lambda: x[rows, cols] * 1,
        "int and slice": lambda: x[2, 1:5] * 1,
        "x[mask] = scalar": fill,
        "x[True]": lambda: x[True] * 1,
        "0-dim host index": lambda: x[torch.tensor(2)] * 1,
        "where(cond, a, b)": lambda: torch.where(x > 0, x, 0.0),
    }
    for what, step in steps.items():
        eager = step()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = step()
        graph.replay()
        assert torch.equal(out, eager), what
    assert torch.cuda.current_stream() is torch.cuda.default_stream()  # a good capture restores it


def test_a_swallowed_violation_still_invalidates_the_capture(gpu):
    """As on CUDA: the capture is broken even when the code catches the error and goes on."""
    x = torch.randn(8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    invalidated = pytest.raises(runtime.CaptureInvalidated, match=r"the first: TensorBase\.item copies")
    with invalidated, torch.cuda.graph(graph):
        with contextlib.suppress(RuntimeError):
            x.sum().item()
        y = x * 2
    torch.cuda.set_stream(torch.cuda.default_stream())
    with pytest.raises(RuntimeError, match="never captured"):
        graph.replay()
    assert y.shape == x.shape


def test_a_failed_capture_leaves_nothing_behind(gpu):
    """A failed capture, then a good one in the same process: the second records only its own work,
    replays right, and the memory the failed one wrote has its old contents back."""
    x = torch.arange(8.0, device="cuda")
    static, failed = torch.zeros(8, device="cuda"), torch.cuda.CUDAGraph()
    with pytest.raises(execution.GraphCaptureError, match="boolean mask"), execution.capturing(failed, gpu):
        static.copy_(x + 1)
        static[static > 3].sum()
    assert torch.equal(static, torch.zeros(8, device="cuda"))
    assert runtime.state().capture is None and torch.cuda.current_stream() is torch.cuda.default_stream()
    kernels_before = runtime.state().kernels
    graph = torch.cuda.CUDAGraph()
    with execution.capturing(graph, gpu):
        static.copy_(x * 3)
    assert len(graph.nodes) == 2  # x * 3 and the copy: nothing of the failed capture
    assert runtime.state().kernels == kernels_before  # a capture runs nothing that counts
    graph.replay()
    assert torch.equal(static, x * 3)
    with pytest.raises(RuntimeError, match="must be captured on a non-default stream"):
        graph.capture_begin()
    assert runtime.state().capture is None


def _syncs(logits: torch.Tensor, k: int):
    """A selector that reads a device value on the host: no capture."""
    if logits.sum().item() > 1e30:
        return None
    return variants.get("identity").select(logits, k)


def test_every_capture_routine_restores_the_stream_when_capture_fails(gpu):
    """torch.cuda.graph leaves its side stream current after a failed capture (the first block shows it
    here as on CUDA); perfsuite's capture routines all put the caller's stream back."""
    from perfsuite.cases.draft import DraftHead, DraftLoop, GraphCache, HeadConfig, LoopConfig
    from perfsuite.correctness.conformance import graph_replay as conformance_graph

    default = torch.cuda.default_stream()
    logits = torch.randn(2, 100, device="cuda")
    invalidated = pytest.raises(RuntimeError, match="previous error during capture")
    with invalidated, torch.cuda.graph(torch.cuda.CUDAGraph()):
        _syncs(logits, 1)
    assert torch.cuda.current_stream() is not default  # what the routines must undo
    torch.cuda.set_stream(default)

    with pytest.raises(execution.GraphCaptureError, match=r"graph capture failed: CaptureViolation: .*.item"):
        execution.prepare("graph", _syncs, logits, 1)
    assert torch.cuda.current_stream() is default, "execution.GraphCall"

    loop = DraftLoop(DraftHead(HeadConfig(512, 128, "float32"), gpu), _syncs, LoopConfig(2, 2, 4))
    with pytest.raises(execution.GraphCaptureError, match=r"draft graph capture failed \(batch 2\): Capture"):
        GraphCache(gpu).get(loop, 2, "sync")
    assert torch.cuda.current_stream() is default, "draft.loop.DraftGraph"

    syncing = dataclasses.replace(variants.get("identity"), name="syncs", select=_syncs)
    verdict = conformance_graph.replay_verdict(syncing, logits, 1)
    assert (verdict.finding, torch.cuda.current_stream()) == ("host_sync", default), "conformance.graph"
    assert "not permitted when stream is capturing" in verdict.detail


@pytest.mark.parametrize("name", ["identity", "triton_split"])
def test_replay_runs_on_the_captured_tensors(gpu, name):
    """As on a GPU: a replay reads what the captured input buffer holds now, writes the captured outputs,
    and never sees a tensor swapped in after the capture."""
    select = variants.get(name).select
    logits = inputs.make_logits("gaussian", 3, 700, torch.float32, device="cuda")
    call = execution.GraphCall(lambda: select(logits, 2), gpu)
    first = call()[1].clone()
    logits.copy_(torch.flip(logits, dims=[1]))  # new values in the captured buffer
    assert torch.equal(call()[1], 699 - first)
    stale = call()[1].clone()
    logits = torch.randn(3, 700, device="cuda")  # a new tensor: the graph never sees it
    assert torch.equal(call()[1], stale)


def test_allocator_statistics_count_what_a_call_allocates(gpu):
    logits = inputs.make_logits("gaussian", 8, 5000, torch.bfloat16, device="cuda")
    info = device.detect()
    identity = memory.peak_temp_bytes(lambda: variants.get("identity")(logits, 1), info)
    softmax = memory.peak_temp_bytes(lambda: variants.get("full_softmax")(logits, 1), info)
    assert identity >= 8 * 5000 * 4  # the fp32 exp temporary
    assert softmax >= 8 * 5000 * 2  # the bf16 probabilities
    before = torch.cuda.memory_allocated()
    kept = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() == before + (1 << 20)
    del kept
    assert torch.cuda.memory_allocated() == before


def test_cold_graph_sampler_times_every_variant(gpu):
    """Finding 1: the flush-only graph called bool() on the flush buffer: every cold graph case errored. The
    H200's run times the variants of EVERY_VARIANT so; here the others."""
    info = device.detect()
    logits = inputs.make_logits("gaussian", 2, 900, torch.bfloat16, device="cuda")
    for name in (n for n in variants.names() if f'"{n}"' not in EVERY_VARIANT):
        k = min(2, variants.get(name).max_k or 2)  # an argmax (max_k = 1) at its k
        prepared = execution.prepare("graph", variants.get(name).select, logits, k)
        sampler = timing.sampler_for(prepared, info, Timing(l2="cold", graph_unroll=2))
        assert sampler.sample() >= 0, name
        assert sampler.method == "graph replay x2"


def test_eager_launches_queue_behind_a_spin_that_covers_them(gpu):
    """Finding 7: with a cold cache the flush could finish before a slow-to-launch call was queued, so
    launch gaps counted as device time. The GPU now spins after the flush for twice the queueing time."""
    info = device.detect()
    slow_to_queue = 0.004

    def call():
        time.sleep(slow_to_queue)  # the host's launch overhead (a dozen ops, a Triton launch)
        return ()

    prepared = execution.PreparedCall("eager", call, call, graphed=False)
    sampler = timing.sampler_for(prepared, info, Timing(l2="cold"))
    log = runtime.state().log
    log.clear()
    sampler.sample()
    kinds = [kind for kind, _ in log]
    assert kinds[:3] == ["sleep", "event", "event"], kinds
    cycles = log[0][1]
    assert cycles >= timing.SPIN_MARGIN * slow_to_queue * timing.SPIN_CLOCK_HZ


def test_profile_of_a_graph_case_and_the_nvtx_range(gpu, tmp_path):
    """A Triton kernel's graph case profiled (eager cases and `call`'s ranges: test_profiling's GPU test)."""
    scenario, out = _scenario(tmp_path, variants='["triton_split"]'), tmp_path / "profile"
    only = ["--only", "*/graph/*k1*", "--calls", "1"]
    assert cli.main(["profile", str(scenario), "--out", str(out), *only]) == 0
    cases = pd.read_csv(out / "cases.csv")
    assert len(cases) == 1 and set(cases["status"]) == {"ok"}, cases[["case_id", "status", "reason"]]
    assert any(p.suffix == ".json" for p in out.rglob("*.pt.trace.json"))
    with profiling.marked("perfsuite.x.eager", gpu):
        pass
    assert ("range_pop", "perfsuite.x.eager") in runtime.state().log


def _every_variant_ran(out: Path, model: simulated_gpu.Profile) -> None:
    """The checks of a run of every variant, eager and graph (compile skipped), on a simulated model."""
    frame = load_run([out]).frame  # the run's constants (device, simulated) joined back from run.json
    assert set(frame["backend"]) == {model.backend} and frame["simulated"].all()
    assert len(frame) == 36
    compiled = frame[frame["path"] == "compile"]
    assert set(compiled["status"]) == {"skipped"}
    assert compiled["reason"].str.contains("torch.compile is not simulated").all()
    measured = frame[frame["path"] != "compile"]
    assert set(measured["status"]) == {"ok"}, measured[["case_id", "reason"]].to_string()
    assert measured["verdict"].isin(["pass", "inexact"]).all()
    assert measured["simulated"].all() and measured["device"].str.endswith("(simulated)").all()
    assert measured["timing"].str.endswith("(simulated GPU: host clock)").all()
    unroll = 2  # under both models' caps
    graph = measured[measured["path"] == "graph"]
    assert graph["timing"].str.startswith(f"graph replay x{unroll}").all()
    # the in-turn reference on both paths (captured in the graph like the variants), and compare's
    # second witness of each case from its per-round samples
    assert measured["reference"].str.startswith("logits exp, ").all()
    assert measured["vs_ref"].gt(0).all() and measured["vs_ref"].lt(np.inf).all()  # a ratio: NaN, 0, inf fail
    same = compare(load_side(out), load_side(out), 0.05).table
    timed = same[same["base_status"] == "ok"]
    assert len(timed) == len(measured) and timed["witness"].str.startswith("vs reference, ").all()
    # a run against itself: no shift, nothing to fail; a case whose rounds spread past 5 % cannot tell
    assert timed["shift"].eq(1).all() and set(timed["outcome"]) <= {"same", "cannot tell"}
    assert (out / "edge_cases.csv").exists()
    html = (out / "report.html").read_text()
    assert 'id="simulated"' in html and f"Simulated GPU ({model.name})" in html


def test_run_every_variant_eager_and_graph(gpu, tmp_path):
    """The H200, cold cache, in this process; the MI300X, hot cache: the env switch's run."""
    out = tmp_path / "out"
    assert cli.main(["run", str(_scenario(tmp_path, "cold")), "--out", str(out), "--no-progress"]) == 0
    _every_variant_ran(out, simulated_gpu.PROFILES["h200"])


def test_the_env_switch_runs_any_command_simulated(tmp_path):
    """PERFSUITE_SIMULATED_GPU in a fresh process (TRITON_INTERPRET unset: the switch sets it): every
    variant on the MI300X (its ROCm branches), with the checks of the H200's run."""
    env = {**os.environ, simulated_gpu.ENV: "mi300x"}
    env.pop("TRITON_INTERPRET", None)
    out, scenario = tmp_path / "out", _scenario(tmp_path, "hot")
    command = [sys.executable, "-m", "perfsuite", "run", str(scenario), "--out", str(out), "--no-progress"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _every_variant_ran(out, simulated_gpu.PROFILES["mi300x"])


def test_tune_fills_its_table_on_the_graph_path(gpu, tmp_path):
    """Finding 1 also left the tuned table empty (every cold graph candidate errored)."""
    scenario = _scenario(tmp_path, variants='["triton_auto"]', vocab=300)
    scenario.write_text(
        scenario.read_text()
        .replace('paths = ["eager", "graph", "compile"]', 'paths = ["graph"]')
        .replace("topk = [1, 4]", "topk = [1]")
    )
    table, csv = tmp_path / "tuned.json", tmp_path / "tune.csv"
    assert cli.main(["tune", str(scenario), "--out", str(table), "--csv", str(csv)]) == 0
    entries = json.loads(table.read_text())["entries"]
    assert len(entries) == 1 and entries[0]["vocab"] == 300
    rows = pd.read_csv(csv)
    assert len(rows) >= 5 and rows["verdict"].eq("pass").all(), rows[["verdict", "reason"]]
    assert json.loads(table.read_text())["device"].endswith("(simulated)")


def test_tests_with_cpu_expectations_name_the_cpu():
    """Finding 4: scenarios left at device "auto" ran on the GPU with CPU expectations (and ncu twice)."""
    import ast

    for module in ("test_run.py", "test_profiling.py", "test_counters.py", "test_long_runs.py"):
        nodes = ast.walk(ast.parse((Path(__file__).parent / module).read_text()))
        scenarios = [n.value for n in nodes if isinstance(n, ast.Constant) and "sweep]" in str(n.value)]
        assert scenarios, module
        for text in scenarios:
            assert 'device = "cpu"' in text, (module, text[:80])


def test_a_capture_computes_nothing_that_lasts(gpu):
    """As on a GPU: memory the capture wrote keeps its old contents, memory it allocated is garbage until the
    first replay, so an output read before any replay is wrong here as it is there."""
    x = torch.arange(8.0, device="cuda")
    static = torch.zeros(8, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
        static.copy_(y + 1)
    assert torch.equal(static, torch.zeros(8, device="cuda")) and torch.isnan(y).all()
    graph.replay()
    assert torch.equal(y, x * 2) and torch.equal(static, x * 2 + 1)

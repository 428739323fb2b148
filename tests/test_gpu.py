"""Paths and timing that need a GPU: CUDA graphs (HIP graphs on ROCm) and device-event timing. On a machine
without a GPU they run on the simulated H200 (the `gpu` fixture), the real-hardware figures excepted."""

from __future__ import annotations

import pytest
import torch
from support import HAS_GPU, needs_real_gpu

from perfsuite import variants
from perfsuite.core.settings import Timing
from perfsuite.correctness import parity
from perfsuite.measure import device, execution, memory, timing
from perfsuite.scenario import inputs

pytestmark = pytest.mark.usefixtures("gpu")
VOCAB, BATCH = (151936, 16) if HAS_GPU else (2048, 4)  # the simulated GPU interprets Triton: small shapes


def _runnable() -> list[str]:
    gpu = torch.device("cuda:0")
    return [n for n in variants.names() if variants.get(n).available(gpu) is None]


@pytest.mark.parametrize("k", [1, 8])
def test_graph_replay_gives_the_eager_answer(k):
    logits = inputs.make_logits("near_ties", BATCH, VOCAB, torch.bfloat16, device="cuda")
    ref = parity.truth(logits, k)
    for name in _runnable():
        variant = variants.get(name)
        if variant.unclaimed_k(k):  # an argmax (max_k = 1) at k 8
            continue
        eager = variant(logits, k)
        prepared = execution.prepare("graph", variant.select, logits, k)
        replayed = prepared.run()
        assert torch.equal(eager[1], replayed[1]), name
        assert torch.equal(eager[0], replayed[0]), name
        if variant.exact:
            assert parity.check(variant.accuracy, *replayed, ref).verdict == "pass", name


def test_graph_capture_failure_is_reported_clearly():
    logits = torch.randn(2, 100, device="cuda")

    def syncs(x, k):
        if x.sum().item() > 1e30:  # a host sync: not capturable
            return None
        return variants.get("identity").select(x, k)

    with pytest.raises(execution.GraphCaptureError, match="graph capture failed"):
        execution.prepare("graph", syncs, logits, 1)


@pytest.mark.parametrize("l2", ["cold", "hot"])
@pytest.mark.parametrize("path", ["eager", "graph"])
def test_device_samplers_time_in_microseconds(path, l2):
    info = device.detect("cuda:0")
    logits = inputs.make_logits("gaussian", 4, VOCAB, torch.bfloat16, device="cuda")
    prepared = execution.prepare(path, variants.get("identity").select, logits, 1)
    sampler = timing.sampler_for(prepared, info, Timing(l2=l2, graph_unroll=4))
    assert ("graph replay x4" if path == "graph" else "device events") == sampler.method
    samples = timing.measure(sampler, Timing(warmup=2, reps=10))
    assert 0 < samples.median_us < 1e6  # microseconds: a unit slip (ms or s) lands far outside


@needs_real_gpu
def test_gpu_peak_memory_comes_from_the_allocator():
    info = device.detect("cuda:0")
    logits = inputs.make_logits("gaussian", 8, 100000, torch.bfloat16, device="cuda")
    peak = memory.peak_temp_bytes(lambda: variants.get("identity")(logits, 1), info)
    assert peak >= 8 * 100000 * 4
    assert memory.copy_bandwidth(info.device).gbps > 100

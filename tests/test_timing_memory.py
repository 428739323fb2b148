"""Timing samplers and memory figures on the CPU; the GPU samplers in test_gpu.py."""

from __future__ import annotations

import math
import os
import signal
import time

import pytest
import torch

from perfsuite import variants
from perfsuite.core.settings import Timing
from perfsuite.measure import device, execution, memory, timing
from perfsuite.results.columns import BY_NAME as RESULT_COLUMNS
from perfsuite.scenario import inputs

CPU = device.detect("cpu")
MI300X = device.DeviceInfo("rocm", "cuda:0", "MI300X", "HIP 6.4", 5300.0, 256 << 20, llc_bytes=256 << 20)


def test_samples_report_median_and_percentiles():
    s = timing.Samples(tuple(x * 1e-6 for x in range(1, 101)), "test")
    assert abs(s.median_us - 50.5) < 1e-9
    assert 20 <= s.p20_us <= 21 and 80 <= s.p80_us <= 81


def test_cpu_sampler_times_the_call_and_not_the_flush_and_stops_at_the_time_limit():
    flushed = []
    sampler = timing.Sampler(lambda: time.sleep(0.002), lambda: flushed.append(time.sleep(0.01)))
    samples = timing.measure(sampler, Timing(warmup=1, reps=5, max_seconds=5))
    assert len(samples.seconds) == 5 and len(flushed) == 6
    assert 0.0015 < samples.median_us * 1e-6 < 0.009
    sampler = timing.Sampler(lambda: time.sleep(0.02), None)
    samples = timing.measure(sampler, Timing(warmup=0, reps=1000, max_seconds=0.01))
    assert 3 <= len(samples.seconds) < 10  # at least three samples


def test_sampler_for_cpu_uses_the_host_clock_and_the_cache_flush():
    x = inputs.make_logits("gaussian", 2, 100, torch.float32)
    prepared = execution.prepare("eager", variants.get("identity").select, x, 1)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # ops run in the calling thread: its CPU time
        cold = timing.sampler_for(prepared, CPU, Timing(l2="cold"))
        hot = timing.sampler_for(prepared, CPU, Timing(l2="hot"))
        torch.set_num_threads(2)  # a pool does the work: the wall clock
        pooled = timing.sampler_for(prepared, CPU, Timing(l2="cold"))
    finally:
        torch.set_num_threads(before)
    assert cold.method == "host thread CPU time" and cold.flush is not None and hot.flush is None
    assert pooled.method == "host perf_counter" and type(pooled) is timing.Sampler
    assert timing.flush_bytes(CPU) == 2 * CPU.cache_bytes


def test_the_thread_clock_leaves_out_time_the_thread_did_not_run():
    """A call that waits (as a call does while the scheduler runs another process on its core) costs
    the wall clock its wait and the thread's CPU clock nothing."""
    wall = timing.Sampler(lambda: time.sleep(0.02), None).sample()
    own = timing.ThreadTimeSampler(lambda: time.sleep(0.02), None).sample()
    assert wall >= 0.02 and own < 0.01


def test_sample_clock_feeds_measured_durations_to_pytest_benchmark():
    clock = timing.SampleClock()
    clock.use(timing.Sampler(lambda: time.sleep(0.001), None))
    t0 = clock()
    clock.advance()
    clock.advance()
    assert clock() - t0 == sum(clock.seconds) and len(clock.samples(skip=1).seconds) == 1


def test_peak_temporary_memory_on_cpu_shows_the_identity_temporary():
    """The asserted variants only (runs in the interpreter neither time Triton variants nor measure them)."""
    x = inputs.make_logits("gaussian", 8, 20000, torch.bfloat16)
    measured = {
        n: memory.peak_temp_bytes(lambda n=n: variants.get(n)(x, 1), CPU)
        for n in ("identity", "full_softmax", "argmax_ones")
    }
    assert measured["identity"] >= 8 * 20000 * 4  # the [B, V] fp32 exp temporary
    assert measured["full_softmax"] >= 8 * 20000 * 2  # the bf16 probabilities
    assert measured["argmax_ones"] < 8 * 20000  # no [B, V] temporary


def test_bandwidth_helpers_and_memory_fit(monkeypatch):
    assert memory.gbps(2e9, 1.0) == 2.0 and memory.percent(50, 200) == 25.0
    assert memory.percent(1, None) != memory.percent(1, None)  # NaN without a peak
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1 << 30)
    assert memory.fits(100 << 20, torch.device("cpu")) is None
    assert "GiB of cpu memory" in memory.fits(2 << 30, torch.device("cpu"))
    assert memory.copy_bandwidth("cpu", nbytes=8 << 20, reps=3).gbps > 0


def test_the_cold_cache_flush_only_reads_its_buffer():
    """No write to the flush buffer (`zero_()` left the cache full of its dirty lines): one sum into a
    preallocated scalar, its buffer twice the cache."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.seen.append(str(func))
            return func(*args, **(kwargs or {}))

    flush = timing.cache_flusher(CPU)
    assert isinstance(flush, timing.CacheFlush) and flush.buffer.numel() * 4 == timing.flush_bytes(CPU)
    version = flush.buffer._version
    with Ops() as ops:
        flush()
    assert ops.seen == ["aten.sum.IntList_out"] and flush.buffer._version == version
    assert float(flush.out) == 0.0 and not flush.buffer.any()
    h100 = device.DeviceInfo("cuda", "cuda:0", "NVIDIA H100", "CUDA 13.0", 3350.0, 64 << 20, "sm_90")
    assert timing.flush_bytes(h100) == 128 << 20 and timing.flush_bytes(MI300X) == 512 << 20


class ScriptedReplays:
    """Stands in for a graph sampler's replays: totals for the timed graph, flush-only times for the other."""

    def __init__(self, sampler: timing.GraphSampler, totals: list[float], flushes: list[float]):
        self.sampler, self.totals, self.flushes = sampler, iter(totals), iter(flushes)

    def __call__(self, replay) -> float:
        return next(self.totals if replay == self.sampler.graph.graph.replay else self.flushes)


def test_graph_sampler_subtracts_the_median_flush_of_the_timed_rounds(gpu, monkeypatch):
    body = lambda: (torch.ones(4, device=gpu),)  # noqa: E731
    sampler = timing.GraphSampler(body, timing.cache_flusher(device.detect("cuda:0")), gpu, unroll=2)
    # warm-up round first (a slow flush outlier that must not count), then 5 timed rounds; per replay of 2
    totals = [2.0, 2.0, 2.2, 2.0, 1.8, 0.3]
    flushes = [9.0, 1.0, 1.2, 0.8, 1.0, 3.0]
    monkeypatch.setattr(sampler, "timed", ScriptedReplays(sampler, totals, flushes))
    samples = timing.measure(sampler, Timing(warmup=1, reps=5, max_seconds=60))
    median_flush = 1.0 / 2  # median of the timed rounds' flush-only replays, per call
    expected = [max(t / 2 - median_flush, 0.0) for t in totals[1:]]
    assert samples.seconds == pytest.approx(expected)  # the last round clips at 0, none pays its own 3.0
    assert samples.seconds[0] == pytest.approx(0.5)  # its own flush (1.0 / 2) would have given the same
    assert samples.seconds[1] == pytest.approx(0.6)  # its own (1.2 / 2) would have given 0.5


def test_sample_clock_records_graph_samples_minus_the_median_flush_so_far(gpu, monkeypatch):
    body = lambda: (torch.ones(4, device=gpu),)  # noqa: E731
    sampler = timing.GraphSampler(body, timing.cache_flusher(device.detect("cuda:0")), gpu, unroll=1)
    replays = ScriptedReplays(sampler, [5.0, 3.0, 3.0, 3.0], [4.0, 1.0, 2.0, 3.0])
    monkeypatch.setattr(sampler, "timed", replays)
    clock = timing.SampleClock()
    clock.use(sampler)
    for _ in range(4):
        clock.advance()
    assert clock.seconds == pytest.approx([1.0, 0.5, 1.0, 0.5])  # 5 - 4, 3 - 2.5, 3 - 2, 3 - 2.5
    assert clock.samples(skip=1).seconds == tuple(clock.seconds[1:])  # what pytest-benchmark recorded
    assert sampler.settle([0.0] * 3) == pytest.approx((1.0, 1.0, 1.0))  # measure_in_turn's: minus 2.0


def test_copy_bandwidth_warms_up_and_probes_before_it_times(monkeypatch):
    log: list[str] = []
    timed = memory._time_copies

    def time_copies(dst, src, reps):
        log.append("timed")
        return timed(dst, src, reps)

    monkeypatch.setattr(memory, "_time_copies", time_copies)
    probe = lambda: log.append("probe") or {"sm_mhz": "1980"}  # noqa: E731
    copy = memory.copy_bandwidth("cpu", nbytes=4 << 20, reps=3, warmup_s=0.05, probe=probe)
    assert log == ["probe", "timed"] and copy.gbps > 0 and copy.during == {"sm_mhz": "1980"}
    assert copy.warmup_s >= 0.05
    cpu = memory.copy_bandwidth("cpu", nbytes=4 << 20, reps=3)  # a CPU: no warm-up, no probe
    assert cpu.warmup_s == 0 and cpu.during == {}


def test_copy_columns_carry_the_clocks_read_under_the_copies(monkeypatch):
    from perfsuite.measure import environment

    h200, mi300x = device.DeviceInfo("cuda", "cuda:0", "NVIDIA H200", "CUDA 13.0", 4800.0, 64 << 20), MI300X
    smi = {"sm_mhz": "1980", "mem_mhz": "3201", "max_sm_mhz": "1980", "temp_c": "41", "power_w": "118"}
    states = {h200: smi, mi300x: {"sm_mhz": "2100Mhz", "mem_mhz": "1300Mhz"}, CPU: {}}
    probed: list[object] = []

    def copy_bandwidth(device, probe=None):
        probed.append(probe)
        warm = (0.2, probe()) if probe else (0.0,)
        return memory.CopyBandwidth(4300.0, *warm)

    monkeypatch.setattr(memory, "copy_bandwidth", copy_bandwidth)
    monkeypatch.setattr(environment, "gpu_state", lambda info: states[info])
    environment.copy_columns.cache_clear()
    try:
        columns = {info: environment.copy_columns(info) for info in (h200, mi300x, CPU)}
    finally:
        environment.copy_columns.cache_clear()
    expected = {"copy_gbps": 4300.0, "copy_sm_mhz": 1980.0, "copy_mem_mhz": 3201.0, "copy_warmup_s": 0.2}
    assert columns[h200] == expected
    assert (columns[mi300x]["copy_sm_mhz"], columns[mi300x]["copy_mem_mhz"]) == (2100.0, 1300.0)
    assert probed[-1] is None and columns[CPU]["copy_warmup_s"] == 0.0  # a CPU: nothing to probe
    assert all(math.isnan(columns[CPU][c]) for c in ("copy_sm_mhz", "copy_mem_mhz"))
    assert set(columns[h200]) <= set(RESULT_COLUMNS)


class Counting(timing.Sampler):
    """A sampler that returns its call count (from 1) and records what `settle` was handed."""

    def __init__(self, every: int = 1):
        super().__init__(lambda: None, None)
        self.every, self.calls, self.settled_with = every, 0, None

    def sample(self) -> float:
        self.calls += 1
        return float(self.calls)

    def settle(self, seconds):
        self.settled_with = list(seconds)
        return tuple(2 * s for s in seconds)


def test_a_sampler_sampled_every_few_rounds_sits_the_others_out():
    every, always = Counting(every=4), Counting()
    measured = timing.measure_in_turn([always, every], Timing(warmup=0, reps=9, max_seconds=10))
    assert always.calls == 9 and every.calls == 3  # rounds 0, 4 and 8
    got = measured[1].seconds
    assert [i for i, s in enumerate(got) if not math.isnan(s)] == [0, 4, 8]
    assert every.settled_with == [1.0, 2.0, 3.0] and measured[1].taken().seconds == (2.0, 4.0, 6.0)
    assert measured[0].seconds == tuple(2.0 * (i + 1) for i in range(9))


def test_a_signal_during_a_profiler_session_waits_for_its_end():
    """SIGTERM (or SIGINT) inside `quiet_profile` is delivered once the session is closed (a session torn by
    KeyboardInterrupt crashed the process at exit), and the handler in place before is back."""

    class Stopped(Exception):
        pass

    def stop(*_: object) -> None:
        raise Stopped

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        finished = []
        with pytest.raises(Stopped), memory.quiet_profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            os.kill(os.getpid(), signal.SIGTERM)
            torch.ones(3).sum()
            finished.append(True)
        assert finished == [True] and signal.getsignal(signal.SIGTERM) is stop
    finally:
        signal.signal(signal.SIGTERM, previous)

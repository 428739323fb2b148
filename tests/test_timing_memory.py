"""Timing samplers and memory figures on the CPU; the GPU samplers in test_gpu.py."""

from __future__ import annotations

import time

import torch

from perfsuite import device, inputs, memory, paths, timing, variants
from perfsuite.settings import Timing

CPU = device.detect("cpu")


def test_samples_report_median_and_percentiles():
    s = timing.Samples(tuple(x * 1e-6 for x in range(1, 101)), "test")
    assert abs(s.median_us - 50.5) < 1e-9
    assert 20 <= s.p20_us <= 21 and 80 <= s.p80_us <= 81


def test_cpu_sampler_times_the_call_and_not_the_flush():
    flushed = []
    sampler = timing.Sampler(lambda: time.sleep(0.002), lambda: flushed.append(time.sleep(0.01)))
    samples = timing.measure(sampler, Timing(warmup=1, reps=5, max_seconds=5))
    assert len(samples.seconds) == 5 and len(flushed) == 6
    assert 0.0015 < samples.median_us * 1e-6 < 0.009


def test_measure_stops_at_the_time_limit_with_at_least_three_samples():
    sampler = timing.Sampler(lambda: time.sleep(0.02), None)
    samples = timing.measure(sampler, Timing(warmup=0, reps=1000, max_seconds=0.01))
    assert 3 <= len(samples.seconds) < 10


def test_sampler_for_cpu_uses_the_host_clock_and_the_cache_flush():
    x = inputs.make_logits("gaussian", 2, 100, torch.float32)
    prepared = paths.prepare("eager", variants.get("identity").select, x, 1)
    cold = timing.sampler_for(prepared, CPU, Timing(l2="cold"))
    hot = timing.sampler_for(prepared, CPU, Timing(l2="hot"))
    assert cold.method == "host perf_counter" and cold.flush is not None and hot.flush is None
    assert timing.flush_bytes(CPU) == 2 * CPU.cache_bytes


def test_sample_clock_feeds_measured_durations_to_pytest_benchmark():
    clock = timing.SampleClock()
    clock.use(timing.Sampler(lambda: time.sleep(0.001), None))
    t0 = clock()
    clock.advance()
    clock.advance()
    assert clock() - t0 == sum(clock.seconds) and len(clock.samples(skip=1).seconds) == 1


def test_peak_temporary_memory_on_cpu_shows_the_identity_temporary():
    x = inputs.make_logits("gaussian", 8, 20000, torch.bfloat16)
    measured = {
        n: memory.peak_temp_bytes(lambda n=n: variants.get(n)(x, 1), CPU)
        for n in variants.names()
        if variants.get(n).available(torch.device("cpu")) is None
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
    assert memory.copy_gbps("cpu", nbytes=8 << 20, reps=3) > 0

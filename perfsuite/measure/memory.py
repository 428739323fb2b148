"""Memory: bandwidth figures, the measured copy bandwidth, peak temporary memory and what fits."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile

from perfsuite import simulated_gpu
from perfsuite.core import machine
from perfsuite.measure.device import DeviceInfo, synchronize

MEMORY_HEADROOM = 0.85
"""Share of free memory a case may plan to use; the rest is left to the allocator and the runtime."""


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second)."""
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def percent(value: float, of: float | None) -> float:
    return 100.0 * value / of if of else float("nan")


COPY_WARMUP_S = 0.2
"""Seconds of copies a GPU runs before its copy bandwidth is timed: an idle GPU starts at idle clocks (an
H200 of this project's kind read 345 MHz SM idle, 1980 MHz under load). Simulated GPUs and CPUs: none."""
WARMUP_LOOK_S = 2e-3
"""Seconds of copies queued between two looks at the host clock during the warm-up."""


@dataclass(frozen=True)
class CopyBandwidth:
    """The measured copy bandwidth, and the state it was measured in."""

    gbps: float  # median of the timed copies, read + write bytes counted
    warmup_s: float  # seconds of copies run before timing (0: none, on a CPU)
    warmup_copies: int
    during: dict[str, object] = field(default_factory=dict)  # what `probe` read while the warm-up ran


def _time_copies(dst: torch.Tensor, src: torch.Tensor, reps: int) -> list[float]:
    """Seconds of each of `reps` copies: device events on a GPU, the host clock on a CPU."""
    times = []
    for _ in range(reps):
        if src.device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    return times


def copy_bandwidth(
    device: str,
    nbytes: int = 512 << 20,
    reps: int = 10,
    warmup_s: float | None = None,
    probe: Callable[[], dict[str, object]] | None = None,
) -> CopyBandwidth:
    """Achievable bandwidth: the median of `reps` device-to-device copies, read + write bytes counted. On a
    GPU they are timed after `warmup_s` (default `COPY_WARMUP_S`) of copies, and until `probe` (e.g. the
    clocks, read on a thread so it sees the device under load) has returned; on a CPU or a simulated GPU
    after one untimed copy (default 0 s)."""
    src = torch.empty(nbytes, dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if warmup_s is None:
        real_gpu = src.device.type == "cuda" and simulated_gpu.active() is None
        warmup_s = COPY_WARMUP_S if real_gpu else 0.0
    copies, warmed_s, during = 0, 0.0, {}
    if warmup_s > 0 or probe is not None:
        synchronize(src.device)
        start = time.perf_counter()
        dst.copy_(src)  # timed: sizes the warm-up's batches
        synchronize(src.device)
        one_copy_s = time.perf_counter() - start
        batch = max(1, int(WARMUP_LOOK_S / one_copy_s)) if one_copy_s > 0 else 1
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=1) as pool:
            reading = pool.submit(probe) if probe is not None else None
            while time.perf_counter() - start < warmup_s or (reading is not None and not reading.done()):
                for _ in range(batch):
                    dst.copy_(src)
                synchronize(src.device)
                copies += batch
            during = reading.result() if reading is not None else {}
        warmed_s = time.perf_counter() - start
    times = sorted(_time_copies(dst, src, reps))
    return CopyBandwidth(gbps(2 * nbytes, times[len(times) // 2]), warmed_s, copies, during)


def available_bytes(device: torch.device) -> int:
    """Free memory on the device (GPU: the driver's free figure; CPU: MemAvailable capped by the cgroup's
    memory limit, so a container's limit is honoured)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    return machine.host_available_bytes()


def fits(nbytes: int, device: torch.device, host_bytes: int = 0) -> str | None:
    """None when a case needing `nbytes` on `device` and `host_bytes` of host memory (reading its logits
    from a file) fits; else the reason it is skipped. On a CPU both come out of the same memory."""
    host = torch.device("cpu")
    needs = [(nbytes + host_bytes, host)] if device.type == "cpu" else [(nbytes, device), (host_bytes, host)]
    for need, where in needs:
        free = available_bytes(where) if need else 0
        if need > MEMORY_HEADROOM * free:
            return f"needs about {need / 2**30:.2f} GiB of {where.type} memory, {free / 2**30:.2f} GiB free"
    return None


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Mute file descriptor 2 (kineto logs every profiler start and stop there, with no switch for it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_temp_bytes(call: Callable[[], object], info: DeviceInfo) -> int:
    """Peak memory one call allocates beyond what exists before it (its outputs included): on a GPU the
    allocator's peak statistic; on a CPU (whose allocator keeps no statistics) the high-water mark of the
    profiler's allocation (+) and free (-) events, in order."""
    device = torch.device(info.device)
    if info.is_gpu:
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        call()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with native_stderr_silenced(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
    cpu = torch.autograd.DeviceType.CPU
    allocations = (e.nbytes() for e in events if e.name() == "[memory]" and e.device_type() == cpu)
    return max([0, *itertools.accumulate(allocations)])

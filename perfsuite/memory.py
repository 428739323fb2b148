"""Memory: bandwidth figures, the measured copy bandwidth, peak temporary memory and what fits."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from functools import cache

import torch
from torch.profiler import ProfilerActivity, profile

from perfsuite import machine
from perfsuite.device import DeviceInfo, synchronize

MEMORY_HEADROOM = 0.85
"""Share of free memory a case may plan to use; the rest is left to the allocator and the runtime."""


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second)."""
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def percent(value: float, of: float | None) -> float:
    return 100.0 * value / of if of else float("nan")


@cache
def copy_gbps(device: str, nbytes: int = 512 << 20, reps: int = 10) -> float:
    """Achievable bandwidth: median of device-to-device copies, read + write bytes counted."""
    src = torch.empty(nbytes, dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    if src.device.type == "cuda":
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
    else:
        import time

        for _ in range(reps):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    times.sort()
    return gbps(2 * nbytes, times[len(times) // 2])


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
        if not need:
            continue
        free = available_bytes(where)
        if need > MEMORY_HEADROOM * free:
            return f"needs about {need / 2**30:.2f} GiB of {where.type} memory, {free / 2**30:.2f} GiB free"
    return None


def _cpu_peak_from_profiler(prof: profile) -> int:
    """Peak of the running total of CPU allocations (+) and frees (-) the profiler recorded, in order."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        if event.device_type() == torch.autograd.DeviceType.CPU:
            running += event.nbytes()
            peak = max(peak, running)
    return peak


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


def peak_temp_bytes(call, info: DeviceInfo) -> int:
    """Peak memory one call allocates beyond what exists before it (its outputs included).

    GPU: the caching allocator's peak statistic. CPU: the profiler's allocation events (torch's CPU
    allocator keeps no statistics), replayed in order to find the high-water mark.
    """
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
    return _cpu_peak_from_profiler(prof)

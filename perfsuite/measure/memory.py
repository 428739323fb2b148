"""Memory: bandwidth figures, the measured copy bandwidth, peak temporary memory and what fits."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile

from perfsuite import simulated_gpu
from perfsuite.core import machine
from perfsuite.measure.device import DeviceInfo, synchronize

MEMORY_HEADROOM = 0.85  # the share of free memory a case may plan to use: the rest is the allocator's
# seconds of copies a GPU runs before its copy bandwidth is timed: an idle GPU starts at idle clocks (an H200
# of this project's kind read 345 MHz SM idle, 1980 MHz under load); simulated GPUs and CPUs: none
COPY_WARMUP_S = 0.2
WARMUP_LOOK_S = 2e-3  # seconds of copies queued between two looks at the host clock during the warm-up
Probe = Callable[[], dict[str, object]] | None


def gbps(nbytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (1e9 bytes per second)."""
    return nbytes / seconds / 1e9 if seconds > 0 else float("nan")


def percent(value: float, of: float | None) -> float:
    return 100.0 * value / of if of else float("nan")


@dataclass(frozen=True)
class CopyBandwidth:
    """The measured copy bandwidth, and the state it was measured in."""

    gbps: float  # median of the timed copies, read + write bytes counted
    warmup_s: float  # seconds of copies run before timing (0: none, on a CPU)
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
    device: str, nbytes: int = 512 << 20, reps: int = 10, warmup_s: float | None = None, probe: Probe = None
) -> CopyBandwidth:
    """The median of `reps` copies, read + write bytes counted, after `warmup_s` of copies (a real GPU's
    default: `COPY_WARMUP_S`) and until `probe` (the clocks, read on a thread under the load) returned."""
    src = torch.empty(nbytes, dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    if warmup_s is None:
        real_gpu = src.device.type == "cuda" and simulated_gpu.active() is None
        warmup_s = COPY_WARMUP_S if real_gpu else 0.0
    warmed_s, during = 0.0, {}
    if warmup_s > 0 or probe is not None:
        synchronize(src.device)
        start = time.perf_counter()
        dst.copy_(src)  # timed: sizes the warm-up's batches
        synchronize(src.device)
        one_copy_s = time.perf_counter() - start
        batch = max(1, int(WARMUP_LOOK_S / one_copy_s)) if one_copy_s > 0 else 1
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=1) as pool:
            reading = pool.submit(probe or dict)
            while time.perf_counter() - start < warmup_s or not reading.done():
                for _ in range(batch):
                    dst.copy_(src)
                synchronize(src.device)
            during = reading.result()
        warmed_s = time.perf_counter() - start
    times = sorted(_time_copies(dst, src, reps))
    return CopyBandwidth(gbps(2 * nbytes, times[len(times) // 2]), warmed_s, during)


def available_bytes(device: torch.device) -> int:
    """Free memory on the device (GPU: the driver's; CPU: MemAvailable capped by the cgroup's limit)."""
    return torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else machine.host_available_bytes()


def fits(nbytes: int, device: torch.device, host_bytes: int = 0) -> str | None:
    """None if `nbytes` on `device` and `host_bytes` on the host (on a CPU, one memory) fit, else why not."""
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


@contextlib.contextmanager
def quiet_profile(**options: object) -> Iterator[profile]:
    """`torch.profiler.profile(**options)` with kineto's stderr muted and SIGINT / SIGTERM held until the
    session is closed: a session torn by KeyboardInterrupt leaves its callbacks behind, and the process
    then crashes (SIGSEGV) on its way out after writing what it measured."""
    held: list[int] = []
    main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    handlers = {s: h for s, h in handlers.items() if h is not None}  # None: a handler set outside Python
    for number in handlers:
        signal.signal(number, lambda caught, _: held.append(caught))
    try:
        with native_stderr_silenced(), profile(**options) as session:
            yield session
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        for number in held:
            signal.raise_signal(number)


def peak_temp_bytes(call: Callable[[], object], info: DeviceInfo) -> int:
    """Peak memory one call allocates, its outputs included: a GPU allocator's peak; on a CPU the high-water
    mark of the profiler's allocation (+) and free (-) events, in order."""
    device = torch.device(info.device)
    if info.is_gpu:
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        call()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with quiet_profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
    cpu = torch.autograd.DeviceType.CPU
    allocations = (e.nbytes() for e in events if e.name() == "[memory]" and e.device_type() == cpu)
    return max([0, *itertools.accumulate(allocations)])

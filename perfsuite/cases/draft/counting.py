"""Kernels per draft cycle, from torch.profiler.

GPU: device activities (kernels, memcpy, memset) the profiler records for one cycle, and the host launch
calls that issued them (`cudaLaunchKernel`, `cudaGraphLaunch`, their HIP and driver-API twins): a captured
cycle runs as many kernels as an eager one but issues one graph launch. CPU: there are no device kernels,
so the count is the cycle's top-level aten ops (ops not called from inside another aten op), and there
are no launches. The simulated GPU counts its own kernels and launch calls (`perfsuite.simulated_gpu`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from perfsuite import simulated_gpu
from perfsuite.measure.device import synchronize
from perfsuite.measure.memory import native_stderr_silenced

LAUNCH_CALL = re.compile(r"(LaunchKernel|GraphLaunch|LaunchCooperativeKernel|Memcpy\w*Async|Memset\w*Async)")
GPU_UNIT = "device kernels (incl. memcpy/memset)"
CPU_UNIT = "top-level aten ops (cpu)"


@dataclass(frozen=True)
class KernelCount:
    """Per-cycle counts and what was counted."""

    kernels: float
    launches: float
    unit: str


def count_kernels(call: Callable[[], object], device: torch.device, cycles: int = 2) -> KernelCount:
    """Profile `cycles` calls of an already warmed-up `call` and return the counts per call."""
    gpu = device.type == "cuda"
    if gpu and simulated_gpu.active():
        return _simulated_count(call, cycles)
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if gpu else [ProfilerActivity.CPU]
    synchronize(device)
    with native_stderr_silenced(), profile(activities=activities) as prof:
        for _ in range(cycles):
            call()
        synchronize(device)
    if gpu:
        events = list(prof.profiler.kineto_results.events())
        device_types = (torch.autograd.DeviceType.CUDA, getattr(torch.autograd.DeviceType, "HIP", None))
        kernels = sum(1 for e in events if e.device_type() in device_types)
        launches = sum(
            1
            for e in events
            if e.device_type() == torch.autograd.DeviceType.CPU and LAUNCH_CALL.search(e.name())
        )
        return KernelCount(kernels / cycles, launches / cycles, GPU_UNIT)
    top_level = 0
    for event in prof.events():
        parent = event.cpu_parent
        if event.name.startswith("aten::") and (parent is None or not parent.name.startswith("aten::")):
            top_level += 1
    return KernelCount(top_level / cycles, float("nan"), CPU_UNIT)


def _simulated_count(call: Callable[[], object], cycles: int) -> KernelCount:
    """The simulated GPU's own count: ops that compute and Triton launches; a graph replay is one launch."""
    kernels, launches = simulated_gpu.kernel_counts()
    for _ in range(cycles):
        call()
    after_kernels, after_launches = simulated_gpu.kernel_counts()
    unit = f"{GPU_UNIT} {simulated_gpu.LABEL}"
    return KernelCount((after_kernels - kernels) / cycles, (after_launches - launches) / cycles, unit)

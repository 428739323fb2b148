"""A simulated GPU: any perfsuite command, test or script run as if on an H200 (or an MI300X), on the CPU.

    PERFSUITE_SIMULATED_GPU=h200 perfsuite run scenarios/quick.toml     # or mi300x (the ROCm branches)

It stands in for the part of `torch.cuda` perfsuite uses: device count and properties, `torch.version`'s
cuda / hip, timing events on a host clock, streams, `_sleep`, synchronisation, graph capture and replay
with graph memory pools (`graphs`), allocator statistics and free memory, NVTX ranges, and the stream
each kernel runs on (`runtime`).
Tensors asked for on `cuda` live on the CPU and say they are on `cuda:0` (`tensors`); Triton kernels run
in Triton's interpreter, and their launches are graph nodes. Where CUDA has rules (no host synchronisation
during capture, replays on the captured addresses, no host tensor in a device op) the simulation enforces
them, so code that breaks them fails here as it would on the device.

Its figures are host times of CPU work: the device name carries "(simulated)", every row says
`simulated = True`, and none of it is a GPU measurement. `torch.compile` is not simulated (Inductor would
emit GPU code): the compile path is a skipped row.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from perfsuite.simulated_gpu import graphs, runtime, tensors
from perfsuite.simulated_gpu.profiles import LABEL, PROFILES, Profile, profile

ENV = "PERFSUITE_SIMULATED_GPU"
T = TypeVar("T")
_DEVICE_CACHED: list[Callable[..., object]] = []
"""Functions whose cached answers depend on the device (`device_cached`), cleared when the simulation
comes or goes."""


def device_cached(function: Callable[..., T]) -> Callable[..., T]:
    """`functools.cache`, its answers forgotten when a simulated GPU is installed or uninstalled."""
    cached = functools.cache(function)
    _DEVICE_CACHED.append(cached)
    return cached


class _Installed:
    def __init__(self, prof: Profile):
        self.profile = prof
        self.saved: list[tuple[object, str, object]] = []
        self.modes = [tensors.DevicePlacement(), tensors.DeviceWork()]

    def patch(self, owner: object, name: str, value: object) -> None:
        self.saved.append((owner, name, getattr(owner, name, None)))
        setattr(owner, name, value)


_INSTALLED: _Installed | None = None


def active() -> Profile | None:
    """The simulated GPU in use, or None."""
    return _INSTALLED.profile if _INSTALLED else None


class _Generator(torch.Generator):
    """`torch.Generator(device="cuda")` on the simulated GPU: a CPU generator (tensors live there)."""

    def __new__(cls, device: object = "cpu") -> torch.Generator:
        return super().__new__(cls, device="cpu")

    def __init__(self, device: object = "cpu") -> None:
        pass


def kernel_counts() -> tuple[int, int]:
    """(kernels run, host launch calls) on the simulated GPU so far."""
    st = runtime.state()
    return st.kernels, st.launches


def kernels_by_stream() -> dict[object, int]:
    """Kernels run on the simulated GPU so far, by the stream that was current when each ran."""
    return dict(runtime.state().by_stream)


def timing_label() -> str:
    """What a figure timed on the simulated GPU says of itself ("" on real hardware)."""
    return "(simulated GPU: host clock)" if _INSTALLED else ""


def _patch_torch_cuda(inst: _Installed) -> None:
    prof = inst.profile
    cuda = torch.cuda
    props = prof.properties()
    functions = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "init": lambda: None,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "get_device_properties": lambda device=None: props,
        "get_device_name": lambda device=None: props.name,
        "get_device_capability": lambda device=None: (prof.major, prof.minor),
        "get_arch_list": lambda: [f"sm_{prof.major}{prof.minor}"],
        "synchronize": runtime.synchronize,
        "_sleep": runtime._sleep,
        "Event": runtime.Event,
        "Stream": runtime.Stream,
        "stream": runtime.stream,
        "current_stream": runtime.current_stream,
        "default_stream": runtime.default_stream,
        "set_stream": runtime.set_stream,
        "device": runtime.device,
        "memory_allocated": runtime.memory_allocated,
        "max_memory_allocated": runtime.max_memory_allocated,
        "reset_peak_memory_stats": runtime.reset_peak_memory_stats,
        "memory_reserved": runtime.memory_reserved,
        "mem_get_info": runtime.mem_get_info,
        "empty_cache": runtime.empty_cache,
        "CUDAGraph": graphs.CUDAGraph,
        "graph": graphs.graph,
        "graph_pool_handle": graphs.graph_pool_handle,
    }
    for name, value in functions.items():
        inst.patch(cuda, name, value)
    nvtx = {"range_push": runtime.range_push, "range_pop": runtime.range_pop, "mark": runtime.mark}
    for name, value in {**nvtx, "range": runtime.nvtx_range}.items():
        inst.patch(cuda.nvtx, name, value)
    inst.patch(torch.version, "cuda", prof.runtime if prof.backend == "cuda" else None)
    inst.patch(torch.version, "hip", prof.runtime if prof.backend == "rocm" else None)
    inst.patch(torch, "Generator", _Generator)


def _patch_triton(inst: _Installed) -> None:
    """Triton launches become graph nodes (and skip the capture checks their host copies would trip)."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # no Triton: its variants are skipped rows
        return
    original = InterpretedFunction.run

    def run(self, *args, **kwargs):
        launch = lambda: original(self, *args, **kwargs)  # noqa: E731 - the launch, as a graph node
        return graphs.record_launch(self.__name__, launch, (*args, *kwargs.values()))

    inst.patch(InterpretedFunction, "run", run)


def _clear_caches() -> None:
    for cached in _DEVICE_CACHED:
        cached.cache_clear()  # type: ignore[attr-defined]


def install(key: str) -> Profile:
    """Simulate the GPU named `key` ("h200", "mi300x") in this process until `uninstall()`."""
    global _INSTALLED
    prof = profile(key)
    if _INSTALLED is not None:
        if _INSTALLED.profile == prof:
            return prof
        uninstall()
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "the simulated GPU runs Triton in its interpreter: set TRITON_INTERPRET=1 before Triton is "
            f"imported (or set {ENV} before starting Python)"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    inst = _Installed(prof)
    runtime.STATE = runtime.State(prof)
    _patch_torch_cuda(inst)
    _patch_triton(inst)
    for mode in inst.modes:
        mode.__enter__()
    _INSTALLED = inst
    _clear_caches()
    return prof


def uninstall() -> None:
    """Give torch.cuda back (no-op when nothing is simulated)."""
    global _INSTALLED
    inst = _INSTALLED
    if inst is None:
        return
    for mode in reversed(inst.modes):
        mode.__exit__(None, None, None)
    for owner, name, value in reversed(inst.saved):
        setattr(owner, name, value)
    runtime.STATE = None
    _INSTALLED = None
    _clear_caches()


@contextlib.contextmanager
def simulated(key: str = "h200") -> Iterator[Profile]:
    """`with simulated("h200"):` the block runs on the simulated GPU."""
    prof = install(key)
    try:
        yield prof
    finally:
        uninstall()


def install_from_env() -> Profile | None:
    """Install the GPU named by PERFSUITE_SIMULATED_GPU, if set (perfsuite does this when imported)."""
    key = os.environ.get(ENV, "").strip()
    return install(key) if key else None


__all__ = [
    "ENV",
    "LABEL",
    "PROFILES",
    "Profile",
    "active",
    "install",
    "install_from_env",
    "kernel_counts",
    "kernels_by_stream",
    "simulated",
    "timing_label",
    "uninstall",
]

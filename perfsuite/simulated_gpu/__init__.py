"""A simulated GPU: any perfsuite command, test or script run as if on an H200 (or an MI300X), on the CPU.

    PERFSUITE_SIMULATED_GPU=h200 perfsuite run scenarios/quick.toml     # or mi300x (the ROCm branches)

It stands in for `torch.cuda` (`runtime`) and GPU tensors and graphs (`tensors`), runs Triton in its
interpreter, and enforces CUDA's rules, so code that breaks them fails here as on the device. Its figures
are host times of CPU work, marked "(simulated)"; `torch.compile` is not simulated (docs/simulated-gpu.md)."""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from perfsuite.core import machine
from perfsuite.simulated_gpu import runtime, tensors
from perfsuite.simulated_gpu.runtime import LABEL as LABEL
from perfsuite.simulated_gpu.runtime import PROFILES, Profile

ENV = "PERFSUITE_SIMULATED_GPU"
T = TypeVar("T")
_DEVICE_CACHED: list[Callable[..., object]] = []  # cleared when the simulation comes or goes


def device_cached(function: Callable[..., T]) -> Callable[..., T]:
    """`functools.cache`, its answers forgotten when a simulated GPU is installed or uninstalled."""
    cached = functools.cache(function)
    _DEVICE_CACHED.append(cached)
    return cached


def active() -> Profile | None:
    """The simulated GPU in use, or None."""
    return runtime.STATE.profile if runtime.STATE else None


def kernel_counts() -> tuple[int, int]:
    """(kernels run, host launch calls) on the simulated GPU so far."""
    return runtime.state().kernels, runtime.state().launches


def kernels_by_stream() -> dict[object, int]:
    """Kernels run on the simulated GPU so far, by the stream that was current when each ran."""
    return dict(runtime.state().by_stream)


class _Generator(torch.Generator):
    """`torch.Generator(device="cuda")` on the simulated GPU: a CPU generator (tensors live there)."""

    def __new__(cls, device: object = "cpu") -> torch.Generator:
        return super().__new__(cls, device="cpu")

    def __init__(self, device: object = "cpu") -> None: ...


def _patches(prof: Profile) -> Iterator[tuple[object, str, object]]:
    """(owner, name, stand-in) for each part of torch (and Triton) the simulation replaces."""
    props, st = prof.properties(), runtime.state
    cuda = {
        "is_available": lambda: True, "is_initialized": lambda: True, "init": lambda: None,
        "device_count": lambda: 1, "current_device": lambda: 0, "set_device": lambda device: None,
        "get_device_properties": lambda device=None: props, "get_device_name": lambda device=None: props.name,
        "get_device_capability": lambda device=None: (prof.major, prof.minor), "graph": tensors.graph,
        "get_arch_list": lambda: [f"sm_{prof.major}{prof.minor}"], "CUDAGraph": tensors.CUDAGraph,
        "device": lambda device=None: contextlib.nullcontext(),  # one device, nothing to switch
        "default_stream": lambda device=None: runtime.DEFAULT_STREAM,
        "memory_allocated": lambda device=None: st().allocated,
        "memory_reserved": lambda device=None: st().allocated,
        "max_memory_allocated": lambda device=None: st().peak, "graph_pool_handle": tensors.graph_pool_handle,
        "reset_peak_memory_stats": lambda device=None: setattr(st(), "peak", st().allocated),
        "mem_get_info": lambda device=None: (  # (free, total): free capped by what the host can hold
            min(prof.total_memory - st().allocated, machine.host_available_bytes()), prof.total_memory),
        "empty_cache": lambda: None,  # nothing is cached: storages are freed with their last tensor
        "_sleep": lambda cycles: st().log.append(("sleep", int(cycles))),  # a GPU spin: the host goes on
    }  # fmt: skip
    for name in ("synchronize", "Event", "Stream", "stream", "current_stream", "set_stream"):
        cuda[name] = getattr(runtime, name)
    yield from ((torch.cuda, name, value) for name, value in cuda.items())
    yield torch.cuda.nvtx, "range_push", runtime.range_push
    yield torch.cuda.nvtx, "range_pop", runtime.range_pop
    yield torch.cuda.nvtx, "range", runtime.nvtx_range
    yield torch.cuda.nvtx, "mark", lambda name: st().log.append(("mark", name))
    yield torch.version, "cuda", prof.runtime if prof.backend == "cuda" else None
    yield torch.version, "hip", prof.runtime if prof.backend == "rocm" else None
    yield torch, "Generator", _Generator
    try:  # Triton launches become graph nodes (and skip the capture checks their host copies would trip)
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # no Triton: its variants are skipped rows
        return
    run = InterpretedFunction.run

    def launch(self, *args, **kwargs):
        return tensors.record_launch(lambda: run(self, *args, **kwargs), (*args, *kwargs.values()))

    yield InterpretedFunction, "run", launch


def install(key: str) -> Profile:
    """Simulate the GPU named `key` ("h200", "mi300x", any case) in this process until `uninstall()`."""
    if key.strip().lower() not in PROFILES:
        raise ValueError(f"unknown simulated GPU {key!r}; known: {', '.join(PROFILES)}")
    prof = PROFILES[key.strip().lower()]
    if active() == prof:
        return prof
    uninstall()  # another model's, if any
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "the simulated GPU runs Triton in its interpreter: set TRITON_INTERPRET=1 before Triton is "
            f"imported (or set {ENV} before starting Python)"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    st = runtime.STATE = runtime.State(prof, modes=[tensors.DevicePlacement(), tensors.DeviceWork()])
    for owner, name, value in _patches(prof):
        st.patched.append((owner, name, getattr(owner, name, None)))
        setattr(owner, name, value)
    for mode in st.modes:
        mode.__enter__()
    for cached in _DEVICE_CACHED:
        cached.cache_clear()  # type: ignore[attr-defined]
    return prof


def uninstall() -> None:
    """Give torch.cuda back (no-op when nothing is simulated)."""
    st = runtime.STATE
    if st is None:
        return
    for mode in reversed(st.modes):
        mode.__exit__(None, None, None)
    for owner, name, value in reversed(st.patched):
        setattr(owner, name, value)
    runtime.STATE = None
    for cached in _DEVICE_CACHED:
        cached.cache_clear()  # type: ignore[attr-defined]


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

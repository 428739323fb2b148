"""Execution paths: how a selector is run (eager, captured into a CUDA/HIP graph, torch.compile)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import torch

from perfsuite import simulated_gpu
from perfsuite.variants.base import Selector, bind

PATHS = ("eager", "graph", "compile")
Outputs = tuple[torch.Tensor, torch.Tensor]
Call = Callable[[], Outputs]


class GraphCaptureError(RuntimeError):
    """A call that could not be captured into a graph (a host sync, an unsupported op, ...)."""


def unavailable(path: str, device: torch.device) -> str | None:
    """Why `path` cannot run on `device`, or None when it can."""
    if path == "graph" and device.type != "cuda":
        return "graph capture needs a CUDA or ROCm GPU (CUDA graph / HIP graph); this run is on the CPU"
    if path == "compile" and simulated_gpu.active() and device.type == "cuda":
        return "torch.compile is not simulated: Inductor would emit GPU code for the simulated GPU"
    if path == "compile" and device.type == "cpu" and not (shutil.which("g++") or shutil.which("clang++")):
        return "torch.compile on the CPU needs a C++ compiler (g++ or clang++) on PATH"
    return None


@dataclass(frozen=True)
class PreparedCall:
    """One selector bound to its inputs on one path.

    `run` executes the path once (for parity); `body` is what a graph captures; `graphed` says whether
    timing should replay captured copies of `body` rather than call `run`.
    """

    path: str
    run: Call
    body: Call
    graphed: bool


def set_compile_limits() -> None:
    """Sweeps recompile per shape; raise dynamo's per-function cache so it never falls back to eager."""
    import torch._dynamo

    for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 4096)


@cache
def compiled(select: Selector) -> Selector:
    """`torch.compile` of a selector, shapes specialised (one compiled kernel set per shape)."""
    set_compile_limits()
    return torch.compile(select, dynamic=False)


class GraphCall:
    """`body` captured `unroll` times into one CUDA graph (a HIP graph on ROCm), replayed as one call."""

    def __init__(self, body: Call, device: torch.device, unroll: int = 1, warmup: int = 3):
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                body()
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                for _ in range(unroll):
                    outputs = body()
        except Exception as exc:  # capture errors come from many layers (torch, driver, Triton)
            raise GraphCaptureError(f"graph capture failed: {type(exc).__name__}: {exc}") from exc
        self.outputs = outputs
        self.unroll = unroll

    def __call__(self) -> Outputs:
        self.graph.replay()
        return self.outputs


def prepare(path: str, select: Selector, logits: torch.Tensor, k: int) -> PreparedCall:
    """Bind `select` to its inputs on `path` (a graph path captures once here)."""
    if path == "eager":
        call = bind(select, logits, k)
        return PreparedCall(path, call, call, graphed=False)
    if path == "compile":
        call = bind(compiled(select), logits, k)
        return PreparedCall(path, call, call, graphed=False)
    if path == "graph":
        reason = unavailable(path, logits.device)
        if reason:
            raise GraphCaptureError(reason)
        body = bind(select, logits, k)
        return PreparedCall(path, GraphCall(body, logits.device), body, graphed=True)
    raise ValueError(f"unknown path {path!r}; known: {', '.join(PATHS)}")

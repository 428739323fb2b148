"""Execution paths: how a selector is run (eager, captured into a CUDA/HIP graph, torch.compile)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

import torch

from perfsuite import simulated_gpu
from perfsuite.core.console import first_line
from perfsuite.variants.base import Selector, bind

PATHS = ("eager", "graph", "compile")
Outputs = tuple[torch.Tensor, torch.Tensor]
Call = Callable[[], Outputs]
# what ending an invalidated capture raises: the error that invalidated it is its `__context__`
INVALIDATED = ("previous error during capture", "capture invalidated", "cudaErrorStreamCaptureInvalidated")


class GraphCaptureError(RuntimeError):
    """A call that could not be captured into a graph; `cause` is the error that broke the capture."""

    def __init__(self, message: str, cause: BaseException | None = None):
        super().__init__(message)
        self.cause = cause


def capture_cause(exc: BaseException) -> BaseException:
    """The error that broke a capture, past a `GraphCaptureError` and `torch.cuda.graph`'s INVALIDATED."""
    while True:
        if isinstance(exc, GraphCaptureError) and exc.cause is not None:
            exc = exc.cause
        elif any(word in str(exc) for word in INVALIDATED) and exc.__context__ is not None:
            exc = exc.__context__
        else:
            return exc


def warm_up(body: Callable[[], object], device: torch.device, times: int) -> object:
    """Run `body` `times` on a side stream, as before a capture (handles, compilation); its last result."""
    result = None
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(times):
            result = body()
    torch.cuda.current_stream(device).wait_stream(stream)
    torch.cuda.synchronize(device)
    return result


@contextlib.contextmanager
def capturing(
    graph: torch.cuda.CUDAGraph, device: torch.device, pool: object = None, what: str = "graph capture failed"
) -> Iterator[None]:
    """The block captured into `graph`; on failure the caller's stream back (`torch.cuda.graph` leaves its
    side stream current) and a `GraphCaptureError`, "{what}: Type: first line" of the error that broke it."""
    before = torch.cuda.current_stream(device)
    try:
        with torch.cuda.graph(graph, pool=pool):
            yield
    except Exception as exc:
        cause = capture_cause(exc)  # capture errors come from many layers (torch, driver, Triton)
        raise GraphCaptureError(f"{what}: {first_line(cause)}", cause) from exc
    finally:
        torch.cuda.set_stream(before)


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
    """One selector bound to its inputs on one path: `run` runs the path once (for parity), `body` is what a
    graph captures; `graphed`: timing replays captured copies of `body` rather than call `run`."""

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
        warm_up(body, device, warmup)
        self.graph, self.unroll = torch.cuda.CUDAGraph(), unroll
        with capturing(self.graph, device):
            for _ in range(unroll):
                self.outputs = body()

    def __call__(self) -> Outputs:
        self.graph.replay()
        return self.outputs


def prepare(path: str, select: Selector, logits: torch.Tensor, k: int) -> PreparedCall:
    """Bind `select` to its inputs on `path` (a graph path captures once here)."""
    if path in ("eager", "compile"):
        call = bind(compiled(select) if path == "compile" else select, logits, k)
        return PreparedCall(path, call, call, graphed=False)
    if path == "graph":
        if reason := unavailable(path, logits.device):
            raise GraphCaptureError(reason)
        body = bind(select, logits, k)
        return PreparedCall(path, GraphCall(body, logits.device), body, graphed=True)
    raise ValueError(f"unknown path {path!r}; known: {', '.join(PATHS)}")

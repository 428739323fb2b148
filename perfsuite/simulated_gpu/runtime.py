"""The simulated device's runtime: its state, timing events on a host clock, streams, synchronisation, memory
statistics and NVTX ranges, stand-ins for the `torch.cuda` functions of the same names.

Work runs on the CPU, synchronously: an event records the host clock, `elapsed_time` is host time. A host
synchronisation during a capture raises `CaptureViolation` and invalidates the capture, so ending it raises
`CaptureInvalidated`, as CUDA does."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from perfsuite.core import machine
from perfsuite.simulated_gpu.profiles import Profile


class CaptureViolation(RuntimeError):
    """What CUDA refuses while a stream is being captured (a host sync, a pageable host-to-device copy)."""


class CaptureInvalidated(RuntimeError):
    """What `cudaStreamEndCapture` raises after an error invalidated the capture (that error is the
    exception's `__context__` when raised while it propagates)."""


@dataclass
class State:
    """Everything the simulated device knows while it is installed."""

    profile: Profile
    patched: list[tuple[object, str, object]] = field(default_factory=list)  # (owner, name, original)
    modes: list = field(default_factory=list)  # the torch modes entered on install
    allocated: int = 0
    peak: int = 0
    live: dict[int, int] = field(default_factory=dict)  # storage data_ptr -> bytes
    capture: object | None = None  # the graphs.Recorder of the capture in progress
    suspended: int = 0  # > 0 inside a Triton launch: its host copies are the kernel, not the caller's
    log: deque = field(default_factory=lambda: deque(maxlen=4096))  # (kind, detail) in queue order
    ranges: list[str] = field(default_factory=list)  # the open NVTX ranges
    kernels: int = 0  # device kernels run: aten ops that compute (not views) and Triton launches
    launches: int = 0  # host launch calls: one per eager kernel, one per graph replay
    replaying: int = 0  # > 0 while a graph replays its kernels
    invalidated: str = ""  # what invalidated the capture in progress ("" while it is valid)
    stream: Stream = field(default_factory=lambda: DEFAULT_STREAM)  # the current stream
    by_stream: dict[Stream, int] = field(default_factory=dict)  # kernels run, by the stream current then

    @property
    def capturing(self) -> bool:
        return self.capture is not None and not self.suspended


STATE: State | None = None


def state() -> State:
    if STATE is None:
        raise RuntimeError("the simulated GPU is not installed")
    return STATE


def check_not_capturing(what: str) -> None:
    """Raise as CUDA does when `what` (a host synchronisation) happens during a capture, which it
    invalidates (ending it raises `CaptureInvalidated`, even when the caller swallowed this error)."""
    if STATE is not None and STATE.capturing:
        STATE.invalidated = STATE.invalidated or what
        raise CaptureViolation(
            f"CUDA error: operation not permitted when stream is capturing ({what}; simulated GPU)"
        )


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Inside a simulated kernel launch: its own host work is neither checked nor recorded."""
    st = state()
    st.suspended += 1
    try:
        yield
    finally:
        st.suspended -= 1


def kernel_ran(replayed: bool = False) -> None:
    """Count one kernel on the current stream; an eager one is also a launch call (a replayed one was
    launched by its graph). A kernel's own host work and a capture's work (the replays run it) do not."""
    st = STATE
    if st is None or st.suspended or st.capture is not None:
        return
    st.kernels += 1
    st.launches += 0 if replayed else 1
    st.by_stream[st.stream] = st.by_stream.get(st.stream, 0) + 1


def allocate(ptr: int, nbytes: int) -> bool:
    """Count a new storage; False when it is already counted (a view, an in-place result), is a
    simulated kernel's own host copy, or comes from a replay (a graph's memory is its pool's)."""
    st = STATE
    if st is None or st.suspended or st.replaying or ptr in st.live or nbytes <= 0:
        return False
    st.live[ptr] = nbytes
    st.allocated += nbytes
    st.peak = max(st.peak, st.allocated)
    return True


def release(ptr: int) -> None:
    if STATE is not None and ptr in STATE.live:
        STATE.allocated -= STATE.live.pop(ptr)


def reset_peak_memory_stats(device: object = None) -> None:
    state().peak = state().allocated


def mem_get_info(device: object = None) -> tuple[int, int]:
    """(free, total): the GPU's total, free capped by what the host can hold (the tensors live there)."""
    total = state().profile.total_memory
    return min(total - state().allocated, machine.host_available_bytes()), total


class _Synchronous:
    """Work is synchronous: what was queued is done, and waiting for it is a host synchronisation."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        check_not_capturing(f"{type(self).__name__}.synchronize")


class Event(_Synchronous):
    """`torch.cuda.Event` on the host clock (work is synchronous, so recording time is completion time)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self.seconds: float | None = None

    def record(self, stream: object = None) -> None:
        self.seconds = time.perf_counter()
        if STATE is not None:
            STATE.log.append(("event", id(self)))

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to `end`, as CUDA reports them."""
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'")
        if self.seconds is None or end.seconds is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end.seconds - self.seconds) * 1e3

    def wait(self, stream: object = None) -> None: ...


def _sleep(cycles: int) -> None:
    """The GPU spin `torch.cuda._sleep`: it holds the device queue while the host goes on; logged only."""
    state().log.append(("sleep", int(cycles)))


def synchronize(device: object = None) -> None:
    check_not_capturing("torch.cuda.synchronize")
    state().log.append(("synchronize", None))


class Stream(_Synchronous):
    """`torch.cuda.Stream`: one queue in the simulation (work is synchronous), kept for its API and for the
    record of which stream each kernel ran on (`State.by_stream`)."""

    def __init__(self, device: object = None, priority: int = 0, **kwargs: object):
        self.device, self.priority = torch.device("cuda", 0), priority

    def wait_stream(self, stream: Stream) -> None: ...
    def wait_event(self, event: Event) -> None: ...
    def __exit__(self, *exc: object) -> None: ...
    def __enter__(self) -> Stream:
        return self

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event


DEFAULT_STREAM = Stream()


def current_stream(device: object = None) -> Stream:
    return STATE.stream if STATE is not None else DEFAULT_STREAM


def set_stream(s: Stream | None) -> None:
    """`torch.cuda.set_stream(s)`: make `s` the current stream (None: no change, as torch does)."""
    if s is not None:
        state().stream = s


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """`torch.cuda.stream(s)`: `s` is the current stream inside the block; leaving it restores the one
    before, and a block left by an error restores it too (`torch.cuda.graph` restores it by hand)."""
    before = current_stream()
    set_stream(s)
    try:
        yield
    finally:
        set_stream(before)


def range_push(name: str) -> int:
    st = state()
    st.ranges.append(name)
    st.log.append(("range_push", name))
    return len(st.ranges) - 1


def range_pop() -> int:
    st = state()
    if st.ranges:
        st.log.append(("range_pop", st.ranges.pop()))
    return len(st.ranges)


@contextlib.contextmanager
def nvtx_range(name: str, *args: object, **kwargs: object) -> Iterator[None]:
    range_push(name.format(*args, **kwargs) if args or kwargs else name)
    try:
        yield
    finally:
        range_pop()

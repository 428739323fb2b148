"""The simulated device's runtime: its state, timing events on a host clock, streams, synchronisation,
memory statistics and NVTX ranges, as stand-ins for the `torch.cuda` functions of the same names.

Work runs on the CPU, synchronously, so an event records the host clock when it is recorded and
`elapsed_time` is host time. What real capture forbids (a host synchronisation while a graph is being
captured) raises `CaptureViolation` here, as CUDA raises its "operation not permitted when stream is
capturing" error there; the capture is then invalidated, and ending it raises `CaptureInvalidated`, as
`cudaStreamEndCapture` does. Streams are objects with a current one, set and restored as
`torch.cuda.stream` and `torch.cuda.set_stream` do (a failed `torch.cuda.graph` leaves its side stream on).
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from perfsuite.core import machine
from perfsuite.simulated_gpu.profiles import Profile

LOG_LENGTH = 4096


class CaptureViolation(RuntimeError):
    """What CUDA refuses while a stream is being captured (a host sync, a pageable host-to-device copy)."""

    def __init__(self, what: str):
        super().__init__(
            f"CUDA error: operation not permitted when stream is capturing ({what}; simulated GPU)"
        )


class CaptureInvalidated(RuntimeError):
    """What `cudaStreamEndCapture` raises after an error invalidated the capture (its cause is the
    exception's `__context__` when raised while that error propagates)."""

    def __init__(self, first: str):
        super().__init__(
            "CUDA error: operation failed due to a previous error during capture "
            f"(simulated GPU; the first: {first})"
        )


@dataclass
class State:
    """Everything the simulated device knows while it is installed."""

    profile: Profile
    allocated: int = 0
    peak: int = 0
    live: dict[int, int] = field(default_factory=dict)  # storage data_ptr -> bytes
    capture: object | None = None  # the graphs.Recorder of the capture in progress
    suspended: int = 0  # > 0 inside a Triton launch: its host copies are the kernel, not the caller's
    log: deque = field(default_factory=lambda: deque(maxlen=LOG_LENGTH))  # (kind, detail) in queue order
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
        raise CaptureViolation(what)


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
    """Count one kernel, and the stream it runs on (the current one); an eager one is also a launch call
    (a replayed one was launched by its graph)."""
    st = STATE
    if st is None or st.suspended or (st.capture is not None):
        return  # a kernel's own host work, or a capture (recorded, run by the replays)
    st.kernels += 1
    st.launches += 0 if replayed else 1
    st.by_stream[st.stream] = st.by_stream.get(st.stream, 0) + 1


# ------------------------------------------------------------------------------------------ memory


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
    st = STATE
    if st is not None and ptr in st.live:
        st.allocated -= st.live.pop(ptr)


def memory_allocated(device: object = None) -> int:
    return state().allocated


def max_memory_allocated(device: object = None) -> int:
    return state().peak


def reset_peak_memory_stats(device: object = None) -> None:
    st = state()
    st.peak = st.allocated


def memory_reserved(device: object = None) -> int:
    return state().allocated


def mem_get_info(device: object = None) -> tuple[int, int]:
    """(free, total): the GPU's total, free capped by what the host can hold (the tensors live there)."""
    st = state()
    total = st.profile.total_memory
    return min(total - st.allocated, machine.host_available_bytes()), total


def empty_cache() -> None:
    """Nothing is cached: storages are freed when their last tensor goes."""


# ------------------------------------------------------------------------------------------ timing


class Event:
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

    def synchronize(self) -> None:
        check_not_capturing("Event.synchronize")

    def query(self) -> bool:
        return True

    def wait(self, stream: object = None) -> None:
        pass


def _sleep(cycles: int) -> None:
    """The GPU spin `torch.cuda._sleep`: it holds the device queue while the host goes on; logged only."""
    state().log.append(("sleep", int(cycles)))


def synchronize(device: object = None) -> None:
    check_not_capturing("torch.cuda.synchronize")
    state().log.append(("synchronize", None))


class Stream:
    """`torch.cuda.Stream`: one queue in the simulation (work is synchronous), kept for its API and for
    the record of which stream each kernel ran on (`State.by_stream`)."""

    def __init__(self, device: object = None, priority: int = 0, **kwargs: object):
        self.device = torch.device("cuda", 0)
        self.priority = priority

    def wait_stream(self, stream: Stream) -> None:
        pass

    def wait_event(self, event: Event) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        check_not_capturing("Stream.synchronize")

    def query(self) -> bool:
        return True

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


DEFAULT_STREAM = Stream()


def current_stream(device: object = None) -> Stream:
    return state().stream if STATE is not None else DEFAULT_STREAM


def default_stream(device: object = None) -> Stream:
    return DEFAULT_STREAM


def set_stream(s: Stream | None) -> None:
    """`torch.cuda.set_stream(s)`: make `s` the current stream (None: no change, as torch does)."""
    if s is not None:
        state().stream = s


class stream:
    """`torch.cuda.stream(s)`: `s` is the current stream inside the block; leaving it restores the one
    before (as `torch.cuda.StreamContext`: a context that is never left leaves `s` on)."""

    def __init__(self, s: Stream | None):
        self.s = s
        self.before: Stream | None = None

    def __enter__(self) -> None:
        self.before = current_stream()
        set_stream(self.s)

    def __exit__(self, *exc: object) -> None:
        set_stream(self.before)


class device:
    """`torch.cuda.device(i)`: one device, nothing to switch."""

    def __init__(self, index: object = None):
        self.index = index

    def __enter__(self) -> device:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


# ------------------------------------------------------------------------------------------ NVTX


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


def mark(name: str) -> None:
    state().log.append(("mark", name))


@contextlib.contextmanager
def nvtx_range(name: str, *args: object, **kwargs: object) -> Iterator[None]:
    range_push(name.format(*args, **kwargs) if args or kwargs else name)
    try:
        yield
    finally:
        range_pop()

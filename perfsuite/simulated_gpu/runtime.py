"""The simulated device's runtime: the GPU models, the state, and stand-ins for `torch.cuda`'s events (on the
host clock: work runs on the CPU, synchronously), streams, synchronisation and NVTX ranges."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

LABEL = "(simulated)"  # appended to the device name: every row, table and report of a simulated run says it
STATE: State | None = None  # the installed simulation's


@dataclass(frozen=True)
class Profile:
    """One simulated GPU model: what `torch.cuda.get_device_properties` and `torch.version` say."""

    key: str  # the PERFSUITE_SIMULATED_GPU value
    model: str  # the name the real device reports
    backend: str  # "cuda" | "rocm"
    runtime: str  # torch.version.cuda or torch.version.hip
    major: int
    minor: int
    sms: int  # SMs (CUs on ROCm)
    warp_size: int
    l2_bytes: int
    total_memory: int
    gcn_arch: str = ""  # ROCm's gcnArchName

    @property
    def name(self) -> str:
        return f"{self.model} {LABEL}"

    def properties(self) -> SimpleNamespace:
        """A stand-in for `torch.cuda.get_device_properties(i)` (the fields perfsuite and Triton read)."""
        rocm = {"gcnArchName": self.gcn_arch} if self.backend == "rocm" else {}
        return SimpleNamespace(
            name=self.name, major=self.major, minor=self.minor, total_memory=self.total_memory, **rocm,
            multi_processor_count=self.sms, L2_cache_size=self.l2_bytes, warp_size=self.warp_size,
            is_integrated=False, is_multi_gpu_board=False, uuid="00000000-0000-0000-0000-000000000000",
        )  # fmt: skip


# l2_bytes: the 60 MiB torch reports on the project's H200 (docs/measuring.md), not the datasheet's 50 MB
PROFILES: dict[str, Profile] = {p.key: p for p in (
    Profile("h200", "NVIDIA H200", "cuda", "13.0", 9, 0, 132, 32, 60 << 20, 150_110_945_280),
    Profile("mi300x", "AMD Instinct MI300X", "rocm", "6.4.43482", 9, 4, 304, 64, 4 << 20, 205_822_885_888,
            "gfx942:sramecc+:xnack-"),
)}  # fmt: skip


class CaptureViolation(RuntimeError):
    """What CUDA refuses while a stream is being captured (a host sync, a pageable host-to-device copy)."""


class CaptureInvalidated(RuntimeError):
    """What ending a capture raises after an error invalidated it (that error: its `__context__`)."""


@dataclass
class State:
    """Everything the simulated device knows while it is installed."""

    profile: Profile
    patched: list[tuple[object, str, object]] = field(default_factory=list)  # (owner, name, original)
    modes: list = field(default_factory=list)  # the torch modes entered on install
    allocated: int = 0
    peak: int = 0
    live: dict[int, int] = field(default_factory=dict)  # storage data_ptr -> bytes
    capture: object | None = None  # the tensors.Recorder of the capture in progress
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


def state() -> State:
    if STATE is None:
        raise RuntimeError("the simulated GPU is not installed")
    return STATE


def check_not_capturing(what: str) -> None:
    """Refuse `what` (a host sync) in a capture, as CUDA does: it invalidates the capture, even if caught."""
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


def kernel_ran() -> None:
    """Count a kernel (a launch too, unless replayed); not a launch's own host work, nor a capture's work."""
    st = STATE
    if st is None or st.suspended or st.capture is not None:
        return
    st.kernels += 1
    st.launches += 0 if st.replaying else 1
    st.by_stream[st.stream] = st.by_stream.get(st.stream, 0) + 1


def allocate(ptr: int, nbytes: int) -> bool:
    """Count a new storage; False if counted already, a kernel's own host copy, or a replay's (its pool's)."""
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

    def synchronize(self) -> None:  # work is synchronous: waiting for it is only a host synchronisation
        check_not_capturing("Event.synchronize")


def synchronize(device: object = None) -> None:
    check_not_capturing("torch.cuda.synchronize")
    state().log.append(("synchronize", None))


class Stream:
    """`torch.cuda.Stream`: work is synchronous, but each kernel's stream is counted (`State.by_stream`)."""

    def __init__(self, device: object = None, priority: int = 0, **kwargs: object):
        self.device = torch.device("cuda", 0)

    def wait_stream(self, stream: Stream) -> None: ...
    def synchronize(self) -> None:
        check_not_capturing("Stream.synchronize")


DEFAULT_STREAM = Stream()


def current_stream(device: object = None) -> Stream:
    return STATE.stream if STATE is not None else DEFAULT_STREAM


def set_stream(s: Stream | None) -> None:
    """`torch.cuda.set_stream(s)` (None: no change, as torch does)."""
    if s is not None:
        state().stream = s


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """`torch.cuda.stream(s)`: `s` is current inside the block, the one before after it, even on an error."""
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

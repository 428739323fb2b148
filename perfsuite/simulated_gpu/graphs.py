"""Graph capture and replay on the simulated GPU, with the rules of CUDA graphs (HIP graphs on ROCm).

A capture records the device work the captured code does, op by op (aten ops through a dispatch mode,
Triton launches through the interpreter's entry point), on the very tensors it touched; a replay runs that
work again on the same tensors, writing each op's result into the storage it wrote during capture. So, as on
a GPU, a replay reads whatever the captured input buffers hold now, writes only the captured outputs, and
never re-runs the Python around the ops: code that swaps in a new input tensor after capture gets the same
stale answer it would get on the device. As on a GPU, the capture itself computes nothing that lasts: memory
it wrote gets its old contents back, memory it allocated holds garbage until the first replay, so code
that reads a graph's outputs before replaying it reads NaN here. Host synchronisation during capture raises
(see `tensors.DevicePlacement`, and `tensors.capture_hazard` for the aten ops whose output size depends on
device data and for indices on the host), and invalidates the capture: as on CUDA, ending it raises
`runtime.CaptureInvalidated`, so `torch.cuda.graph` leaves the process on its side stream. Ending a failed
capture leaves nothing of it behind (the next capture starts clean).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perfsuite.simulated_gpu import runtime
from perfsuite.simulated_gpu.tensors import ALLOCATIONS, capture_hazard

_pool_ids = itertools.count(1)


@dataclass
class Node:
    """One recorded piece of device work: `run()` redoes it on the captured tensors."""

    name: str
    run: Callable[[], None]


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under `tensor`, as bytes."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


@dataclass
class Recorder(TorchDispatchMode):
    """Records the device work of a capture (the dispatch mode pushed while it is in progress).

    The work also runs once, so the captured code gets real shapes to go on with; at the end of the capture
    `finish` undoes what it did, as a capture on a GPU computes nothing: memory that existed before the
    capture gets its contents back, memory allocated in it is left as garbage (all bits set: NaN, -1) until
    a replay computes it."""

    nodes: list[Node] = field(default_factory=list)
    born: dict[int, torch.Tensor] = field(default_factory=dict)  # storages allocated in the capture
    saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)  # (bytes, copy)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if runtime.state().suspended:
            return func(*args, **kwargs)
        hazard = capture_hazard(func, args, kwargs, self.born)
        if hazard:
            runtime.check_not_capturing(hazard)
        schema = getattr(func, "_schema", None)
        if schema is not None:
            written = [a for a, s in zip(args, schema.arguments, strict=False) if _writes(s)]
            written += [v for k, v in kwargs.items() if _writes(_argument(schema, k))]
            self.keep(written)
        result = func(*args, **kwargs)
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        returns = schema.returns if schema is not None else ()
        with runtime.suspended():
            for i, out in enumerate(outputs):
                fresh = not (i < len(returns) and returns[i].alias_info is not None)  # not a view
                if isinstance(out, torch.Tensor) and fresh:
                    self.born.setdefault(out.untyped_storage().data_ptr(), out)
        self.nodes.append(Node(str(func), _replay_of(func, args, kwargs, result)))
        return result

    def keep(self, tensors: list[object]) -> None:
        """Save the contents of pre-existing memory the capture is about to write."""
        with runtime.suspended():
            for t in tensors:
                if not isinstance(t, torch.Tensor):
                    continue
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.born and ptr not in self.saved:
                    whole = _bytes_of(t)
                    self.saved[ptr] = (whole, whole.clone())

    def finish(self) -> None:
        """Undo the capture's effects: old memory restored, memory born in it left as garbage."""
        with runtime.suspended():
            for whole, copy in self.saved.values():
                whole.copy_(copy)
            for ptr, tensor in self.born.items():
                if ptr not in self.saved:
                    _bytes_of(tensor).fill_(255)
        self.saved.clear()


def _argument(schema, name: str):
    return next((a for a in schema.arguments if a.name == name), None)


def _writes(argument) -> bool:
    return argument is not None and argument.alias_info is not None and argument.alias_info.is_write


def _replay_of(func, args: tuple, kwargs: dict, captured: object) -> Callable[[], None]:
    """Redo `func` on the same inputs, refreshing the storages its captured outputs own."""
    schema = getattr(func, "_schema", None)
    returns = schema.returns if schema is not None else ()
    outputs = captured if isinstance(captured, (tuple, list)) else (captured,)
    refill = [
        i
        for i, out in enumerate(outputs)
        if isinstance(out, torch.Tensor)
        and not (i < len(returns) and returns[i].alias_info is not None)  # views, in-place results
        and func not in ALLOCATIONS
    ]

    def run() -> None:
        fresh = func(*args, **kwargs)
        fresh = fresh if isinstance(fresh, (tuple, list)) else (fresh,)
        with runtime.suspended():  # bookkeeping of the simulation, not a kernel of the graph
            for i in refill:
                outputs[i].copy_(fresh[i])

    return run


def record_launch(name: str, launch: Callable[[], object], arguments: tuple = ()) -> object:
    """A simulated kernel launch: run it (its host copies unchecked), and record it when capturing."""
    st = runtime.state()
    capture = st.capture if st.capturing else None
    runtime.kernel_ran(replayed=st.replaying > 0)
    if capture is not None:  # which arguments a kernel writes is its own business: keep them all
        capture.keep(list(arguments))
    with runtime.suspended():
        result = launch()
    if capture is not None:
        capture.nodes.append(Node(name, lambda: _relaunch(launch)))
    return result


def _relaunch(launch: Callable[[], object]) -> None:
    runtime.kernel_ran(replayed=True)
    with runtime.suspended():
        launch()


class CUDAGraph:
    """`torch.cuda.CUDAGraph`: capture_begin / capture_end record, `replay` redoes the recorded work."""

    def __init__(self, keep_graph: bool = False):
        self.recorder: Recorder | None = None
        self.nodes: list[Node] = []
        self.pool_id: int | None = None

    def capture_begin(self, pool: object = None, capture_error_mode: str = "global") -> None:
        st = runtime.state()
        if st.capture is not None:
            raise RuntimeError("a graph capture is already in progress (simulated GPU)")
        if st.stream is runtime.DEFAULT_STREAM:
            raise RuntimeError(
                "CUDA graphs must be captured on a non-default stream. (However, after capture, it's ok "
                "to replay them on the default stream.) (simulated GPU)"
            )
        st.invalidated = ""
        self.pool_id = pool if isinstance(pool, int) else next(_pool_ids)
        self.recorder = Recorder()
        st.capture = self.recorder
        self.recorder.__enter__()
        st.log.append(("capture_begin", self.pool_id))

    def capture_end(self) -> None:
        """End the capture; `runtime.CaptureInvalidated` (and no graph) when an error invalidated it.
        Either way the capture is over: its dispatch mode is off and the memory it wrote restored."""
        st = runtime.state()
        assert self.recorder is not None, "capture_end without capture_begin"
        recorder, self.recorder = self.recorder, None
        st.capture = None
        try:
            recorder.__exit__(None, None, None)
        finally:
            recorder.finish()
        first, st.invalidated = st.invalidated, ""
        if first:
            self.reset()
            st.log.append(("capture_failed", first))
            raise runtime.CaptureInvalidated(first)
        self.nodes = recorder.nodes
        st.log.append(("capture_end", len(self.nodes)))

    def replay(self) -> None:
        st = runtime.state()
        if self.recorder is not None or st.capture is not None:
            raise RuntimeError("cannot replay a graph while a capture is in progress (simulated GPU)")
        if self.pool_id is None:
            raise RuntimeError("replay of a graph that was never captured (simulated GPU)")
        st.log.append(("replay", len(self.nodes)))
        st.launches += 1  # one graph launch for all its kernels
        st.replaying += 1
        try:
            for node in self.nodes:
                node.run()
        finally:
            st.replaying -= 1

    def reset(self) -> None:
        self.nodes, self.pool_id = [], None

    def pool(self) -> int:
        if self.pool_id is None:
            raise RuntimeError("the graph has no memory pool before capture (simulated GPU)")
        return self.pool_id

    def enable_debug_mode(self) -> None:
        pass


def graph_pool_handle() -> int:
    return next(_pool_ids)


class graph:
    """`with torch.cuda.graph(g, pool=..., stream=...)`: capture the block into `g` on a side stream.

    As torch's: `__exit__` ends the capture first and restores the stream after, so when ending raises
    (an error invalidated the capture) the side stream stays the current stream."""

    default_capture_stream: runtime.Stream | None = None

    def __init__(
        self,
        cuda_graph: CUDAGraph,
        pool: object = None,
        stream: object = None,
        capture_error_mode: str = "global",
    ):
        if stream is None and graph.default_capture_stream is None:
            graph.default_capture_stream = runtime.Stream()
        self.cuda_graph, self.pool = cuda_graph, pool
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = runtime.stream(self.capture_stream)

    def __enter__(self) -> None:
        runtime.synchronize()
        self.stream_ctx.__enter__()
        self.cuda_graph.capture_begin(self.pool)

    def __exit__(self, exc_type, exc, tb) -> None:
        self.cuda_graph.capture_end()
        self.stream_ctx.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            self.cuda_graph.reset()  # a capture cut short is not replayed here

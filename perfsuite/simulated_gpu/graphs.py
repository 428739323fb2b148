"""Graph capture and replay on the simulated GPU, with the rules of CUDA graphs (HIP graphs on ROCm).

A capture records the device work op by op (aten ops through a dispatch mode, Triton launches through the
interpreter's entry point) on the tensors it touched; a replay redoes it on those tensors, so it reads what
the captured inputs hold now and never re-runs the Python around the ops. As on a GPU, the capture itself
computes nothing that lasts, and one a host synchronisation invalidated leaves nothing behind."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from perfsuite.simulated_gpu import runtime
from perfsuite.simulated_gpu.tensors import ALLOCATIONS, capture_hazard, fresh_outputs

_pool_ids = itertools.count(1)


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under `tensor`, as bytes."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


def _writes(argument) -> bool:
    return argument is not None and argument.alias_info is not None and argument.alias_info.is_write


class Recorder(TorchDispatchMode):
    """Records the device work of a capture (the dispatch mode pushed while it is in progress). The work
    also runs once, so the captured code gets real shapes to go on with; `finish` undoes it."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[Callable[[], object]] = []  # each redoes one piece of device work
        self.born: dict[int, torch.Tensor] = {}  # storages allocated in the capture
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # (bytes, copy) of what it overwrote

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if runtime.state().suspended:
            return func(*args, **kwargs)
        hazard = capture_hazard(func, args, kwargs, self.born)
        if hazard:
            runtime.check_not_capturing(hazard)
        schema = getattr(func, "_schema", None)
        if schema is not None:
            by_name = {a.name: a for a in schema.arguments}
            written = [a for a, s in zip(args, schema.arguments, strict=False) if _writes(s)]
            self.keep(written + [v for k, v in kwargs.items() if _writes(by_name.get(k))])
        result = func(*args, **kwargs)
        fresh = fresh_outputs(func, result)
        with runtime.suspended():
            for _, out in fresh:
                self.born.setdefault(out.untyped_storage().data_ptr(), out)
        refill = [] if func in ALLOCATIONS else fresh

        def replay() -> None:  # `func` again, its results copied into the storages the capture's own
            again = func(*args, **kwargs)
            again = again if isinstance(again, (tuple, list)) else (again,)
            with runtime.suspended():  # bookkeeping of the simulation, not a kernel of the graph
                for i, out in refill:
                    out.copy_(again[i])

        self.nodes.append(replay)
        return result

    def keep(self, tensors: list[object]) -> None:
        """Save the contents of pre-existing memory the capture is about to write."""
        with runtime.suspended():
            for t in tensors:
                if isinstance(t, torch.Tensor):
                    ptr = t.untyped_storage().data_ptr()
                    if ptr not in self.born and ptr not in self.saved:
                        whole = _bytes_of(t)
                        self.saved[ptr] = (whole, whole.clone())

    def finish(self) -> None:
        """Undo the capture's effects: old memory restored, memory born in it left as garbage (bits set)."""
        with runtime.suspended():
            for whole, copy in self.saved.values():
                whole.copy_(copy)
            for ptr, tensor in self.born.items():
                if ptr not in self.saved:
                    _bytes_of(tensor).fill_(255)
        self.saved.clear()


def record_launch(launch: Callable[[], object], arguments: tuple = ()) -> object:
    """A simulated kernel launch: run it (its host copies unchecked), and record it when capturing."""
    st = runtime.state()
    capture = st.capture if st.capturing else None
    runtime.kernel_ran(replayed=st.replaying > 0)
    if capture is not None:  # which arguments a kernel writes is its own business: keep them all
        capture.keep(list(arguments))
    with runtime.suspended():
        result = launch()
    if capture is not None:
        capture.nodes.append(lambda: record_launch(launch))  # replayed: counted, not recorded
    return result


class CUDAGraph:
    """`torch.cuda.CUDAGraph`: capture_begin / capture_end record, `replay` redoes the recorded work."""

    def __init__(self, keep_graph: bool = False):
        self.recorder: Recorder | None = None
        self.nodes: list[Callable[[], object]] = []
        self.pool_id: int | None = None

    def enable_debug_mode(self) -> None: ...

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
        self.recorder = st.capture = Recorder()
        self.recorder.__enter__()
        st.log.append(("capture_begin", self.pool_id))

    def capture_end(self) -> None:
        """End the capture; `runtime.CaptureInvalidated` (and no graph) when an error invalidated it.
        Either way the capture is over: its dispatch mode is off and the memory it wrote restored."""
        st = runtime.state()
        assert self.recorder is not None, "capture_end without capture_begin"
        recorder, self.recorder, st.capture = self.recorder, None, None
        try:
            recorder.__exit__(None, None, None)
        finally:
            recorder.finish()
        first, st.invalidated = st.invalidated, ""
        if first:
            self.reset()
            st.log.append(("capture_failed", first))
            raise runtime.CaptureInvalidated(
                "CUDA error: operation failed due to a previous error during capture (simulated GPU; the "
                f"first: {first})"
            )
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
                node()
        finally:
            st.replaying -= 1

    def reset(self) -> None:
        self.nodes, self.pool_id = [], None

    def pool(self) -> int:
        if self.pool_id is None:
            raise RuntimeError("the graph has no memory pool before capture (simulated GPU)")
        return self.pool_id


def graph_pool_handle() -> int:
    return next(_pool_ids)


class graph:
    """`with torch.cuda.graph(g, pool=..., stream=...)`: capture the block into `g` on a side stream. As
    torch's, the stream is restored after the capture ends, so when ending raises the side stream stays."""

    default_capture_stream: runtime.Stream | None = None

    def __init__(self, cuda_graph: CUDAGraph, pool: object = None, stream: object = None, **options: object):
        if stream is None:
            graph.default_capture_stream = graph.default_capture_stream or runtime.Stream()
        self.cuda_graph, self.pool = cuda_graph, pool
        self.capture_stream = stream or graph.default_capture_stream

    def __enter__(self) -> None:
        runtime.synchronize()
        self.before = runtime.current_stream()
        runtime.set_stream(self.capture_stream)
        self.cuda_graph.capture_begin(self.pool)

    def __exit__(self, exc_type, exc, tb) -> None:
        self.cuda_graph.capture_end()
        runtime.set_stream(self.before)
        if exc_type is not None:
            self.cuda_graph.reset()  # a capture cut short is not replayed here

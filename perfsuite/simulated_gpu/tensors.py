"""Tensors and graphs on the simulated GPU. Tensors live on the CPU and say they are on `cuda:0`; a torch
function mode places them and refuses what a GPU refuses (a host tensor in a device op; in a capture, a host
sync or a pageable upload, found at the aten level too); a dispatch mode counts kernels and allocations. A
capture records the device work (ops, Triton launches), a replay redoes it on the captured tensors; as on a
GPU, a capture computes nothing that lasts, and an invalidated one leaves nothing behind."""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perfsuite.simulated_gpu import runtime

MARK = "_perfsuite_simulated_gpu"
DEVICE = torch.device("cuda", 0)
HOST = torch.device("cpu")

_Tensor = torch.Tensor
aten = torch.ops.aten
ANSWERS = {  # what a tensor says of its device: (on the simulated device, on the host)
    _Tensor.device.__get__: (DEVICE, HOST), _Tensor.is_cuda.__get__: (True, False),
    _Tensor.get_device: (0, -1),
}  # fmt: skip
HOST_SYNCS = {
    _Tensor.item, _Tensor.tolist, _Tensor.numpy, _Tensor.__bool__, _Tensor.__int__, _Tensor.__float__,
    _Tensor.__index__, _Tensor.nonzero, torch.nonzero, _Tensor.unique, torch.unique, torch.masked_select,
    _Tensor.masked_select,
}  # fmt: skip
# ops that take tensors of both devices legitimately (copies, indexing with host indices)
MOVES = {_Tensor.to, _Tensor.cuda, _Tensor.cpu, _Tensor.copy_, _Tensor.__setitem__, _Tensor.__getitem__}
HOST_DATA_FACTORIES = {torch.tensor, torch.as_tensor}
DATA_DEPENDENT = {  # output sizes that depend on device data: CUDA reads them back to the host (a sync)
    aten.nonzero.default, aten.masked_select.default, aten._unique.default, aten._unique2.default,
    aten.unique_dim.default, aten.unique_consecutive.default, aten.unique_dim_consecutive.default,
    aten.bincount.default,
}  # fmt: skip
# advanced indexing: a list of index tensors as the second argument
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
# ops that only allocate: no kernel runs, their contents are undefined (a replay need not refill them)
ALLOCATIONS = {aten.empty.memory_format, aten.empty_strided.default}
_pool_ids = itertools.count(1)  # graph memory pools


def on_device(value: object) -> bool:
    return isinstance(value, torch.Tensor) and getattr(value, MARK, False)


def _mark(value: object, placed: bool) -> None:
    """Mark every tensor in `value` (a tensor, or a tuple or list of results) as on the device or not."""
    if isinstance(value, torch.Tensor):
        with contextlib.suppress(AttributeError, RuntimeError):  # a tensor that takes no attributes
            setattr(value, MARK, placed)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _mark(item, placed)


def _is_gpu(spec: object) -> bool | None:
    """True for a cuda device (its name, a bare index), False for another device, None for no device."""
    if isinstance(spec, str):
        with contextlib.suppress(RuntimeError):  # not a device name: stays a string, no device
            spec = torch.device(spec)
    if isinstance(spec, torch.device):
        return spec.type == "cuda"
    return True if isinstance(spec, int) and not isinstance(spec, bool) else None


def _name(func: object) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)


def fresh_outputs(func: object, result: object) -> list[tuple[int, torch.Tensor]]:
    """The outputs of aten op `func` that are new storages (not views, not in-place results), by position."""
    returns = getattr(getattr(func, "_schema", None), "returns", ())
    outputs = enumerate(result if isinstance(result, (tuple, list)) else (result,))
    aliased = {i for i, r in enumerate(returns) if r.alias_info is not None}
    return [(i, out) for i, out in outputs if isinstance(out, torch.Tensor) and i not in aliased]


class DevicePlacement(TorchFunctionMode):
    """Puts the simulated device's tensors on the CPU and keeps up the appearance of a GPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in ANSWERS:
            return ANSWERS[func][not on_device(args[0])]
        target = _is_gpu(kwargs["device"]) if "device" in kwargs else None  # the result's: None, the inputs'
        if target:
            kwargs["device"] = HOST
        if func == _Tensor.to:  # `.to(device[, dtype])`: the device argument moved to the host; `.to(other)`
            for i, value in enumerate(args[1:], start=1):
                if isinstance(value, torch.Tensor):
                    target = on_device(value)
                    break
                if (gpu := _is_gpu(value)) is not None:
                    args, target = (*args[:i], HOST, *args[i + 1 :]), gpu
                    break
        elif func == _Tensor.cuda:
            target, args, kwargs = True, args[:1], {}
            func = _Tensor.clone if not on_device(args[0]) else (lambda t: t)
        elif func == _Tensor.cpu:
            target = False
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        self._check(func, tensors, target)
        result = func(*args, **kwargs)
        moved = target is not None and tensors and on_device(tensors[0]) != target
        if moved and func in (_Tensor.to, _Tensor.cpu) and result is tensors[0]:
            result = result.clone()  # a copy between host and device is a new tensor
        if func not in (_Tensor.__setitem__, _Tensor.copy_):
            _mark(result, target if target is not None else any(on_device(t) for t in tensors))
        return result

    @staticmethod
    def _check(func, tensors: list[torch.Tensor], target: bool | None) -> None:
        """What a GPU refuses: mixed devices in one op; host syncs and pageable uploads during capture."""
        st = runtime.STATE
        if st is None or st.suspended:
            return
        if st.capturing:
            on_gpu = any(on_device(t) for t in tensors)
            if func in HOST_SYNCS and on_gpu:
                runtime.check_not_capturing(f"{_name(func)} copies a device value to the host")
            if target is False and on_gpu:
                runtime.check_not_capturing(f"{_name(func)} copies device memory to the host")
            upload = func in HOST_DATA_FACTORIES or any(not on_device(t) and t.dim() > 0 for t in tensors)
            if target is True and upload:
                runtime.check_not_capturing(f"{_name(func)} copies pageable host memory to the device")
        if func not in MOVES and target is None and len({on_device(t) for t in tensors if t.dim() > 0}) > 1:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
                f"and cpu! ({_name(func)}; simulated GPU)"
            )


def capture_hazard(func: object, args: tuple, kwargs: dict, born: dict[int, torch.Tensor]) -> str:
    """What CUDA refuses in the aten op during a capture ("" for nothing): a host read of device data, a copy
    of host memory to the device. A tensor no torch function made (indexing makes some in C++) is where its
    base is, else on the device if the capture allocated it (`born`: `x[True]`'s index), else on the host."""

    def device(value: object) -> bool:
        if not isinstance(value, torch.Tensor):
            return False
        placed = getattr(value, MARK, None)
        if placed is None:
            with torch._C.DisableTorchFunction():
                base = value._base
            placed = getattr(base, MARK, None) if base is not None else None
        return placed if placed is not None else value.untyped_storage().data_ptr() in born

    name = getattr(func, "__name__", str(func))
    if not args or not device(args[0]):
        return ""
    if func is aten._local_scalar_dense.default:
        return "a device scalar read on the host (.item())"
    if func in DATA_DEPENDENT:
        return f"aten.{name}: its output size depends on device data, which the host must read (a host sync)"
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "aten.repeat_interleave without output_size: its output size depends on device data (a sync)"
    if func not in INDEXING or len(args) < 2:
        return ""
    indices = [i for i in args[1] if isinstance(i, torch.Tensor)]
    if any(not device(i) for i in indices):
        return (
            f"aten.{name} with an index on the host (a host tensor or a Python list): CUDA copies it from "
            "pageable host memory to the device"
        )
    value = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = (args[3] if len(args) > 3 else kwargs.get("accumulate")) or False
    scalar = isinstance(value, torch.Tensor) and value.numel() == 1 and not device(value)
    # `x[mask] = scalar`: CUDA runs masked_fill_, no sync
    fill = func is not aten.index.Tensor and len(indices) == 1 and not accumulate and scalar
    if any(i.dtype in (torch.bool, torch.uint8) for i in indices) and not fill:
        return (
            f"aten.{name} with a boolean mask (x[mask]): CUDA turns the mask into indices with nonzero, "
            "whose output size the host must read (a host sync)"
        )
    return ""


class DeviceWork(TorchDispatchMode):
    """The device's bookkeeping: an op that computes is a kernel, a storage it creates an allocation."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        returns = getattr(getattr(func, "_schema", None), "returns", ())
        views = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        if not views and func not in ALLOCATIONS:
            runtime.kernel_ran()
        for _, out in fresh_outputs(func, result):
            if out.device.type == "cpu":
                storage = out.untyped_storage()
                if runtime.allocate(storage.data_ptr(), storage.nbytes()):
                    weakref.finalize(out, runtime.release, storage.data_ptr())
        return result


def _bytes_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage under `tensor`, as bytes."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


class Recorder(TorchDispatchMode):
    """Records a capture's device work, run once for the shapes the code goes on with (`finish` undoes it)."""

    def __init__(self) -> None:
        super().__init__()
        self.nodes: list[Callable[[], object]] = []  # each redoes one piece of device work
        self.born: dict[int, torch.Tensor] = {}  # storages allocated in the capture
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # (bytes, copy) of what it overwrote

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if runtime.state().suspended:
            return func(*args, **kwargs)
        if hazard := capture_hazard(func, args, kwargs, self.born):
            runtime.check_not_capturing(hazard)
        schema = func._schema.arguments  # the memory the op writes, passed by position or by name
        given = {**{a.name: v for a, v in zip(schema, args, strict=False)}, **kwargs}
        self.keep([given[a.name] for a in schema if a.is_write and a.name in given])
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
            for t in (t for t in tensors if isinstance(t, torch.Tensor)):
                ptr = t.untyped_storage().data_ptr()
                if ptr not in self.born and ptr not in self.saved:
                    self.saved[ptr] = (whole := _bytes_of(t), whole.clone())

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
    capture = runtime.state().capture if runtime.state().capturing else None
    runtime.kernel_ran()
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
        self.nodes: list[Callable[[], object]] = []
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
        st.capture = Recorder()
        st.capture.__enter__()
        st.log.append(("capture_begin", self.pool_id))

    def capture_end(self) -> None:
        """End the capture (memory it wrote restored); `CaptureInvalidated`, no graph, if invalidated."""
        st = runtime.state()
        assert isinstance(st.capture, Recorder), "capture_end without capture_begin"
        recorder, st.capture = st.capture, None
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
        if st.capture is not None:
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
    """`torch.cuda.graph`: capture on a side stream, which stays current if ending the capture raises."""

    default_capture_stream = runtime.Stream()

    def __init__(self, cuda_graph: CUDAGraph, pool: object = None, stream: object = None, **options: object):
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

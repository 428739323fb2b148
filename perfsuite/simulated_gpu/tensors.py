"""Tensors on the simulated GPU: their data lives on the CPU, and they say they are on `cuda:0`.

`DevicePlacement` (a torch function mode) moves every `device="cuda..."` request to the CPU and marks the
tensors that are on the simulated device, so `.device`, `.is_cuda` and `.get_device()` answer as a GPU
tensor would, `.cpu()` makes a host copy and `.to("cuda")` a device copy. It refuses what a GPU refuses:
a host tensor mixed into a device op, and, during a graph capture, any host synchronisation
(`.item()`, `.tolist()`, `bool(t)`, `.cpu()`, `nonzero`, ...) or pageable host-to-device copy.
`capture_hazard` finds the same at the aten level, whatever Python called: ops whose output size depends
on device data (`nonzero`, `masked_select`, `unique`, boolean-mask indexing `x[x > 0]`, one-argument
`torch.where`, ...) and indices on the host (`x[torch.tensor([0, 2])]`, `x[[0, 2]]`), which CUDA copies
to the device first.
`DeviceWork` (a torch dispatch mode) counts the kernels ops run and every new storage they create, the
simulated allocator's statistics (`memory_allocated`, `max_memory_allocated`).
"""

from __future__ import annotations

import contextlib
import weakref

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from perfsuite.simulated_gpu import runtime

MARK = "_perfsuite_simulated_gpu"
DEVICE = torch.device("cuda", 0)
HOST = torch.device("cpu")

_Tensor = torch.Tensor
DEVICE_GETTERS = {_Tensor.device.__get__, _Tensor.is_cuda.__get__}
HOST_SYNCS = {
    _Tensor.item,
    _Tensor.tolist,
    _Tensor.numpy,
    _Tensor.__bool__,
    _Tensor.__int__,
    _Tensor.__float__,
    _Tensor.__index__,
    _Tensor.nonzero,
    torch.nonzero,
    _Tensor.unique,
    torch.unique,
    torch.masked_select,
    _Tensor.masked_select,
}
MOVES = {_Tensor.to, _Tensor.cuda, _Tensor.cpu, _Tensor.copy_, _Tensor.__setitem__, _Tensor.__getitem__}
"""Ops that take tensors of both devices legitimately (copies, indexing with host indices)."""
HOST_DATA_FACTORIES = {torch.tensor, torch.as_tensor}


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
    """True for a cuda device (or its name), False for another device, None when `spec` is no device."""
    if isinstance(spec, torch.device):
        return spec.type == "cuda"
    if isinstance(spec, str):
        try:
            return torch.device(spec).type == "cuda"
        except RuntimeError:
            return None
    if isinstance(spec, int) and not isinstance(spec, bool):
        return True  # a bare index is a CUDA ordinal
    return None


class DevicePlacement(TorchFunctionMode):
    """Puts the simulated device's tensors on the CPU and keeps up the appearance of a GPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in DEVICE_GETTERS:
            placed = on_device(args[0])
            if func == _Tensor.is_cuda.__get__:
                return placed
            return DEVICE if placed else HOST
        if func == _Tensor.get_device:
            return 0 if on_device(args[0]) else -1

        target = None  # True: result on the device, False: on the host, None: where its inputs are
        if "device" in kwargs:
            target = _is_gpu(kwargs["device"])
            if target:
                kwargs["device"] = HOST
        if func == _Tensor.to:
            args, target = self._to_arguments(args, target)
        elif func == _Tensor.cuda:
            target, args, kwargs = True, args[:1], {}
            func = _Tensor.clone if not on_device(args[0]) else (lambda t: t)
        elif func == _Tensor.cpu:
            target = False

        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        self._check(func, tensors, target)
        if target is False and tensors and on_device(tensors[0]) and func in (_Tensor.to, _Tensor.cpu):
            result = func(*args, **kwargs)
            if result is tensors[0]:
                result = result.clone()  # a device-to-host copy is a new tensor
        elif target is True and func == _Tensor.to and tensors and not on_device(tensors[0]):
            result = func(*args, **kwargs)
            if result is tensors[0]:
                result = result.clone()  # a host-to-device copy is a new tensor
        else:
            result = func(*args, **kwargs)
        placed = target if target is not None else any(on_device(t) for t in tensors)
        if func in (_Tensor.__setitem__, _Tensor.copy_):
            return result
        _mark(result, placed)
        return result

    @staticmethod
    def _to_arguments(args: tuple, target: bool | None) -> tuple[tuple, bool | None]:
        """`Tensor.to(device[, dtype])` or `.to(other)`: the device argument moved to the host."""
        moved = list(args)
        for i, value in enumerate(args[1:], start=1):
            if isinstance(value, torch.Tensor):
                target = on_device(value)
                break
            gpu = _is_gpu(value)
            if gpu is not None:
                target = gpu
                moved[i] = HOST
                break
        return tuple(moved), target

    @staticmethod
    def _check(func, tensors: list[torch.Tensor], target: bool | None) -> None:
        """What a GPU refuses: mixed devices in one op; host syncs and pageable uploads during capture."""
        st = runtime.STATE
        if st is None or st.suspended:
            return
        if st.capturing:
            if func in HOST_SYNCS and any(on_device(t) for t in tensors):
                runtime.check_not_capturing(f"{_name(func)} copies a device value to the host")
            if target is False and any(on_device(t) for t in tensors):
                runtime.check_not_capturing(f"{_name(func)} copies device memory to the host")
            if target is True and (
                func in HOST_DATA_FACTORIES or any(not on_device(t) and t.dim() > 0 for t in tensors)
            ):
                runtime.check_not_capturing(f"{_name(func)} copies pageable host memory to the device")
        if func in MOVES or target is not None:
            return
        devices = {on_device(t) for t in tensors if t.dim() > 0}
        if len(devices) > 1:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
                f"and cpu! ({_name(func)}; simulated GPU)"
            )


_aten = torch.ops.aten
DATA_DEPENDENT = {
    _aten.nonzero.default,
    _aten.masked_select.default,
    _aten._unique.default,
    _aten._unique2.default,
    _aten.unique_dim.default,
    _aten.unique_consecutive.default,
    _aten.unique_dim_consecutive.default,
    _aten.bincount.default,
}
"""Aten ops whose output size depends on device data: CUDA reads the size back to the host (a sync)."""
INDEXING = {
    _aten.index.Tensor,
    _aten.index_put.default,
    _aten.index_put_.default,
    _aten._index_put_impl_.default,
}
"""Advanced indexing: a list of index tensors as the second argument."""
MASKS = (torch.bool, torch.uint8)


def capture_hazard(func: object, args: tuple, kwargs: dict, born: dict[int, torch.Tensor]) -> str:
    """What in the aten op `func(*args, **kwargs)` CUDA refuses during a capture ("" for nothing): a
    host read of device data, or a copy of host memory to the device. `born`: the storages allocated in
    the capture. A tensor no torch function made (indexing makes its views and index tensors in C++) is
    where its base is; one with no base is on the device when the capture allocated it (the index tensor
    of `x[True]`), on the host when it did not (a Python list index, made before the capture saw it)."""

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
    if func is _aten._local_scalar_dense.default:
        return "a device scalar read on the host (.item())"
    if func in DATA_DEPENDENT:
        return f"aten.{name}: its output size depends on device data, which the host must read (a host sync)"
    if func is _aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "aten.repeat_interleave without output_size: its output size depends on device data (a sync)"
    if func not in INDEXING or len(args) < 2:
        return ""
    indices = [i for i in args[1] if isinstance(i, torch.Tensor)]
    host = [i for i in indices if not device(i)]
    if host:
        return (
            f"aten.{name} with an index on the host (a host tensor or a Python list): CUDA copies it from "
            "pageable host memory to the device"
        )
    masks = [i for i in indices if i.dtype in MASKS]
    value = args[2] if len(args) > 2 else kwargs.get("values")
    accumulate = (args[3] if len(args) > 3 else kwargs.get("accumulate")) or False
    fill = (  # `x[mask] = scalar`: CUDA runs masked_fill_, no sync
        func is not _aten.index.Tensor
        and len(indices) == 1
        and not accumulate
        and isinstance(value, torch.Tensor)
        and value.numel() == 1
        and not device(value)
    )
    if masks and not fill:
        return (
            f"aten.{name} with a boolean mask (x[mask]): CUDA turns the mask into indices with nonzero, "
            "whose output size the host must read (a host sync)"
        )
    return ""


def graphs_replaying() -> bool:
    st = runtime.STATE
    return st is not None and st.replaying > 0


def _name(func: object) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)


ALLOCATIONS = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default}
"""Ops that only allocate: no kernel runs, their contents are undefined (a replay need not refill them)."""


class DeviceWork(TorchDispatchMode):
    """The device's bookkeeping: every op that computes is a kernel (views are not), and the storages
    ops create (not views, not in-place results) are its allocations."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        schema = getattr(func, "_schema", None)
        returns = schema.returns if schema is not None else ()
        views = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        if not views and func not in ALLOCATIONS:
            runtime.kernel_ran(replayed=graphs_replaying())
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        for i, out in enumerate(outputs):
            aliases = i < len(returns) and returns[i].alias_info is not None
            if isinstance(out, torch.Tensor) and not aliases and out.device.type == "cpu":
                storage = out.untyped_storage()
                ptr = storage.data_ptr()
                if runtime.allocate(ptr, storage.nbytes()):
                    weakref.finalize(out, runtime.release, ptr)
        return result

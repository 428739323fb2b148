"""Tensors on the simulated GPU: their data lives on the CPU, and they say they are on `cuda:0`.

`DevicePlacement` (a torch function mode) places them and refuses what a GPU refuses: a host tensor in a
device op and, during a capture, a host synchronisation or a pageable upload (`capture_hazard` finds the
same at the aten level). `DeviceWork` (a dispatch mode) counts kernels and allocations."""

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
MOVES = {_Tensor.to, _Tensor.cuda, _Tensor.cpu, _Tensor.copy_, _Tensor.__setitem__, _Tensor.__getitem__}
"""Ops that take tensors of both devices legitimately (copies, indexing with host indices)."""
HOST_DATA_FACTORIES = {torch.tensor, torch.as_tensor}
DATA_DEPENDENT = {
    aten.nonzero.default, aten.masked_select.default, aten._unique.default, aten._unique2.default,
    aten.unique_dim.default, aten.unique_consecutive.default, aten.unique_dim_consecutive.default,
    aten.bincount.default,
}  # fmt: skip
"""Aten ops whose output size depends on device data: CUDA reads the size back to the host (a sync)."""
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
"""Advanced indexing: a list of index tensors as the second argument."""
ALLOCATIONS = {aten.empty.memory_format, aten.empty_strided.default}
"""Ops that only allocate: no kernel runs, their contents are undefined (a replay need not refill them)."""


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
    """True for a cuda device (or its name, or a bare index: a CUDA ordinal), False for another device,
    None when `spec` is no device."""
    if isinstance(spec, str):
        try:
            spec = torch.device(spec)
        except RuntimeError:
            return None
    if isinstance(spec, torch.device):
        return spec.type == "cuda"
    return True if isinstance(spec, int) and not isinstance(spec, bool) else None


def _name(func: object) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or str(func)


def fresh_outputs(func: object, result: object) -> list[tuple[int, torch.Tensor]]:
    """The outputs of aten op `func` that are new storages (not views, not in-place results), by position."""
    returns = getattr(getattr(func, "_schema", None), "returns", ())
    outputs = result if isinstance(result, (tuple, list)) else (result,)
    return [
        (i, out)
        for i, out in enumerate(outputs)
        if isinstance(out, torch.Tensor) and not (i < len(returns) and returns[i].alias_info is not None)
    ]


class DevicePlacement(TorchFunctionMode):
    """Puts the simulated device's tensors on the CPU and keeps up the appearance of a GPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in ANSWERS:
            return ANSWERS[func][not on_device(args[0])]
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
        result = func(*args, **kwargs)
        moved = target is not None and tensors and on_device(tensors[0]) != target
        if moved and func in (_Tensor.to, _Tensor.cpu) and result is tensors[0]:
            result = result.clone()  # a copy between host and device is a new tensor
        if func in (_Tensor.__setitem__, _Tensor.copy_):
            return result
        _mark(result, target if target is not None else any(on_device(t) for t in tensors))
        return result

    @staticmethod
    def _to_arguments(args: tuple, target: bool | None) -> tuple[tuple, bool | None]:
        """`Tensor.to(device[, dtype])` or `.to(other)`: the device argument moved to the host."""
        moved = list(args)
        for i, value in enumerate(args[1:], start=1):
            if isinstance(value, torch.Tensor):
                return args, on_device(value)
            gpu = _is_gpu(value)
            if gpu is not None:
                moved[i] = HOST
                return tuple(moved), gpu
        return args, target

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
            if target is True and (
                func in HOST_DATA_FACTORIES or any(not on_device(t) and t.dim() > 0 for t in tensors)
            ):
                runtime.check_not_capturing(f"{_name(func)} copies pageable host memory to the device")
        if func not in MOVES and target is None and len({on_device(t) for t in tensors if t.dim() > 0}) > 1:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
                f"and cpu! ({_name(func)}; simulated GPU)"
            )


def capture_hazard(func: object, args: tuple, kwargs: dict, born: dict[int, torch.Tensor]) -> str:
    """What in the aten op `func(*args, **kwargs)` CUDA refuses during a capture ("" for nothing): a host
    read of device data, or a copy of host memory to the device. A tensor no torch function made (indexing
    makes its views and index tensors in C++) is where its base is, or with no base on the device when the
    capture allocated it (`born`: the index tensor of `x[True]`), else on the host (a Python list index)."""

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
    """The device's bookkeeping: every op that computes is a kernel (views are not), and the storages
    ops create (not views, not in-place results) are its allocations."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        returns = getattr(getattr(func, "_schema", None), "returns", ())
        views = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)
        if not views and func not in ALLOCATIONS:
            st = runtime.STATE
            runtime.kernel_ran(replayed=st is not None and st.replaying > 0)
        for _, out in fresh_outputs(func, result):
            if out.device.type == "cpu":
                storage = out.untyped_storage()
                if runtime.allocate(storage.data_ptr(), storage.nbytes()):
                    weakref.finalize(out, runtime.release, storage.data_ptr())
        return result

"""External selectors: an engine's own top-k function measured, profiled and parity-checked like a built-in.

Named `package.module:function` (`pkg.mod:Class.method` too) or by a `perfsuite.selectors` entry point, it
declares a `Contract` (docs/selectors.md): `@selector(accuracy="exact", ...)`, or, with no perfsuite import,
`fn.__perfsuite_selector__ = {...}`. An indices-only selector gets `topk_p = 1.0` and accuracy "inexact".
Loading or declaring one wrongly is an `ExternalSelectorError`, wrong outputs a `ValueError` (one line each).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, get_args

import torch

from perfsuite.core.console import first_line
from perfsuite.core.dtypes import dtype_name
from perfsuite.variants.base import FP8_DTYPES, SUPPORTED_DTYPES, NanPolicy, Traffic, Variant, ideal_traffic

ATTRIBUTE = "__perfsuite_selector__"
GROUP = "perfsuite.selectors"
ALLOWED: dict[str, tuple[Any, ...]] = {
    "accuracy": ("exact", "rounded", "inexact"),
    "outputs": ("probs_and_indices", "indices"),
    "index_dtype": ("int64", "int32"),
    "preallocated": (False, True),
    "lowest_index_ties": (True, False),
    "nan": get_args(NanPolicy),
}
INDEX_DTYPES = {"int64": torch.int64, "int32": torch.int32}
LOGITS_DTYPES = {dtype_name(d): d for d in (*SUPPORTED_DTYPES, *FP8_DTYPES)}
DEFAULT_DTYPES = ("float32", "float16", "bfloat16")


class ExternalSelectorError(ValueError):
    """An external selector that cannot be loaded or is declared wrongly; the message is one line."""


@dataclass(frozen=True)
class Contract:
    """What an external selector declares about itself (see docs/selectors.md)."""

    accuracy: str
    outputs: str = "probs_and_indices"
    index_dtype: str = "int64"
    preallocated: bool = False
    lowest_index_ties: bool = True
    summary: str = ""
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    max_k: int | None = None
    nan: str = "unspecified"


KEYS = tuple(f.name for f in fields(Contract))


def _fail(name: str, message: str) -> ExternalSelectorError:
    return ExternalSelectorError(f"selector {name!r}: {message}")


def _allowed(values: tuple[Any, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def contract(name: str, declared: Any) -> Contract:
    """Validate a declaration (a `Contract` or a dict) of the selector `name`."""
    if type(declared).__name__ == "Contract":  # this module's, or another import's (a reload, pytester)
        declared = vars(declared)
    if not isinstance(declared, dict):
        raise _fail(name, f"{ATTRIBUTE} must be a dict or a Contract, got {type(declared).__name__}")
    declared = dict(declared)
    for key, value in declared.items():
        if key not in KEYS:
            raise _fail(name, f"unknown contract key {key!r}; allowed: {', '.join(KEYS)}")
        if key == "summary" and not isinstance(value, str):
            raise _fail(name, "contract key 'summary' must be a string")
        if key == "dtypes":
            declared[key] = _dtypes(name, value)
        if key == "max_k" and not (value is None or (type(value) is int and value >= 1)):
            allowed = "an integer >= 1 (the largest topk it supports: 1 for an argmax kernel) or None"
            raise _fail(name, f"contract key 'max_k' is {value!r}; allowed: {allowed}")
        if key in ALLOWED and not any(type(value) is type(v) and value == v for v in ALLOWED[key]):
            raise _fail(name, f"contract key {key!r} is {value!r}; allowed: {_allowed(ALLOWED[key])}")
    if "accuracy" not in declared:
        raise _fail(name, f"contract key 'accuracy' is required; allowed: {_allowed(ALLOWED['accuracy'])}")
    return Contract(**declared)


def _dtypes(name: str, value: Any) -> tuple[str, ...]:
    """A declared `dtypes`: a non-empty list or tuple of known dtype names (a lone name is fine)."""
    names = (value,) if isinstance(value, str) else value
    allowed = _allowed(tuple(LOGITS_DTYPES))
    if not isinstance(names, (list, tuple)) or not names:
        raise _fail(name, f"contract key 'dtypes' must be a non-empty list of names from {allowed}")
    if unknown := [item for item in names if item not in LOGITS_DTYPES]:
        where = "the float8 ones where this torch has them"
        raise _fail(name, f"contract key 'dtypes' holds {unknown[0]!r}; allowed: {allowed} ({where})")
    return tuple(dict.fromkeys(names))


def selector(*, accuracy: str, **declared: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a top-k selector (`Contract`'s keys, as `__perfsuite_selector__`); bad values raise at once."""

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        setattr(fn, ATTRIBUTE, contract(name, {"accuracy": accuracy, **declared}))
        return fn

    return declare


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor {dtype_name(value.dtype)} {tuple(value.shape)} on {value.device}"
    return f"a {type(value).__name__}"


def _check_result(
    name: str, result: Any, shape: tuple, index_dtype: torch.dtype, device, indices_only: bool
) -> None:
    """Shapes, dtypes and devices of what a selector returned."""
    pair = isinstance(result, (tuple, list))
    if indices_only and pair:
        raise ValueError(
            f"selector {name!r}: returned a {type(result).__name__}, but it declares "
            "outputs='indices' (return topk_index alone, or declare outputs='probs_and_indices')"
        )
    if not indices_only and not (pair and len(result) == 2):
        raise ValueError(
            f"selector {name!r}: returned {_describe(result)}, expected (topk_p, topk_index) "
            "(or declare outputs='indices')"
        )
    probs = [("topk_p", result[0], torch.float32)] if not indices_only else []
    for what, value, dtype in [*probs, ("topk_index", result if indices_only else result[1], index_dtype)]:
        tensor = isinstance(value, torch.Tensor)
        if not tensor or (tuple(value.shape), value.dtype, value.device) != (shape, dtype, device):
            expected = f"{dtype_name(dtype)} {shape} on {device}" if tensor else "a tensor"
            raise ValueError(f"selector {name!r}: {what} is {_describe(value)}, expected {expected}")


def adapt(name: str, fn: Callable[..., Any], declared: Contract) -> Variant:
    """A `Variant` calling `fn` by its contract, returning `(topk_p float32, topk_index int64)`."""
    index_dtype = INDEX_DTYPES[declared.index_dtype]
    indices_only, preallocated = declared.outputs == "indices", declared.preallocated
    buffers: dict[tuple, tuple[tuple[torch.Tensor, ...], torch.Tensor | None]] = {}  # outputs, ones
    checked: set[tuple] = set()

    def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        shape, device = (logits.shape[0], k), logits.device
        if (shape, device) not in buffers:  # allocated on the first call and reused: stable addresses
            kinds = (index_dtype,) if indices_only else (torch.float32, index_dtype)
            outs = tuple(torch.empty(shape, dtype=d, device=device) for d in kinds) if preallocated else ()
            ones = torch.ones(shape, dtype=torch.float32, device=device) if indices_only else None
            buffers[shape, device] = (outs, ones)
        outs, ones = buffers[shape, device]
        if not preallocated:
            result = fn(logits, k)
        else:  # into the outputs: (topk_p, topk_index), or topk_index alone
            fn(logits, k, *outs)
            result = outs[0] if indices_only else outs
        if (shape, device, logits.dtype) not in checked:
            _check_result(name, result, shape, index_dtype, device, indices_only)
            checked.add((shape, device, logits.dtype))
        topk_p, topk_index = (ones, result) if indices_only else result
        return topk_p, topk_index.long()  # int64 already: the same tensor

    select.__doc__ = getattr(fn, "__doc__", None)
    select.__qualname__ = select.__name__ = f"external[{name}]"
    return Variant(
        name=name,
        select=select,
        accuracy="inexact" if indices_only else declared.accuracy,  # type: ignore[arg-type]
        traffic=assumed_traffic,
        summary=summary_of(fn, declared),
        lowest_index_ties=declared.lowest_index_ties,
        dtypes=tuple(LOGITS_DTYPES[d] for d in declared.dtypes),
        max_k=declared.max_k,
        nan=declared.nan,  # type: ignore[arg-type]
    )


def assumed_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """The ideal traffic (passes unknown) and, for the memory-fit check, a softmax's `[B, V]` fp32 temp."""
    ideal = ideal_traffic(batch, vocab, k, dtype)
    return Traffic(ideal.read, ideal.write, batch * vocab * 4)


def summary_of(fn: Callable[..., Any], declared: Contract) -> str:
    d = declared
    own = d.summary or first_line(getattr(fn, "__doc__", None) or "") or "external selector"
    said = [
        (d.outputs == "indices", f"indices only, topk_p = 1.0 (declared {d.accuracy}; judged on indices)"),
        (d.index_dtype == "int32", "int32 indices widened"),
        (d.preallocated, "preallocated outputs"),
        (d.dtypes != DEFAULT_DTYPES, f"logits {', '.join(d.dtypes)}"),
        (d.max_k is not None, f"topk <= {d.max_k}"),
        (d.nan != "unspecified", f"NaN {d.nan}"),
        (True, "bytes model = ideal traffic (its passes are not known)"),
        (True, "memory check assumes one [B, V] fp32 temporary"),
    ]
    return f"{own} [external: {'; '.join(text for shown, text in said if shown)}]"


_LOADED: dict[str, Variant] = {}


def _resolve(spec: str, shown: str) -> Callable[..., Any]:
    """The callable `spec` ("package.module:attr.path") names; `shown` is how messages name it."""
    module_name, _, attr_path = (part.strip() for part in spec.partition(":"))
    if not module_name or not attr_path or ":" in attr_path:
        raise _fail(shown, f"expected 'package.module:function', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import runs arbitrary code: any failure is the selector's
        raise _fail(shown, f"cannot import {module_name}: {first_line(exc)}") from None
    where = module_name
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _fail(shown, f"{where} has no attribute {part!r}") from None
        except Exception as exc:
            raise _fail(shown, f"reading {where}.{part} failed: {first_line(exc)}") from None
        where = f"{where}.{part}"
    if not callable(obj):
        raise _fail(shown, f"{where} is not callable (it is a {type(obj).__name__})")
    return obj


def entry_points() -> dict[str, list[str]]:
    """Installed entry points of the group `perfsuite.selectors`: name -> their distinct values."""
    found: dict[str, dict[str, None]] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        found.setdefault(ep.name, {})[ep.value] = None
    return {name: list(values) for name, values in found.items()}


def external_names() -> list[str]:
    """Names of the installed `perfsuite.selectors` entry points, sorted."""
    return sorted(entry_points())


def load(name: str) -> Variant | None:
    """The external selector `name` (a `module:function` spec or an entry-point name) as a `Variant`,
    loaded once; None when it is neither. `ExternalSelectorError` if it cannot load."""
    if name in _LOADED:
        return _LOADED[name]
    if ":" in name:
        fn = _resolve(name, name)
    else:
        values = entry_points().get(name)
        if not values:
            return None
        if len(values) > 1:
            raise _fail(name, f"several {GROUP} entry points have this name: {', '.join(values)}")
        fn = _resolve(values[0], name)
    declared = getattr(fn, ATTRIBUTE, None)
    if declared is None:
        how = "@perfsuite.variants.external.selector(accuracy='exact'|'rounded'|'inexact', ...) or set its"
        raise _fail(name, f"no contract declared; decorate it with {how} {ATTRIBUTE} = {{'accuracy': ...}}")
    _LOADED[name] = adapt(name, fn, contract(name, declared))
    return _LOADED[name]

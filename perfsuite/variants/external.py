"""External selectors: an engine's own top-k function measured, profiled and parity-checked like a built-in.

A selector is named `package.module:function` (a dotted attribute path after the colon is fine:
`pkg.mod:Class.method`) or by an entry point of the group `perfsuite.selectors` whose value is that
string. It declares a small contract, with the decorator (engine code needs no other perfsuite import):

    from perfsuite.variants.external import selector

    @selector(accuracy="exact", index_dtype="int32", preallocated=True)
    def topk(logits, k, out_p, out_index): ...

or, with no perfsuite import at all, a plain dict attribute:

    topk.__perfsuite_selector__ = {"accuracy": "exact", "outputs": "indices"}

Contract keys:
  accuracy           required: "exact" | "rounded" | "inexact" (see `base.Accuracy`)
  outputs            "probs_and_indices" (default): `fn(logits, k) -> (topk_p, topk_index)`;
                     "indices" (argmax kernels): `fn(logits, k) -> topk_index`
  index_dtype        "int64" (default) | "int32": widened to int64 by the adapter (one cast, timed)
  preallocated       False (default) | True: `fn(logits, k, out_p, out_index)` ("indices":
                     `fn(logits, k, out_index)`) writes into outputs the adapter allocates once per
                     (batch, k, device) and reuses, so their addresses are stable as in a graph-captured
                     engine (the first call outside capture allocates them)
  lowest_index_ties  True (default) | False: ties among equal logits are broken towards the lower index
  dtypes             the logits dtypes it accepts, names from "float32", "float16", "bfloat16",
                     "float8_e4m3fn", "float8_e5m2" (the 8-bit ones where torch has them); default
                     the three 16/32-bit floats. Others are refused before the call; `perfsuite check`
                     records them as "not claimed", not as failures
  max_k              None (default: any k) | the largest topk it supports (1 for an argmax kernel): a
                     case or battery row with a larger k is a skip ("not claimed"), never a call
  nan                "unspecified" (default) | "largest" (NaN above every number, as torch.argmax) |
                     "smallest" (NaN below every number, -inf included, as SGLang's kernels): where
                     it ranks NaN logits; `perfsuite check` judges the indices of NaN rows by it
  summary            free text for `perfsuite variants` and the report

An indices-only selector claims nothing about probabilities: the adapter fills `topk_p` with 1.0 (as
`argmax_ones`) and the variant's accuracy is "inexact" whatever was declared, so parity judges its
indices (verdict "inexact" when they are right, "fail" when they are not).

Every problem loading or declaring a selector is an `ExternalSelectorError` with a one-line message
naming the selector; a selector returning the wrong thing raises a `ValueError` naming it (an error row
in a run, not a crash).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch

from perfsuite.core.console import first_line
from perfsuite.variants.base import (
    FP8_DTYPES,
    NAN_POLICIES,
    SUPPORTED_DTYPES,
    Traffic,
    Variant,
    always_available,
    ideal_traffic,
)

ATTRIBUTE = "__perfsuite_selector__"
GROUP = "perfsuite.selectors"
ALLOWED: dict[str, tuple[Any, ...]] = {
    "accuracy": ("exact", "rounded", "inexact"),
    "outputs": ("probs_and_indices", "indices"),
    "index_dtype": ("int64", "int32"),
    "preallocated": (False, True),
    "lowest_index_ties": (True, False),
    "nan": NAN_POLICIES,
}
HOW_TO_DECLARE = (
    "decorate it with @perfsuite.variants.external.selector(accuracy='exact'|'rounded'|'inexact', ...) "
    f"or set its {ATTRIBUTE} = {{'accuracy': ...}}"
)
INDEX_DTYPES = {"int64": torch.int64, "int32": torch.int32}
LOGITS_DTYPES = {str(d).removeprefix("torch."): d for d in (*SUPPORTED_DTYPES, *FP8_DTYPES)}
"""Logits dtypes a selector may declare, by name."""
DEFAULT_DTYPES = ("float32", "float16", "bfloat16")


class ExternalSelectorError(ValueError):
    """An external selector that cannot be loaded or is declared wrongly; the message is one line."""


@dataclass(frozen=True)
class Contract:
    """What an external selector declares about itself (see the module's docstring)."""

    accuracy: str
    outputs: str = "probs_and_indices"
    index_dtype: str = "int64"
    preallocated: bool = False
    lowest_index_ties: bool = True
    summary: str = ""
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    max_k: int | None = None
    nan: str = "unspecified"

    @property
    def indices_only(self) -> bool:
        return self.outputs == "indices"

    @property
    def torch_dtypes(self) -> tuple[torch.dtype, ...]:
        return tuple(LOGITS_DTYPES[name] for name in self.dtypes)


KEYS = tuple(f.name for f in fields(Contract))


def _allowed(values: tuple[Any, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def contract(name: str, declared: Any) -> Contract:
    """Validate a declaration (a `Contract` or a dict) of the selector `name`."""
    if isinstance(declared, Contract) or _contract_like(declared):
        declared = {key: getattr(declared, key) for key in KEYS}
    if not isinstance(declared, dict):
        raise ExternalSelectorError(
            f"selector {name!r}: {ATTRIBUTE} must be a dict or a Contract, got {type(declared).__name__}"
        )
    for key, value in declared.items():
        if key not in KEYS:
            raise ExternalSelectorError(
                f"selector {name!r}: unknown contract key {key!r}; allowed: {', '.join(KEYS)}"
            )
        if key == "summary":
            if not isinstance(value, str):
                raise ExternalSelectorError(f"selector {name!r}: contract key 'summary' must be a string")
        elif key == "dtypes":
            declared = {**declared, "dtypes": _dtypes(name, value)}
        elif key == "max_k":
            if value is not None and not (type(value) is int and value >= 1):
                raise ExternalSelectorError(
                    f"selector {name!r}: contract key 'max_k' is {value!r}; allowed: an integer >= 1 "
                    "(the largest topk it supports: 1 for an argmax kernel) or None"
                )
        elif not any(value is v or (type(value) is type(v) and value == v) for v in ALLOWED[key]):
            raise ExternalSelectorError(
                f"selector {name!r}: contract key {key!r} is {value!r}; allowed: {_allowed(ALLOWED[key])}"
            )
    if "accuracy" not in declared:
        allowed = _allowed(ALLOWED["accuracy"])
        raise ExternalSelectorError(
            f"selector {name!r}: contract key 'accuracy' is required; allowed: {allowed}"
        )
    return Contract(**declared)


def _contract_like(declared: Any) -> bool:
    """A `Contract` of another import of this module (a reloaded module, pytest's pytester): same fields."""
    return type(declared).__name__ == "Contract" and all(hasattr(declared, key) for key in KEYS)


def _dtypes(name: str, value: Any) -> tuple[str, ...]:
    """A declared `dtypes`: a non-empty list or tuple of known dtype names (a lone name is fine)."""
    names = (value,) if isinstance(value, str) else value
    allowed = _allowed(tuple(LOGITS_DTYPES))
    if not isinstance(names, (list, tuple)) or not names:
        raise ExternalSelectorError(
            f"selector {name!r}: contract key 'dtypes' must be a non-empty list of names from {allowed}"
        )
    for item in names:
        if item not in LOGITS_DTYPES:
            raise ExternalSelectorError(
                f"selector {name!r}: contract key 'dtypes' holds {item!r}; allowed: {allowed} "
                "(the float8 ones where this torch has them)"
            )
    return tuple(dict.fromkeys(names))


def selector(
    *,
    accuracy: str,
    outputs: str = "probs_and_indices",
    index_dtype: str = "int64",
    preallocated: bool = False,
    lowest_index_ties: bool = True,
    summary: str = "",
    dtypes: tuple[str, ...] | list[str] = DEFAULT_DTYPES,
    max_k: int | None = None,
    nan: str = "unspecified",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a function a top-k selector perfsuite can measure; returns the function unchanged, with
    its `Contract` in `__perfsuite_selector__`. A bad value raises `ExternalSelectorError` at once."""
    declared = {
        "accuracy": accuracy,
        "outputs": outputs,
        "index_dtype": index_dtype,
        "preallocated": preallocated,
        "lowest_index_ties": lowest_index_ties,
        "summary": summary,
        "dtypes": dtypes,
        "max_k": max_k,
        "nan": nan,
    }

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
        setattr(fn, ATTRIBUTE, contract(name, declared))
        return fn

    return declare


# ---------------------------------------------------------------- the adapter


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor {_dtype(value.dtype)} {tuple(value.shape)} on {value.device}"
    return f"a {type(value).__name__}"


def _check_tensor(name: str, what: str, value: Any, shape: tuple, dtype: torch.dtype, device) -> None:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"selector {name!r}: {what} is {_describe(value)}, expected a tensor")
    if tuple(value.shape) != shape or value.dtype != dtype or value.device != device:
        expected = f"{_dtype(dtype)} {shape} on {device}"
        raise ValueError(f"selector {name!r}: {what} is {_describe(value)}, expected {expected}")


def adapt(name: str, fn: Callable[..., Any], declared: Contract) -> Variant:
    """A `Variant` calling `fn` by its contract, returning `(topk_p float32, topk_index int64)`."""
    index_dtype = INDEX_DTYPES[declared.index_dtype]
    buffers: dict[tuple, tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]] = {}
    checked: set[tuple] = set()

    def outputs_for(logits: torch.Tensor, k: int) -> tuple[torch.Tensor | None, ...]:
        """(out_p, out_index, ones) for this shape, allocated on the first call and reused."""
        key = (logits.shape[0], k, logits.device)
        out = buffers.get(key)
        if out is None:
            shape, device = (logits.shape[0], k), logits.device
            out_p = out_index = ones = None
            if declared.preallocated:
                out_index = torch.empty(shape, dtype=index_dtype, device=device)
                if not declared.indices_only:
                    out_p = torch.empty(shape, dtype=torch.float32, device=device)
            if declared.indices_only:
                ones = torch.ones(shape, dtype=torch.float32, device=device)
            out = buffers[key] = (out_p, out_index, ones)
        return out

    def check(result: Any, logits: torch.Tensor, k: int) -> None:
        """Shapes, dtypes and devices of what `fn` returned, once per (batch, k, dtype, device)."""
        key = (logits.shape[0], k, logits.dtype, logits.device)
        if key in checked:
            return
        shape, device = (logits.shape[0], k), logits.device
        if declared.indices_only:
            if isinstance(result, (tuple, list)):
                raise ValueError(
                    f"selector {name!r}: returned a {type(result).__name__}, but it declares "
                    "outputs='indices' (return topk_index alone, or declare outputs='probs_and_indices')"
                )
            _check_tensor(name, "topk_index", result, shape, index_dtype, device)
        else:
            if not isinstance(result, (tuple, list)) or len(result) != 2:
                raise ValueError(
                    f"selector {name!r}: returned {_describe(result)}, expected (topk_p, topk_index) "
                    "(or declare outputs='indices')"
                )
            _check_tensor(name, "topk_p", result[0], shape, torch.float32, device)
            _check_tensor(name, "topk_index", result[1], shape, index_dtype, device)
        checked.add(key)

    def select(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        out_p, out_index, ones = outputs_for(logits, k)
        if declared.preallocated:
            if declared.indices_only:
                fn(logits, k, out_index)
                result: Any = out_index
            else:
                fn(logits, k, out_p, out_index)
                result = (out_p, out_index)
        else:
            result = fn(logits, k)
        check(result, logits, k)
        topk_p, topk_index = (ones, result) if declared.indices_only else result
        if index_dtype != torch.int64:
            topk_index = topk_index.long()
        return topk_p, topk_index

    select.__doc__ = getattr(fn, "__doc__", None)
    select.__qualname__ = select.__name__ = f"external[{name}]"
    return Variant(
        name=name,
        select=select,
        accuracy="inexact" if declared.indices_only else declared.accuracy,  # type: ignore[arg-type]
        traffic=assumed_traffic,
        summary=summary_of(fn, declared),
        lowest_index_ties=declared.lowest_index_ties,
        available=always_available,
        dtypes=declared.torch_dtypes,
        max_k=declared.max_k,
        nan=declared.nan,  # type: ignore[arg-type]
    )


def assumed_traffic(batch: int, vocab: int, k: int, dtype: torch.dtype) -> Traffic:
    """An external selector's model: the ideal traffic (its passes are not known), and for the memory-fit
    check one `[B, V]` float32 temporary, as a softmax or an upcast makes (its temporaries are not known
    either; the measured peak is in the row)."""
    ideal = ideal_traffic(batch, vocab, k, dtype)
    return Traffic(ideal.read, ideal.write, batch * vocab * 4)


def summary_of(fn: Callable[..., Any], declared: Contract) -> str:
    own = declared.summary or first_line(getattr(fn, "__doc__", None) or "") or "external selector"
    shape = []
    if declared.indices_only:
        shape.append(f"indices only, topk_p = 1.0 (declared {declared.accuracy}; judged on indices)")
    if declared.index_dtype == "int32":
        shape.append("int32 indices widened")
    if declared.preallocated:
        shape.append("preallocated outputs")
    if declared.dtypes != DEFAULT_DTYPES:
        shape.append(f"logits {', '.join(declared.dtypes)}")
    if declared.max_k is not None:
        shape.append(f"topk <= {declared.max_k}")
    if declared.nan != "unspecified":
        shape.append(f"NaN {declared.nan}")
    shape.append("bytes model = ideal traffic (its passes are not known)")
    shape.append("memory check assumes one [B, V] fp32 temporary")
    return f"{own} [external: {'; '.join(shape)}]"


# ---------------------------------------------------------------- resolution

_LOADED: dict[str, Variant] = {}


def _resolve(spec: str, shown: str) -> Callable[..., Any]:
    """The callable `spec` ("package.module:attr.path") names; `shown` is how messages name it."""
    module_name, _, attr_path = spec.partition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not module_name or not attr_path or ":" in attr_path:
        raise ExternalSelectorError(f"selector {shown!r}: expected 'package.module:function', got {spec!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import runs arbitrary code: any failure is the selector's
        raise ExternalSelectorError(
            f"selector {shown!r}: cannot import {module_name}: {first_line(exc)}"
        ) from None
    where = module_name
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ExternalSelectorError(f"selector {shown!r}: {where} has no attribute {part!r}") from None
        except Exception as exc:
            problem = f"{first_line(exc)}"
            raise ExternalSelectorError(
                f"selector {shown!r}: reading {where}.{part} failed: {problem}"
            ) from None
        where = f"{where}.{part}"
    if not callable(obj):
        raise ExternalSelectorError(
            f"selector {shown!r}: {where} is not callable (it is a {type(obj).__name__})"
        )
    return obj


def _declaration(name: str, fn: Callable[..., Any]) -> Contract:
    declared = getattr(fn, ATTRIBUTE, None)
    if declared is None:
        raise ExternalSelectorError(f"selector {name!r}: no contract declared; {HOW_TO_DECLARE}")
    return contract(name, declared)


def entry_points() -> dict[str, list[str]]:
    """Installed entry points of the group `perfsuite.selectors`: name -> their values."""
    found: dict[str, list[str]] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        values = found.setdefault(ep.name, [])
        if ep.value not in values:
            values.append(ep.value)
    return found


def external_names() -> list[str]:
    """Names of the installed `perfsuite.selectors` entry points, sorted."""
    return sorted(entry_points())


def is_spec(name: str) -> bool:
    """Whether `name` is a `module:function` spec (rather than a built-in or entry-point name)."""
    return ":" in name


def load(name: str) -> Variant | None:
    """The external selector `name` (a spec or an entry-point name) as a `Variant`, loaded once; None
    when `name` is neither (no ':' and no such entry point). `ExternalSelectorError` if it cannot load."""
    if name in _LOADED:
        return _LOADED[name]
    if is_spec(name):
        fn = _resolve(name, name)
    else:
        values = entry_points().get(name)
        if not values:
            return None
        if len(values) > 1:
            raise ExternalSelectorError(
                f"selector {name!r}: several {GROUP} entry points have this name: {', '.join(values)}"
            )
        fn = _resolve(values[0], name)
    variant = adapt(name, fn, _declaration(name, fn))
    _LOADED[name] = variant
    return variant


def clear() -> None:
    """Forget loaded selectors (tests; a module re-imported under the same name)."""
    _LOADED.clear()


__all__ = [
    "ATTRIBUTE",
    "GROUP",
    "Contract",
    "ExternalSelectorError",
    "adapt",
    "contract",
    "external_names",
    "load",
    "selector",
]
